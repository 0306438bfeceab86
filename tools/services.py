"""Executing a tenant's tools from synchronous Django code (admin test page, REST), and
saving or deleting the tenant's tool definitions (registries rebuild on the model's
post_save/post_delete signals, see tools.loader)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.http import Http404

from agentplatform.saving import delete_recorded, save_validated
from agentplatform.tenancy.models import Tenant
from tools.loader import tenant_tools
from tools.models import ToolDefinition
from tools.rate_limits import TOOL_RATE_LIMITER
from tools.runtime.context import EventSink, ModelCallMeter, RunContext, SecretAccessor
from tools.runtime.tool import ToolCall, ToolResult

# What holds the model calls of a tool run outside any run or direct call (a self-test, a
# verifier tool) against the quotas: registered by agents (agents.apps; tools may not
# import it), given the tenant's and the user's ids.
_standalone_model_calls: Callable[[int, int | None], ModelCallMeter] | None = None


def register_model_call_meter(factory: Callable[[int, int | None], ModelCallMeter]) -> None:
    global _standalone_model_calls
    _standalone_model_calls = factory


def tool_context(
    *,
    tenant: Tenant,
    user_id: int | None = None,
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
    tools' own model calls are held against (agents.quotas.ToolModelCalls); without it,
    the registered standalone meter's (the tenant's and the user's)."""
    if model_calls is None and _standalone_model_calls is not None:
        model_calls = _standalone_model_calls(tenant.pk, user_id)
    return RunContext(
        tenant_id=tenant.pk,
        user_id=user_id,
        run_id=run_id,
        correlation_id=correlation_id or uuid.uuid4().hex,
        secrets=secrets if secrets is not None else tenant_tools(tenant).secrets,
        events=events,
        rate_limiter=TOOL_RATE_LIMITER,
        model_calls=model_calls,
    )


def tool_execute(
    *, tenant: Tenant, name: str, arguments: Any, user_id: int | None = None
) -> ToolResult:
    """Run one tool of the tenant's registry now. Tool trouble comes back as result.error."""
    toolbox = tenant_tools(tenant)
    ctx = tool_context(tenant=tenant, user_id=user_id, secrets=toolbox.secrets)
    call = ToolCall(id=f"call_{uuid.uuid4().hex[:12]}", name=name, arguments=arguments)
    return async_to_sync(toolbox.registry.execute)(call, ctx)


def tool_definition_save(
    *,
    tenant: Tenant,
    definition: ToolDefinition | None = None,
    changes: dict[str, Any],
    graph_checked: bool = False,
) -> ToolDefinition:
    """Create (definition None) or change one of the tenant's tool definitions; its
    full_clean compiles the tenant's whole configuration with it
    (`agentplatform.config_checks`). `graph_checked`: the caller compiled the end state
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
