"""The configuration document's `tool_imports` section (agents/config_tool_imports.py): an
OpenAPI document's operations planned, checked and applied as tools listed by hand are,
with problems at the entry the admin wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.config_document import config_export, config_import, config_plan
from tests.tools.local_server import LocalServer, Reply
from tools.models import ToolDefinition
from tools.services import tool_definition_save

pytestmark = pytest.mark.django_db

SPEC = (Path(__file__).parent.parent / "data" / "openapi" / "petstore-2.0.yaml").read_bytes()


@pytest.fixture
def spec_server(settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    with LocalServer() as server:
        server.route("GET", "/petstore.yaml", Reply(body=SPEC))
        yield server


def document(server, *operations: str, **entry) -> str:
    imports = [{"openapi_url": f"{server.url}/petstore.yaml", "operations": list(operations),
                "base_url": "https://pets.example.com/v2", **entry}]  # fmt: skip
    return json.dumps({"version": 1, "tool_imports": imports})


def test_the_chosen_operations_are_planned_and_applied_as_tools(trio, spec_server):
    text = document(spec_server, "logoutUser", "deleteOrder")
    plan = config_plan(tenant=trio.acme, text=text)
    assert plan.valid, plan.problems
    assert {(c.section, c.name, c.action) for c in plan.changes} == {
        ("tools", "logoutUser", "create"),
        ("tools", "deleteOrder", "create"),
    }
    applied = config_import(tenant=trio.acme, text=text)
    assert applied.applied
    delete = ToolDefinition.objects.get(tenant=trio.acme, name="deleteOrder")
    assert delete.config["url"] == "https://pets.example.com/v2/store/order/{orderId}"
    assert delete.config["method"] == "DELETE" and delete.effect == ""
    again = config_plan(tenant=trio.acme, text=text)
    assert again.valid and again.changes == []  # applying it twice changes nothing
    exported = config_export(tenant=trio.acme)
    assert {t["name"] for t in exported["tools"]} == {"logoutUser", "deleteOrder"}
    assert not ToolDefinition.objects.filter(tenant=trio.globex).exists()


def test_a_tool_sending_a_credential_keeps_its_stored_secret_by_reference(trio, spec_server):
    text = document(spec_server, "getInventory")
    plan = config_plan(tenant=trio.acme, text=text)
    [problem] = plan.problems
    assert problem.path == "tool_imports[0].getInventory.secret"
    assert "holds no secret 'tool:getInventory'" in problem.reason
    tool_definition_save(
        tenant=trio.acme,
        changes={
            "name": "getInventory",
            "kind": "http",
            "description": "Stock by status.",
            "config": {"url": "https://pets.example.com/v2/store/inventory",
                       "auth": {"type": "header", "header": "api_key"}},
            "secret": "stored-key",
        },
    )  # fmt: skip
    assert config_import(tenant=trio.acme, text=text).applied
    tool = ToolDefinition.objects.get(tenant=trio.acme, name="getInventory")
    assert tool.secret == "stored-key" and tool.description.startswith("Returns pet")


def test_refusals_name_the_entry_and_nothing_is_applied(trio, spec_server, settings):
    cases = [
        (document(spec_server, "nope"), "tool_imports[0].operations[0]", "no operation 'nope'"),
        (document(spec_server, "uploadFile"), "tool_imports[0].operations[0]", "form data"),
        (
            json.dumps({"version": 1, "tools": [{"name": "logoutUser", "config": {
                "url": "https://x.example.com"}}], "tool_imports": json.loads(
                    document(spec_server, "logoutUser"))["tool_imports"]}),
            "tool_imports[0].operations",
            "also listed under tools",
        ),
        (
            document(spec_server, "logoutUser", openapi_url=f"{spec_server.url}/missing"),
            "tool_imports[0].openapi_url",
            "HTTP 404",
        ),
    ]  # fmt: skip
    for text, path, reason in cases:
        plan = config_import(tenant=trio.acme, text=text)
        assert not plan.applied
        assert [(p.path, reason in p.reason) for p in plan.problems] == [(path, True)], (
            plan.problems
        )
    settings.EGRESS_ALLOWLIST = []
    [problem] = config_plan(tenant=trio.acme, text=document(spec_server, "logoutUser")).problems
    assert problem.path == "tool_imports[0].openapi_url"
    assert (
        problem.reason == "Cannot fetch the document: its URL points to a private or local address."
    )
    malformed = json.dumps({"version": 1, "tool_imports": [{"operations": []}]})
    assert {p.path for p in config_plan(tenant=trio.acme, text=malformed).problems} >= {
        "tool_imports[0].openapi_url"
    }
    assert not ToolDefinition.objects.exists()


def test_too_many_entries_are_refused_before_any_is_fetched_and_a_url_is_fetched_once(
    trio, spec_server
):
    entry = json.loads(document(spec_server, "logoutUser"))["tool_imports"][0]
    too_many = json.dumps({"version": 1, "tool_imports": [entry] * 21})
    [problem] = config_plan(tenant=trio.acme, text=too_many).problems
    assert problem.path == "tool_imports" and "20" in problem.reason
    assert spec_server.requests == []  # refused before fetching anything
    elsewhere = {**entry, "operations": ["getOrderById"], "base_url": "https://b.example.com/v2"}
    three = [entry, {**entry, "operations": ["deleteOrder"]}, elsewhere]
    plan = config_plan(tenant=trio.acme, text=json.dumps({"version": 1, "tool_imports": three}))
    assert plan.valid, plan.problems
    assert {c.name for c in plan.changes} == {"logoutUser", "deleteOrder", "getOrderById"}
    assert len(spec_server.requests) == 1  # one URL, fetched once for the plan
