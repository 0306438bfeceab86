"""REST: `GET`/`PUT /api/v1/config` (agentplatform/api/config_api.py)."""

from __future__ import annotations

import json

import pytest
import yaml
from django.test import Client

from agents.models import Agent
from tenancy.models import Role
from tests.api.test_resources import assert_error, key_for
from tests.factories import add_member, login, make_agent, make_connection, make_user

pytestmark = pytest.mark.django_db

URL = "/api/v1/config"
PLANTED = "sk-ant-PLANTED-rest-31337"
DOC = {"version": 1, "agents": [{"slug": "support", "name": "Support", "instructions": "Hi."}]}


def session(trio, role: str | None, tenant=None) -> Client:
    """A signed-in client of a user with `role` in acme (None: alice, its owner)."""
    user = trio.alice if role is None else make_user(f"user-{role}")
    if role is not None:
        add_member(trio.acme, user, role)
    return login(Client(), user, tenant=tenant or trio.acme)


def put(client: Client, body: str, content_type: str = "application/json", query: str = "", **h):
    return client.put(f"{URL}{query}", body, content_type=content_type, **h)


def test_owners_and_admins_export_and_import_members_and_viewers_are_refused(trio):
    make_agent(trio.acme, "boss")
    for role in (None, Role.ADMIN):
        client = session(trio, role)
        assert client.get(URL).status_code == 200
        assert put(client, json.dumps(DOC), query="?dry_run=1").status_code == 200
    for role in (Role.MEMBER, Role.VIEWER):
        client = session(trio, role)
        assert_error(client.get(URL), 403)
        assert_error(put(client, json.dumps(DOC)), 403)
    assert not Agent.objects.filter(slug="support").exists()


def test_another_tenants_owner_gets_404_and_never_sees_the_config(trio):
    make_agent(trio.acme, "secret-agent", instructions="acme's own words")
    charlie = login(Client(), trio.charlie, tenant=trio.acme)
    assert_error(charlie.get(URL), 404)
    assert_error(put(charlie, json.dumps(DOC)), 404)
    own = login(Client(), trio.charlie, tenant=trio.globex).get(URL)
    assert own.status_code == 200 and "acme's own words" not in own.content.decode()


def test_api_keys_need_the_config_scope(trio):
    read = key_for(trio.acme, "read")
    assert_error(Client().get(URL, HTTP_AUTHORIZATION=f"Bearer {read}"), 403)
    config = key_for(trio.acme, "config")
    response = Client().get(URL, HTTP_AUTHORIZATION=f"Bearer {config}")
    assert response.status_code == 200 and response.json()["version"] == 1


def test_get_gives_json_or_yaml_and_never_a_secret(trio):
    make_connection(trio.acme, "claude", kind="anthropic", api_key=PLANTED)
    client = session(trio, None)
    as_json = client.get(URL)
    assert as_json["Content-Type"].startswith("application/json")
    assert as_json.json()["connections"][0]["secret"] == "connection:claude"
    as_yaml = client.get(URL, HTTP_ACCEPT="application/yaml")
    assert as_yaml["Content-Type"].startswith("application/yaml")
    assert yaml.safe_load(as_yaml.content) == as_json.json()
    assert yaml.safe_load(client.get(URL, {"format": "yaml"}).content) == as_json.json()
    for response in (as_json, as_yaml):
        assert PLANTED not in response.content.decode()


def test_put_dry_run_gives_the_diff_then_applying_is_idempotent(trio):
    client = session(trio, None)
    dry = put(client, json.dumps(DOC), query="?dry_run=1")
    assert dry.status_code == 200
    body = dry.json()
    assert (body["valid"], body["applied"]) == (True, False)
    assert [(c["section"], c["name"], c["action"]) for c in body["changes"]] == [
        ("agents", "support", "create")
    ]
    assert not Agent.objects.filter(tenant=trio.acme).exists()
    applied = put(client, yaml.safe_dump(DOC), content_type="application/yaml")
    assert applied.json()["applied"] is True
    again = put(client, yaml.safe_dump(DOC), content_type="application/yaml")
    assert again.json() == {
        "valid": True, "applied": False, "prune": False, "changes": [], "problems": [],
        "new_secrets": [],
    }  # fmt: skip
    changed = {**DOC, "agents": [{**DOC["agents"][0], "instructions": "Hello."}]}
    diff = put(client, json.dumps(changed), query="?dry_run=true").json()["changes"]
    assert diff == [
        {
            "section": "agents",
            "name": "support",
            "action": "update",
            "fields": {"instructions": {"from": "Hi.", "to": "Hello."}},
        }
    ]


