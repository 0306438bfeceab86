"""Model calls the platform made outside a run's loop (/v1 gateway models, embeddings, a
judge's verdict, a tool's model call outside a run) recorded as finished runs with their usage
and cost, so the usage page and the quota counters rebuilt from runs count them."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.runs.writer import CallRecord, storable_text, write_calls
from agents.runtime.spec import RunStatus
from providers.pricing import usage_cost
from providers.runtime.types import Usage
from tenancy import rls
from tenancy.models import ApiKey

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GatewayCall:
    """A call straight to a connection's model (/v1 gateway models, embeddings)."""

    api_key: ApiKey
    gateway_model: str
    model: str
    provider: str
    input: str
    usage: Usage
    started_at: Any
    finished_at: Any = None
    error: str = ""
    # Which price table prices `model` (a connection's `price_kind`); else `provider`'s.
    price_kind: str = ""
    events: tuple[tuple[str, dict[str, Any]], ...] = ()  # (type, payload): provider.fallback


@dataclass(frozen=True)
class RecordedCall:
    run_id: int
    cost_usd: Decimal


def record_model_call(
    *,
    tenant_id: int,
    user_id: int | None,
    api_key_id: int | None,
    gateway_model: str,
    model: str,
    provider: str,
    price_kind: str,
    input: str,
    usage: Usage,
    started_at: Any,
    error: str = "",
    agent_id: int | None = None,
) -> RecordedCall:
    """A model call the platform made outside a run's loop (a judge's verdict, a knowledge
    base's embeddings, a conversation's summary) recorded as a finished run of
    `gateway_model` with its usage and cost (`price_kind`'s prices: what its quota hold
    settled at), so the usage page and quota counters rebuilt from runs count it; with
    `agent_id`, as the agent's (its usage line, its quotas). One INSERT (the unleased
    writer's)."""
    record = _model_call(
        tenant_id=tenant_id,
        price_kind=price_kind,
        usage=usage,
        started_at=started_at,
        finished_at=None,
        initiated_by_user_id=user_id,
        initiated_by_api_key_id=api_key_id,
        gateway_model=gateway_model,
        model=model,
        provider=provider,
        error=error,
        input=input,
        agent_id=agent_id,
    )
    with rls.tenant_scope(tenant_id):
        [run_id] = write_calls([record])
    return RecordedCall(run_id=run_id, cost_usd=record.cost_usd)


def record_gateway_calls(calls: list[GatewayCall]) -> None:
    """Record each call as a finished run of its key with its usage and events: one
    statement per tenant (under its row-level scope), and row by row if that fails, so one
    bad row loses only itself."""
    by_tenant: dict[int, list[CallRecord]] = {}
    for call in calls:
        by_tenant.setdefault(call.api_key.tenant_id, []).append(_gateway_call(call))
    for tenant_id, records in by_tenant.items():
        with rls.tenant_scope(tenant_id):
            try:
                with transaction.atomic():  # (a savepoint, when the caller has a transaction)
                    write_calls(records)
            except Exception:
                logger.exception("gateway calls of tenant %s: recording them one by one", tenant_id)
                for record in records:
                    try:
                        with transaction.atomic():
                            write_calls([record])
                    except Exception:
                        logger.exception("a gateway call of tenant %s was not recorded", tenant_id)


def column_text(value: str, limit: int) -> str:
    """`value` as a text column stores it: storable, valid UTF-8, at most `limit` long."""
    clean = storable_text(value).encode("utf-8", "replace").decode("utf-8")
    return clean[:limit]


def _gateway_call(call: GatewayCall) -> CallRecord:
    return _model_call(
        tenant_id=call.api_key.tenant_id,
        price_kind=call.price_kind or call.provider,
        usage=call.usage,
        started_at=call.started_at,
        finished_at=call.finished_at,
        initiated_by_user_id=None,
        initiated_by_api_key_id=call.api_key.pk,
        gateway_model=call.gateway_model,
        model=call.model,
        provider=call.provider,
        error=call.error,
        input=call.input,
        events=list(call.events),
    )


def _model_call(
    *,
    tenant_id: int,
    price_kind: str,
    usage: Usage,
    started_at: Any,
    finished_at: Any,
    initiated_by_user_id: int | None,
    initiated_by_api_key_id: int | None,
    gateway_model: str,
    model: str,
    provider: str,
    error: str,
    input: str,
    events: list[tuple[str, dict[str, Any]]] | None = None,
    agent_id: int | None = None,
) -> CallRecord:
    """The record of one model call made outside a run's loop (a gateway call, a judge's
    verdict, a knowledge base's embeddings): its usage, priced by `price_kind`'s table, and
    its text columns cut to their sizes."""

    def count(value: int) -> int:
        return min(max(int(value or 0), 0), 2**31 - 1)  # (a provider's odd number)

    usage = Usage(*(count(n) for n in dataclasses.astuple(usage)))
    cost = usage_cost(tenant_id, price_kind, model, usage)
    return CallRecord(
        tenant_id=tenant_id,
        tool_name="",
        arguments=column_text(input, 2000),
        status=RunStatus.FAILED if error else RunStatus.SUCCEEDED,
        output="",
        error=column_text(error, 2000),
        correlation_id=uuid.uuid4().hex,
        started_at=started_at,
        finished_at=finished_at or timezone.now(),
        initiated_by_user_id=initiated_by_user_id,
        initiated_by_api_key_id=initiated_by_api_key_id,
        events=events or [],
        usage=dataclasses.astuple(usage),
        cost_usd=cost,
        gateway_model=column_text(gateway_model, 300),
        model=column_text(model, 200),
        provider=column_text(provider, 100),
        agent_id=agent_id,
    )
