"""A tenant's workflows written: saved (the document compiled first, every problem at its
path) and deleted, recorded in the audit log and the configuration history like every
configuration object (tenancy.records.saving). Who may is the faces' policy
(`Action.CHANGE_CONFIG`)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.http import Http404

from agents.models import WorkflowDefinition
from agents.workflows.compiling import workflow_compile
from tenancy.models import Tenant
from tenancy.records.saving import delete_recorded, save_validated

# /api/v1/workflows/validate is the API's check, so no workflow may be reached there.
RESERVED_SLUGS = frozenset({"validate"})


def workflow_save(
    *,
    tenant: Tenant,
    workflow: WorkflowDefinition | None = None,
    changes: dict[str, Any],
    graph_checked: bool = False,
    actor: Any = None,
) -> WorkflowDefinition:
    """Create (workflow None) or change one of the tenant's workflows. A document given is
    compiled against the tenant's tools and agents first: WorkflowInvalid, before anything
    is written, lists every problem at its path in the document. Then the model's
    full_clean compiles the tenant's whole configuration with it (unless `graph_checked`:
    the configuration document's import compiled the end state itself, with the document's
    own tools and agents, which the tenant does not hold yet)."""
    if workflow is None:
        workflow = WorkflowDefinition(tenant=tenant)
    elif workflow.tenant_id != tenant.pk:
        raise Http404("No such workflow.")  # other tenants' objects: 404
    if changes.get("slug") in RESERVED_SLUGS:
        raise ValidationError({"slug": "This name is taken by the API: choose another."})
    if "definition" in changes and not graph_checked:  # (a workflow broken since, by a
        # deleted tool, can still be renamed or disabled)
        workflow_compile(tenant=tenant, definition=changes["definition"])
    workflow.graph_checked = graph_checked
    return save_validated(workflow, changes, actor=actor)


def workflow_delete(*, tenant: Tenant, workflow: WorkflowDefinition, actor: Any = None) -> None:
    """Delete one of the tenant's workflows (its triggers go with it)."""
    if workflow.tenant_id != tenant.pk:
        raise Http404("No such workflow.")
    delete_recorded(workflow, actor=actor)
