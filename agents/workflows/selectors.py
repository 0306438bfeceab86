"""What the faces read of a tenant's workflows: another tenant's answers 404."""

from __future__ import annotations

from django.db.models import QuerySet

from agents.models import Agent, WorkflowDefinition
from tenancy.access import filter_given, get_for_tenant
from tenancy.models import Tenant


def workflows_of(*, tenant: Tenant, enabled: bool | None = None) -> QuerySet:
    """The tenant's workflows by name (only the enabled or disabled ones when given)."""
    return filter_given(WorkflowDefinition.objects.filter(tenant=tenant), enabled=enabled)


def workflow_get(*, tenant: Tenant, slug: str) -> WorkflowDefinition:
    """The tenant's workflow `slug`; 404 otherwise. One query."""
    return get_for_tenant(WorkflowDefinition, tenant, slug=slug)


def workflow_agents(*, tenant: Tenant, slugs: frozenset[str]) -> list[Agent]:
    """The tenant's agents among `slugs` (a document's agent steps), with their provider
    connections, for their specs. One query; none without slugs."""
    if not slugs:
        return []
    return list(
        Agent.objects.filter(tenant=tenant, slug__in=slugs).select_related("provider_connection")
    )
