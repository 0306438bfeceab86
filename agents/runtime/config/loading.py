"""A configuration document's text -> plain JSON data, treating the text as hostile.

YAML is read with PyYAML's safe loader (no Python objects), and further refuses aliases
(`*a`: a few lines of them expand into billions of nodes for whoever walks the result)
and duplicate keys (the last one would silently win). Both formats are bounded in size and
nesting, and the result must be JSON: string keys, no NaN/Infinity, no dates, no NUL
characters (PostgreSQL stores none of them).
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

import yaml

from tools.runtime.context import ConfigurationError

MAX_DOCUMENT_BYTES = 1_000_000
MAX_DEPTH = 64  # a document holds JSON Schemas (at most 32 deep) a few levels down
MAX_INTEGER = 2**63 - 1  # (a 64-bit integer: what any field here or a JSON Schema needs)

Format = Literal["yaml", "json"]


class DocumentUnreadable(ConfigurationError):
    """The text is not a document we can read; the message says where and why."""


class _SafeLoader(yaml.SafeLoader):
    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise DocumentUnreadable(
                f"YAML aliases (*name) are not accepted (line {mark.line + 1}); write the value out"
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, list | dict):
                raise DocumentUnreadable(
                    f"a key must be text (line {key_node.start_mark.line + 1})"
                )
            if key in seen:
                raise DocumentUnreadable(
                    f"duplicate key {str(key)[:80]!r} (line {key_node.start_mark.line + 1})"
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_document(text: str | bytes, *, format: Format | None = None) -> Any:
    """The data of a YAML or JSON document (`format` None: JSON if it starts with `{`).
    DocumentUnreadable says why it cannot be read."""
    if isinstance(text, bytes):
        if len(text) > MAX_DOCUMENT_BYTES:
            raise DocumentUnreadable(_too_large())
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise DocumentUnreadable("the document must be UTF-8 text") from None
    if len(text.encode("utf-8", "surrogatepass")) > MAX_DOCUMENT_BYTES:
        raise DocumentUnreadable(_too_large())
    if format is None:
        format = "json" if text.lstrip().startswith("{") else "yaml"
    try:
        if format == "json":
            data = json.loads(text, parse_constant=_refuse_constant)
        else:
            data = yaml.load(text, Loader=_SafeLoader)  # noqa: S506 - a SafeLoader subclass
    except json.JSONDecodeError as exc:
        raise DocumentUnreadable(
            f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except yaml.YAMLError as exc:
        raise DocumentUnreadable(f"not valid YAML: {_yaml_reason(exc)}") from None
    except RecursionError:
        raise DocumentUnreadable(f"nested more than {MAX_DEPTH} levels deep") from None
    except ValueError:  # an integer of more digits than Python converts (4300)
        raise DocumentUnreadable(f"a number is larger than {MAX_INTEGER}") from None
    if not isinstance(data, dict):
        raise DocumentUnreadable("the document must be a mapping (an object) at the top")
    _check_json(data, "", 0)
    return data


def _too_large() -> str:
    return f"the document is larger than {MAX_DOCUMENT_BYTES // 1000} kB"


def _refuse_constant(name: str) -> Any:
    raise DocumentUnreadable(f"{name} is not a JSON number")


def _yaml_reason(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or "unreadable"
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{str(problem)[:200]}{where}"


def _check_json(value: Any, path: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise DocumentUnreadable(f"nested more than {MAX_DEPTH} levels deep at {path or '(top)'}")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise DocumentUnreadable(
                    f"key {str(key)[:80]!r} at {path or '(top)'} must be text; quote it"
                )
            _check_text(key, path)
            _check_json(item, f"{path}.{key}" if path else key, depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_json(item, f"{path}[{index}]", depth + 1)
    elif isinstance(value, str):
        _check_text(value, path)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise DocumentUnreadable(f"{path}: {value} is not a JSON number")
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INTEGER:
        raise DocumentUnreadable(f"{path}: a number larger than {MAX_INTEGER}")
    elif value is not None and not isinstance(value, bool | int):
        # YAML dates, times, binary: ambiguous between formats, so write them as text.
        raise DocumentUnreadable(
            f"{path}: a {type(value).__name__} is not JSON data; quote it to make it text"
        )


def _check_text(text: str, path: str) -> None:
    if "\x00" in text:
        raise DocumentUnreadable(f"{path or '(top)'}: text may not contain NUL characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise DocumentUnreadable(f"{path or '(top)'}: text must be valid Unicode") from None


def dump_document(data: dict[str, Any], format: Format) -> str:
    """The document as YAML (keys in the document's order, block style) or JSON text."""
    if format == "json":
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