@pytest.mark.parametrize(
    ("body", "content_type", "path", "reason"),
    [
        ("{", "application/json", "", "not valid JSON"),
        ("version: [", "application/yaml", "", "not valid YAML"),
        ("a: &x 1\nb: *x", "application/yaml", "", "aliases"),
        ("x: " + "y" * 1_100_000, "application/yaml", "", "larger than"),
        ('{"version": 1, "agents": [{"slug": "a"}]}', "application/json", "agents[0].name",
         "Field required"),
        ('{"version": 1, "tools": [], "colour": 1}', "application/json", "colour", "unknown field"),
        ('{"version": 9}', "application/json", "version", "not supported"),
        ("", "application/json", "", "must be a mapping"),
    ],
)  # fmt: skip
def test_bad_documents_are_a_400_naming_each_problem_and_nothing_changes(
    trio, body, content_type, path, reason
):
    make_agent(trio.acme, "boss")
    client = session(trio, None)
    before = client.get(URL).json()
    error = assert_error(put(client, body, content_type=content_type), 400, "invalid")
    [problem] = error["details"]["problems"]
    assert problem["path"] == path and reason in problem["reason"]
    assert client.get(URL).json() == before


def test_bad_query_flags_are_a_400(trio):
    assert_error(put(session(trio, None), json.dumps(DOC), query="?dry_run=maybe"), 400)


HOOK_DOC = {
    "version": 1,
    "agents": [{"slug": "support", "name": "Support"}],
    "triggers": [
        {"name": "issues", "kind": "webhook", "agent": "support", "run_as": "alice",
         "input_template": "Triage: {{payload.issue.title}}"}
    ],
}  # fmt: skip


def test_a_new_webhook_s_secret_is_in_the_answer_that_creates_it_only(trio):
    from agents.models import Trigger

    client = session(trio, None)
    preview = put(client, json.dumps(HOOK_DOC), query="?dry_run=1").json()
    [_, hook] = preview["changes"]
    assert "new signing secret" in hook["note"] and preview["new_secrets"] == []
    applied = put(client, json.dumps(HOOK_DOC)).json()
    [made] = applied["new_secrets"]
    trigger = Trigger.objects.get(tenant=trio.acme, name="issues")
    assert made["secret"] == trigger.secret and made["name"] == "issues"
    assert trigger.created_by == trio.alice  # the importer, from the request
    assert trigger.secret not in client.get(URL).content.decode()
    again = put(client, json.dumps(HOOK_DOC)).json()
    assert again["changes"] == [] and again["new_secrets"] == []
    assert Trigger.objects.get(pk=trigger.pk).secret == made["secret"]


def test_a_trigger_naming_another_tenants_member_is_a_400_with_its_path(trio):
    doc = {**HOOK_DOC, "triggers": [{**HOOK_DOC["triggers"][0], "run_as": "charlie"}]}
    error = assert_error(put(session(trio, None), json.dumps(doc)), 400, "invalid")
    assert error["details"]["problems"] == [
        {"path": "triggers[0].run_as",
         "reason": "no member of this tenant has the username 'charlie'"}
    ]  # fmt: skip


def test_a_dry_run_refuses_a_secret_moved_with_its_url_as_the_import_does(trio):
    """`dry_run=1` runs the import's every check (tests/agents/test_config_dry_run.py)."""
    from tests.agents.config_corpus import PLANTED, secret_holders
    from tools.models import ToolDefinition

    secret_holders(trio)
    client = session(trio, None)
    data = client.get(URL).json()
    data["tools"][0]["config"]["url"] = "https://evil.test/lookup"
    dry = assert_error(put(client, json.dumps(data), query="?dry_run=1"), 400, "invalid")
    imported = assert_error(put(client, json.dumps(data)), 400, "invalid")
    assert dry["details"]["problems"] == imported["details"]["problems"] == [
        {"path": "tools[0].secret",
         "reason": "The URL's host changed: enter the secret again, or clear it."}
    ]  # fmt: skip
    assert (
        ToolDefinition.objects.get(name="lookup").config["url"] == "https://api.example.com/lookup"
    )
    assert PLANTED not in json.dumps(dry) + json.dumps(imported)
