"""The workflow pages (agentplatform/web/config/workflows.py): admins list, create, edit and
delete workflows; the compiler's problems show on the form at their paths and nothing is
saved; members are refused, other tenants' workflows are 404."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from agents.models import WorkflowDefinition
from tests.factories import login, make_agent

pytestmark = pytest.mark.django_db

DEFINITION = {
    "input": {"type": "object", "properties": {"expression": {"type": "string"}}},
    "steps": [
        {"id": "sum", "tool": "calculator", "arguments": {"expression": "input.expression"}},
        {"id": "note", "agent": "writer", "prompt": "to_string(sum)"},
    ],
}


def form(**fields) -> dict[str, str]:
    return {
        "name": "Sum up",
        "slug": "sum-up",
        "description": "",
        "definition": json.dumps(DEFINITION),
        "enabled": "on",
        **fields,
    }


def test_an_admin_creates_edits_and_deletes_a_workflow(client: Client, trio):
    make_agent(trio.acme, "writer")
    login(client, trio.alice)
    assert client.get("/t/acme/workflows/").status_code == 200
    starter = client.get("/t/acme/workflows/new/")
    assert starter.status_code == 200 and "length(input.text)" in starter.content.decode()

    made = client.post("/t/acme/workflows/new/", form())
    assert made.status_code == 302, made.content.decode()[:2000]
    assert made["Location"] == "/t/acme/workflows/"
    stored = WorkflowDefinition.objects.get(tenant=trio.acme, slug="sum-up")
    assert stored.definition == DEFINITION and stored.enabled and not stored.expose_as_tool
    listed = client.get("/t/acme/workflows/").content.decode()
    assert "Sum up" in listed and "/t/acme/workflows/sum-up/edit/" in listed

    page = client.get("/t/acme/workflows/sum-up/edit/").content.decode()
    assert "input.expression" in page and "/t/acme/history/workflows/" in page
    changed = client.post("/t/acme/workflows/sum-up/edit/", form(expose_as_tool="on"))
    assert changed.status_code == 302
    stored.refresh_from_db()
    assert stored.expose_as_tool

    assert client.post("/t/acme/workflows/sum-up/delete/").status_code == 302
    assert not WorkflowDefinition.objects.exists()


def test_problems_show_on_the_form_at_their_paths_and_nothing_is_saved(client: Client, trio):
    login(client, trio.alice)
    bad = {"steps": [{"id": "a", "tool": "teleport"}, {"id": "b", "transform": "c"}]}

    refused = client.post("/t/acme/workflows/new/", form(definition=json.dumps(bad)))

    assert refused.status_code == 400
    page = refused.content.decode()
    assert "steps[0].tool: no tool named &#x27;teleport&#x27;" in page
    assert "steps[1].transform: reads &#x27;c&#x27;, which is neither input nor a step" in page
    unparsed = client.post("/t/acme/workflows/new/", form(definition="{not json"))
    assert unparsed.status_code == 400 and "Enter a valid JSON" in unparsed.content.decode()
    listed = client.post("/t/acme/workflows/new/", form(definition="[1, 2]"))
    assert listed.status_code == 400 and "Give a JSON object." in listed.content.decode()
    assert not WorkflowDefinition.objects.exists()


def test_members_are_refused_and_other_tenants_workflows_are_404(client: Client, trio):
    make_agent(trio.acme, "writer")
    login(client, trio.alice)
    assert client.post("/t/acme/workflows/new/", form()).status_code == 302

    login(client, trio.bob)  # a member of acme
    assert client.get("/t/acme/workflows/").status_code == 403
    assert client.post("/t/acme/workflows/sum-up/delete/").status_code == 403
    login(client, trio.charlie)  # globex's owner
    assert client.get("/t/globex/workflows/sum-up/edit/").status_code == 404
    assert client.post("/t/globex/workflows/sum-up/delete/").status_code == 404
    assert WorkflowDefinition.objects.filter(slug="sum-up").exists()
