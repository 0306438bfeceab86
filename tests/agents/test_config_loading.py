"""Reading a configuration document's text safely (agents/runtime/config/loading.py) and the
published JSON Schema of the format (agents/runtime/config/document.py)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from agents.runtime.config.document import document_json_schema
from agents.runtime.config.loading import (
    MAX_DOCUMENT_BYTES,
    DocumentUnreadable,
    dump_document,
    load_document,
)

PUBLISHED = Path(__file__).resolve().parents[2] / "docs" / "config-schema" / "v1.json"


def unreadable(text: str | bytes, **kwargs) -> str:
    with pytest.raises(DocumentUnreadable) as caught:
        load_document(text, **kwargs)
    return str(caught.value)


def test_yaml_and_json_read_to_the_same_data():
    data = {"version": 1, "tools": [{"name": "a", "tags": ["x"], "timeout_s": 2.5}]}
    assert load_document(dump_document(data, "yaml")) == data
    assert load_document(dump_document(data, "json")) == data
    assert load_document(json.dumps(data).encode()) == data


def test_yaml_is_read_without_python_objects():
    assert "not valid YAML" in unreadable("version: !!python/object/apply:os.system ['id']")


def test_yaml_aliases_are_refused_so_a_few_lines_cannot_expand_into_billions():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    assert "aliases" in unreadable(bomb)


def test_duplicate_keys_are_refused_rather_than_the_last_winning():
    assert "duplicate key 'version' (line 2)" in unreadable("version: 1\nversion: 0\n")


def test_syntax_errors_say_where():
    assert "(line 3, column 1)" in unreadable("version: 1\ntools: [\n")
    assert unreadable('{"version": 1,}', format="json").startswith("not valid JSON")


def test_huge_and_deep_documents_are_refused():
    assert "larger than" in unreadable("x: " + "a" * MAX_DOCUMENT_BYTES)
    assert "larger than" in unreadable(b"x" * (MAX_DOCUMENT_BYTES + 1))
    assert "nested more than" in unreadable("[" * 100_000 + "]" * 100_000, format="json")
    assert "nested more than" in unreadable("a: " + "[" * 200 + "]" * 200)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("- 1\n- 2\n", "must be a mapping"),
        ("1: one\n", "must be text"),
        ("when: 2024-01-01\n", "quote it"),
        ("x: .nan\n", "is not a JSON number"),
        ('{"x": NaN}', "NaN is not a JSON number"),
        ('x: "a\\0b"\n', "NUL"),
        (b"\xff\xfe", "UTF-8"),
        ("x: " + "1" * 5000, "a number is larger than"),  # (past Python's int conversion)
        ('{"x": ' + "1" * 5000 + "}", "a number is larger than"),
        ("x: 0x" + "f" * 20_000, "x: a number larger than"),  # (YAML reads it, then checked)
        ("x: 9223372036854775808", "x: a number larger than"),
    ],
)
def test_what_is_not_json_data_is_refused(text, reason):
    assert reason in unreadable(text)


def test_the_published_schema_is_current_and_valid():
    schema = document_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert json.loads(PUBLISHED.read_text()) == schema, (
        "docs/config-schema/v1.json is stale: run "
        "`python manage.py config schema > docs/config-schema/v1.json`"
    )


def test_the_published_schema_checks_a_tools_config_by_kind():
    validator = jsonschema.Draft202012Validator(document_json_schema())
    http = {"name": "t", "config": {"url": "https://x.example", "verb": "GET"}}
    builtin = {"name": "calculator", "kind": "builtin", "config": {"builtin": "calculator"}}
    assert list(validator.iter_errors({"version": 1, "tools": [builtin]})) == []
    assert list(validator.iter_errors({"version": 1, "tools": [http]}))
    assert list(validator.iter_errors({"version": 1, "tools": [builtin], "extra": 1}))
