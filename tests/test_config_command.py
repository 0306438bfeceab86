"""`manage.py config export|import|schema` (agentplatform/management/commands/config.py)."""

from __future__ import annotations

import io
import json

import pytest
import yaml
from django.core.management import CommandError, call_command

from agents.models import Agent
from agents.runtime.config.document import document_json_schema
from tests.factories import make_agent, make_connection

pytestmark = pytest.mark.django_db

PLANTED = "sk-PLANTED-command-9999"


def run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("config", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_export_import_round_trip_between_tenants(trio, tmp_path):
    make_connection(trio.acme, "claude", kind="anthropic", api_key=PLANTED)
    make_agent(trio.acme, "support", instructions="Help.")
    out, _ = run("export", "--tenant", "acme")
    assert PLANTED not in out and "secret: connection:claude" in out
    data = yaml.safe_load(out)
    data["connections"] = []  # globex holds no such key
    path = tmp_path / "acme.json"
    path.write_text(json.dumps(data))
    out, _ = run("import", "--tenant", "globex", str(path), "--dry-run")
    assert out.splitlines() == ["create agents support", "Dry run: nothing was changed."]
    assert not Agent.objects.filter(tenant=trio.globex).exists()
    out, _ = run("import", "--tenant", "globex", str(path))
    assert "Applied 1 change(s)." in out
    assert Agent.objects.get(tenant=trio.globex, slug="support").instructions == "Help."
    out, _ = run("import", "--tenant", "globex", str(path))
    assert out.strip() == "No changes."
    json_out, _ = run("export", "--tenant", "globex", "--format", "json")
    assert json.loads(json_out)["agents"][0]["slug"] == "support"


def test_import_reports_every_problem_with_its_path_and_changes_nothing(trio, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "version: 1\nagents:\n- {slug: a, name: A, connection: nowhere, colour: blue}\n"
        "- {slug: b, name: B, connection: nowhere}\n"
    )
    with pytest.raises(CommandError, match="not applied"):
        run("import", "--tenant", "acme", str(path))
    path.write_text("version: 1\nagents:\n- {slug: b, name: B, connection: nowhere}\n")
    err = io.StringIO()
    with pytest.raises(CommandError, match=r"1 problem\(s\)"):
        call_command("config", "import", "--tenant", "acme", str(path), stderr=err)
    assert err.getvalue().strip() == "agents[0].connection: unknown connection 'nowhere'"
    assert not Agent.objects.exists()


def test_unknown_tenants_and_unreadable_files_are_clear_errors(trio, tmp_path):
    with pytest.raises(CommandError, match="No tenant 'nope'"):
        run("export", "--tenant", "nope")
    with pytest.raises(CommandError, match="Cannot read"):
        run("import", "--tenant", "acme", str(tmp_path / "missing.yaml"))


def test_schema_prints_the_published_schema():
    out, _ = run("schema")
    assert json.loads(out) == document_json_schema()


def test_a_new_webhook_s_secret_is_printed_once_and_a_second_import_changes_nothing(trio, tmp_path):
    from agents.models import Trigger

    path = tmp_path / "hooks.yaml"
    path.write_text(
        "version: 1\nagents:\n- {slug: support, name: Support}\ntriggers:\n"
        "- {name: issues, kind: webhook, agent: support, run_as: alice, input_template: go}\n"
    )
    out, _ = run("import", "--tenant", "acme", str(path))
    secret = Trigger.objects.get(tenant=trio.acme, name="issues").secret
    assert secret in out and "shown in this answer only" in out
    out, _ = run("import", "--tenant", "acme", str(path))
    assert out.strip() == "No changes." and secret not in out
    exported, _ = run("export", "--tenant", "acme")
    assert secret not in exported and "run_as: alice" in exported


def test_a_dry_run_refuses_a_secret_moved_with_its_url_as_the_import_does(trio, tmp_path):
    """`--dry-run` runs the import's every check (tests/agents/test_config_dry_run.py)."""
    from tests.agents.config_corpus import secret_holders
    from tools.models import ToolDefinition

    secret_holders(trio)
    out, _ = run("export", "--tenant", "acme", "--format", "json")
    data = json.loads(out)
    data["tools"][0]["config"]["url"] = "https://evil.test/lookup"
    path = tmp_path / "moved.json"
    path.write_text(json.dumps(data))
    said = []
    for dry_run in (["--dry-run"], []):
        err = io.StringIO()
        with pytest.raises(CommandError, match=r"not applied \(1 problem\(s\)\)"):
            call_command("config", "import", "--tenant", "acme", str(path), *dry_run, stderr=err)
        said.append(err.getvalue().strip())
    assert (
        said
        == ["tools[0].secret: The URL's host changed: enter the secret again, or clear it."] * 2
    )
    assert (
        ToolDefinition.objects.get(name="lookup").config["url"] == "https://api.example.com/lookup"
    )
