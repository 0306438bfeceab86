"""Workflows in the tenant-scoped admin (agents/workflow_admin.py): saved through the
service (compiled, each problem at its path; audited and versioned), deleted through it,
scoped to the admin's tenants."""

from __future__ import annotations

import json

import pytest

from agents.models import Run, WorkflowDefinition
from tenancy.models import AuditEntry, ConfigVersion
from tests.factories import login

pytestmark = pytest.mark.django_db

ADD = "/admin/agents/workflowdefinition/add/"
SUM = {
    "steps": [{"id": "sum", "tool": "calculator", "arguments": {"expression": "'1 + 1'"}}],
}


def form(definition, **extra):
    return {
        "slug": "sum-up", "name": "Sum up", "description": "", "enabled": "on",
        "definition": json.dumps(definition), **extra,
    }  # fmt: skip


def test_an_admin_adds_changes_and_deletes_a_workflow_through_the_service(client, trio):
    login(client, trio.alice)
    bad = {"steps": [{"id": "sum", "tool": "teleport", "arguments": {}}]}
    refused = client.post(ADD, form(bad))
    assert refused.status_code == 200
    assert "steps[0].tool: no tool named &#x27;teleport&#x27;" in refused.content.decode()
    assert not WorkflowDefinition.objects.exists()

    added = client.post(ADD, form(SUM))
    assert added.status_code == 302, added.content.decode()[:3000]
    workflow = WorkflowDefinition.objects.get(slug="sum-up")
    assert workflow.tenant == trio.acme and workflow.definition == SUM
    versions = ConfigVersion.objects.filter(object_id=str(workflow.pk))
    assert versions.count() == 1
    audit = AuditEntry.objects.filter(object_id=str(workflow.pk), user=trio.alice)
    assert audit.filter(action="config.created").exists()

    change = f"/admin/agents/workflowdefinition/{workflow.pk}/change/"
    changed = client.post(change, form(SUM, name="Sum it up", expose_as_tool="on"))
    assert changed.status_code == 302, changed.content.decode()[:3000]
    workflow.refresh_from_db()
    assert workflow.name == "Sum it up" and workflow.expose_as_tool
    assert versions.count() == 2
    assert "Its runs" in client.get(change).content.decode()
    assert client.get(f"/admin/agents/run/?workflow__id__exact={workflow.pk}").status_code == 200

    delete = f"/admin/agents/workflowdefinition/{workflow.pk}/delete/"
    deleted = client.post(delete, {"post": "yes"})
    assert deleted.status_code == 302
    assert not WorkflowDefinition.objects.exists()
    assert audit.filter(action="config.deleted").exists()
    assert not Run.objects.exists()


def test_another_tenants_admin_sees_none_of_it(client, trio):
    theirs = WorkflowDefinition.objects.create(
        tenant=trio.globex, slug="theirs", name="Theirs", definition=SUM
    )
    login(client, trio.alice)
    listed = client.get("/admin/agents/workflowdefinition/").content.decode()
    assert "Theirs" not in listed
    assert client.get(f"/admin/agents/workflowdefinition/{theirs.pk}/change/").status_code == 404
    gone = client.post(f"/admin/agents/workflowdefinition/{theirs.pk}/delete/", {"post": "yes"})
    assert gone.status_code == 404
    assert WorkflowDefinition.objects.filter(pk=theirs.pk).exists()
