"""What the faces read of a tenant's workflows: another tenant's answers 404."""

from __future__ import annotations

from django.db.models import QuerySet

from agents.models import WorkflowDefinition
from tenancy.access import filter_given, get_for_tenant
from tenancy.models import Tenant


def workflows_of(*, tenant: Tenant, enabled: bool | None = None) -> QuerySet:
    """The tenant's workflows by name (only the enabled or disabled ones when given)."""
    return filter_given(WorkflowDefinition.objects.filter(tenant=tenant), enabled=enabled)


def workflow_get(*, tenant: Tenant, slug: str) -> WorkflowDefinition:
    """The tenant's workflow `slug`; 404 otherwise. One query."""
    return get_for_tenant(WorkflowDefinition, tenant, slug=slug)
