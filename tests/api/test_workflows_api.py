"""`/api/v1/workflows`: admins declare workflows (compiled when saved: a bad document is a
400 naming every problem at its path, and nothing is saved), members and read keys read
them, other tenants' answer 404; each change is audited and versioned."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.models import WorkflowDefinition
from tenancy import services as tenancy
from tenancy.models import AuditEntry, ConfigVersion
from tests.api.test_runs_api import client_for
from tests.factories import make_agent

pytestmark = pytest.mark.django_db
URL = "/api/v1/workflows"

DEFINITION: dict[str, Any] = {
    "input": {
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
    "output": {"type": "object"},
    "steps": [
        {"id": "sum", "tool": "calculator", "arguments": {"expression": "input.expression"}},
        {"id": "said", "agent": "assistant", "prompt": "to_string(sum)"},
        {"id": "answer", "transform": "{result: sum, said: said}"},
    ],
}
BODY = {"slug": "sum-up", "name": "Sum up", "definition": DEFINITION}


def session(user, tenant="acme") -> APIClient:
    client = APIClient()
    client.force_login(user)
    client.credentials(HTTP_X_TENANT=tenant)
    return client


def problems(response) -> dict[str, str]:
    assert response.status_code == 400, response.json()
    return {p["path"]: p["reason"] for p in response.json()["error"]["details"]["problems"]}


def test_an_admin_declares_reads_changes_and_deletes_a_workflow(trio):
    make_agent(trio.acme, "assistant")
    alice = session(trio.alice)

    created = alice.post(URL, BODY, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["definition"] == DEFINITION
    assert created.json()["enabled"] is True and created.json()["expose_as_tool"] is False

    listed = alice.get(URL).json()["results"]
    assert [w["slug"] for w in listed] == ["sum-up"]
    changed = alice.patch(f"{URL}/sum-up", {"expose_as_tool": True}, format="json")
    assert changed.status_code == 200 and changed.json()["expose_as_tool"] is True
    assert alice.get(f"{URL}?enabled=false").json()["results"] == []

    stored = WorkflowDefinition.objects.get(tenant=trio.acme, slug="sum-up")
    audited = AuditEntry.objects.filter(tenant=trio.acme, object_type="agents.workflowdefinition")
    assert audited.count() == 2
    assert ConfigVersion.objects.filter(tenant=trio.acme, object_id=str(stored.pk)).count() == 2

    assert alice.delete(f"{URL}/sum-up").status_code == 204
    assert not WorkflowDefinition.objects.filter(tenant=trio.acme).exists()
    assert audited.count() == 3


def test_a_bad_document_is_a_400_at_each_path_and_nothing_is_saved(trio):
    alice = session(trio.alice)
    bad = copy.deepcopy(DEFINITION)
    bad["steps"][0]["tool"] = "teleport"
    bad["steps"][2]["transform"] = "later.x"
    bad["steps"].append({"id": "later", "transform": "input.("})

    found = problems(alice.post(URL, {**BODY, "definition": bad}, format="json"))

    assert found == {
        "definition.steps[0].tool": "no tool named 'teleport'",
        "definition.steps[1].agent": "no agent 'assistant'",
        "definition.steps[2].transform": (
            "reads 'later', the output of a step that runs later (steps[3])"
        ),
        "definition.steps[3].transform": "the expression does not parse at character 6 near '('",
    }
    assert not WorkflowDefinition.objects.exists()


def test_a_type_mismatch_with_a_tools_schema_is_refused_and_a_change_keeps_the_old(trio):
    make_agent(trio.acme, "assistant")
    alice = session(trio.alice)
    assert alice.post(URL, BODY, format="json").status_code == 201
    bad = copy.deepcopy(DEFINITION)
    bad["steps"][0]["arguments"] = {"expression": "length(input.expression)"}

    found = problems(alice.patch(f"{URL}/sum-up", {"definition": bad}, format="json"))

    assert found == {
        "definition.steps[0].arguments.expression": (
            "tool 'calculator''s argument 'expression' expects string, gets integer"
        )
    }
    assert alice.get(f"{URL}/sum-up").json()["definition"] == DEFINITION


@pytest.mark.parametrize(
    "definition",
    [
        "not an object",
        {"steps": [{"id": "a", "transform": "input"}] * 3000},
        {"steps": [{"id": "a", "transform": "\x00"}]},
        {"steps": [{"id": "a", "parallel": {"b": [{"id": "c", "parallel": {}}]}}]},
        {"input": {"$ref": "http://example.com/schema.json"}, "steps": [{"id": "a",
         "transform": "input"}]},
    ],
)  # fmt: skip
def test_hostile_documents_are_400s_never_500s(trio, definition):
    response = session(trio.alice).post(URL, {**BODY, "definition": definition}, format="json")
    assert response.status_code == 400, response.content
    assert not WorkflowDefinition.objects.exists()


def test_validate_compiles_without_saving(trio):
    make_agent(trio.acme, "assistant")
    bob = session(trio.bob)  # a member may check a document, not save one

    checked = bob.post(f"{URL}/validate", {"definition": DEFINITION}, format="json")

    assert checked.status_code == 200, checked.json()
    assert checked.json() == {
        "valid": True,
        "input_schema": DEFINITION["input"],
        "output_schema": {"type": "object"},
        "tools": ["calculator"],
        "agents": ["assistant"],
    }
    found = problems(bob.post(f"{URL}/validate", {"definition": {"steps": []}}, format="json"))
    assert list(found) == ["definition.steps"]
    assert bob.post(f"{URL}/validate", {"definitio": {}}, format="json").status_code == 400
    assert bob.post(URL, BODY, format="json").status_code == 403
    assert not WorkflowDefinition.objects.exists()


def test_members_and_read_keys_read_but_may_not_write(trio):
    make_agent(trio.acme, "assistant")
    assert session(trio.alice).post(URL, BODY, format="json").status_code == 201
    _, read_key = tenancy.api_key_create(tenant=trio.acme, name="ro", scopes=["read"])
    _, config_key = tenancy.api_key_create(tenant=trio.acme, name="cfg", scopes=["config"])

    for reader in (session(trio.bob), client_for(read_key)):
        assert reader.get(f"{URL}/sum-up").status_code == 200
        assert reader.patch(f"{URL}/sum-up", {"name": "x"}, format="json").status_code == 403
        assert reader.delete(f"{URL}/sum-up").status_code == 403
    renamed = client_for(config_key).patch(f"{URL}/sum-up", {"name": "Renamed"}, format="json")
    assert renamed.status_code == 200 and renamed.json()["name"] == "Renamed"


def test_another_tenants_workflow_answers_404(trio):
    make_agent(trio.acme, "assistant")
    assert session(trio.alice).post(URL, BODY, format="json").status_code == 201
    charlie = session(trio.charlie, tenant="globex")

    assert charlie.get(f"{URL}/sum-up").status_code == 404
    assert charlie.patch(f"{URL}/sum-up", {"name": "x"}, format="json").status_code == 404
    assert charlie.delete(f"{URL}/sum-up").status_code == 404
    assert charlie.get(URL).json()["results"] == []
    # globex's own compile does not see acme's agent
    found = problems(charlie.post(f"{URL}/validate", {"definition": DEFINITION}, format="json"))
    assert found == {"definition.steps[1].agent": "no agent 'assistant'"}
    assert WorkflowDefinition.objects.get(slug="sum-up").name == "Sum up"


def test_the_same_slug_twice_is_a_400(trio):
    make_agent(trio.acme, "assistant")
    alice = session(trio.alice)
    assert alice.post(URL, BODY, format="json").status_code == 201
    again = alice.post(URL, BODY, format="json")
    assert again.status_code == 400 and "slug" in str(again.json()["error"]["details"]).lower()


def test_the_validate_route_is_no_workflows_slug(trio):
    refused = session(trio.alice).post(URL, {**BODY, "slug": "validate"}, format="json")
    assert refused.status_code == 400 and "slug" in refused.json()["error"]["details"]
    assert not WorkflowDefinition.objects.exists()
