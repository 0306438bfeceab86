"""A tool definition that is not saved, built as it would be once saved, to be tried (the
dry call, `agents.runs.dry_call`): its fields pass exactly the validation a save runs (the
model's full_clean, so the configuration compiler over the tenant's whole configuration),
nothing is written, and its calls go through the guarded egress client like any tool's."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.http import Http404

from base import rate_counters
from tenancy.models import Tenant
from tools import rate_limits
from tools.definitions import build_tool, secret_ref
from tools.loader import egress_client
from tools.models import ToolDefinition, ToolKind
from tools.runtime.circuit import MemoryCircuitStore
from tools.runtime.context import StaticSecrets
from tools.runtime.egress import EgressResponse, GuardedHttpClient
from tools.runtime.http_tool import HttpToolConfig, basic_token
from tools.runtime.rate_limit import WINDOW_S, RateLimited
from tools.runtime.tool import Tool

# The fields a draft may set (ToolDefinitionWriteSerializer's, less the secret and enabled).
DRAFT_FIELDS = frozenset(
    {
        "name", "kind", "description", "input_schema", "output_schema", "config",
        "depends_on", "examples", "tags", "effect", "idempotent", "requires_approval",
        "timeout_s", "rate_limit_per_minute",
    }
)  # fmt: skip
# Dry calls a minute: per person (or key) in a tenant, whatever the drafts' names, and per
# tool name (counted with the saved tool's own calls). A dry call is an admin's, by hand,
# but its requests reach a real service.
DRY_CALLS_PER_MINUTE = 20


@dataclass(frozen=True, slots=True)
class DryCallsLimited(RateLimited):
    """A dry call refused because its caller had made DRY_CALLS_PER_MINUTE this minute."""

    @property
    def message(self) -> str:
        return (
            f"dry calls are limited to {self.limit} a minute per person in this tenant, "
            f"whatever the tool's name; try again in {self.retry_after_s} s"
        )


class DryCallLimiter:
    """The rate limiter of one person's dry calls (`caller`: "user:7", "key:3"): each is
    counted, in one round trip, with the calls of the tool of its name (the saved tool's
    count, its limit the draft's) and with every dry call of `caller` in the tenant, so
    renaming the draft gives no fresh count. Over either, the call is refused."""

    def __init__(self, caller: str) -> None:
        self.caller = caller

    async def take(self, tenant_id: int | str, tool: str, per_minute: int) -> RateLimited | None:
        by_name, by_caller = await rate_counters.hits_async(
            [
                (rate_limits.counter_name(tenant_id, tool), WINDOW_S),
                (f"dry-calls:{tenant_id}:{self.caller}", WINDOW_S),
            ]
        )
        if by_caller.value > DRY_CALLS_PER_MINUTE:
            return DryCallsLimited(tool, DRY_CALLS_PER_MINUTE, by_caller.retry_after_s)
        if by_name.value > per_minute:
            return RateLimited(tool, per_minute, by_name.retry_after_s)
        return None


class AnswerKept:
    """The guarded egress client, keeping the last answer it received (a dry call shows the
    status and body even when the tool would report only an error). Every request goes
    through `egress`: its policy refuses private addresses as for any tool call."""

    def __init__(self, egress: GuardedHttpClient) -> None:
        self.egress = egress
        self.policy = egress.policy
        self.last: EgressResponse | None = None

    async def request(self, method: str, url: str, **kwargs: Any) -> EgressResponse:
        response = await self.egress.request(method, url, **kwargs)
        self.last = response
        return response


@dataclass(frozen=True)
class DraftTool:
    """`tool` is built as the saved definition's would be, except that it does not check
    its answers against `output_schema` (the dry call reports that check beside the answer);
    `secrets` holds its credential for the call ({secret ref: value}); `answers` the last
    answer received; `redact` masks the credential and the token basic auth makes of it."""

    tool: Tool
    secrets: dict[str, str]
    output_schema: dict[str, Any] | None
    answers: AnswerKept
    redact: Callable[[Any], Any]


def draft_tool(
    *,
    tenant: Tenant,
    changes: dict[str, Any],
    secret: str | None = None,
    definition: ToolDefinition | None = None,
) -> DraftTool:
    """The tool `changes` make — a new definition, or `definition` changed (its stored
    secret kept when `secret` is None, as a save keeps it; "": no secret) — validated as
    saving it would be and never saved. ValidationError as a save raises it (field ->
    messages); Http404 for another tenant's definition. Costs the save's validation
    queries."""
    if definition is not None and definition.tenant_id != tenant.pk:
        raise Http404("No such tool definition.")
    unknown = set(changes) - DRAFT_FIELDS
    if unknown:
        raise ValidationError({name: "Not a field of a tool draft." for name in sorted(unknown)})
    instance = copy.copy(definition) if definition is not None else ToolDefinition(tenant=tenant)
    for name, value in changes.items():
        setattr(instance, name, value)
    if secret is not None:
        instance.secret = secret or None
    if instance.kind != ToolKind.HTTP:
        raise ValidationError({"kind": "Only HTTP tools can be tried before they are saved."})
    instance.full_clean()  # the save's validation, whole configuration included
    unchecked = copy.copy(instance)
    unchecked.output_schema = None
    answers = AnswerKept(egress_client(tuple(settings.EGRESS_ALLOWLIST)))
    try:
        built = build_tool(unchecked, egress=answers, circuit_store=MemoryCircuitStore())
    except ValueError:  # ("auth is configured but the tool has no secret")
        raise ValidationError(
            {"secret": "This tool sends a credential (config.auth): give its secret."}
        ) from None
    own = built.capability.rate_limit_per_minute
    limit = min(own or DRY_CALLS_PER_MINUTE, DRY_CALLS_PER_MINUTE)
    built = replace(built, capability=replace(built.capability, rate_limit_per_minute=limit))
    secrets = {secret_ref(instance): instance.secret} if instance.secret else {}
    return DraftTool(
        tool=built,
        secrets=secrets,
        output_schema=instance.output_schema,
        answers=answers,
        redact=StaticSecrets({**secrets, "basic": _basic_token(instance)}).redact,
    )


def _basic_token(instance: ToolDefinition) -> str:
    """The base64 token basic auth sends (http_tool.basic_token), or "": masked beside the
    secret, since a dry call's answer is shown as the service sent it."""
    auth = HttpToolConfig.model_validate(instance.config).auth  # (full_clean checked it)
    if auth is None or auth.type != "basic" or not instance.secret:
        return ""
    return basic_token(auth, instance.secret)
