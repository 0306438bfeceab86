"""The context a tenant's tools run in (every call's: runs and direct calls, agents.runs),
and saving or deleting the tenant's tool definitions (registries rebuild on the model's
post_save/post_delete signals, see tools.loader). A tool is called through the tool-call
step only (agents/runtime/tool_step.py), never from here."""

from __future__ import annotations

import uuid
from typing import Any

from django.core.exceptions import ValidationError
from django.http import Http404

from tenancy.models import Tenant
from tenancy.records.saving import delete_recorded, save_validated
from tools.loader import tenant_tools
from tools.models import ToolDefinition
from tools.rate_limits import TOOL_RATE_LIMITER
from tools.runtime.context import EventSink, ModelCallMeter, RunContext, SecretAccessor


def tool_context(
    *,
    tenant: Tenant,
    user_id: int | None = None,
    unattended: bool = False,
    api_key_id: int | None = None,
    run_id: str | None = None,
    correlation_id: str | None = None,
    events: EventSink | None = None,
    secrets: SecretAccessor | None = None,
    model_calls: ModelCallMeter | None = None,
) -> RunContext:
    """A RunContext whose secret accessor holds this tenant's tool secrets only (pass
    `secrets` when the caller already holds the tenant's tools, to skip reading them),
    and whose rate limiter counts in Redis: every path that runs a tenant's tools makes
    its context here, so every one honours their rate limits. `model_calls`: the quotas the
    tools' own model calls are held against (agents.quotas.ToolModelCalls: a run's or a
    direct call's, which always pass one); None: not held."""
    return RunContext(
        tenant_id=tenant.pk,
        user_id=user_id,
        unattended=unattended,
        api_key_id=api_key_id,
        run_id=run_id,
        correlation_id=correlation_id or uuid.uuid4().hex,
        secrets=secrets if secrets is not None else tenant_tools(tenant).secrets,
        events=events,
        rate_limiter=TOOL_RATE_LIMITER,
        model_calls=model_calls,
    )


def tool_definition_save(
    *,
    tenant: Tenant,
    definition: ToolDefinition | None = None,
    changes: dict[str, Any],
    graph_checked: bool = False,
) -> ToolDefinition:
    """Create (definition None) or change one of the tenant's tool definitions; its
    full_clean compiles the tenant's whole configuration with it
    (`base.config_checks`). `graph_checked`: the caller compiled the end state
    itself (the document import, whose changes' order must not matter)."""
    if definition is None:
        definition = ToolDefinition(tenant=tenant)
    elif definition.tenant_id != tenant.pk:
        raise Http404("No such tool definition.")
    definition.graph_checked = graph_checked
    return save_validated(definition, changes)


def tool_definition_delete(
    *, tenant: Tenant, definition: ToolDefinition, graph_checked: bool = False
) -> None:
    """Delete one of the tenant's tool definitions (a built-in it replaced comes back).
    ValidationError while other tools take inputs from it (`depends_on`), unless
    `graph_checked` (see `tool_definition_save`)."""
    if definition.tenant_id != tenant.pk:
        raise Http404("No such tool definition.")
    if not graph_checked and (users := dependents(definition)):
        raise ValidationError(
            f"{', '.join(users)} take{'s' if len(users) == 1 else ''} inputs from this tool "
            "(depends_on): change or delete them first."
        )
    delete_recorded(definition)


def dependents(definition: ToolDefinition) -> list[str]:
    """Names of the tenant's other tools that take inputs from `definition`. One query."""
    others = ToolDefinition.objects.filter(tenant_id=definition.tenant_id).exclude(pk=definition.pk)
    return sorted(
        other.name
        for other in others.exclude(depends_on={})
        if isinstance(other.depends_on, dict)
        and any(
            isinstance(d, dict) and d.get("from") == definition.name
            for d in other.depends_on.values()
        )
    )
