"""Model calls the platform made outside a run's loop (/v1 gateway models, embeddings, a
judge's verdict, a tool's model call outside a run) recorded as finished runs with their usage
and cost, so the usage page and the quota counters rebuilt from runs count them."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentplatform.tenancy import rls
from agentplatform.tenancy.models import ApiKey
from agents.models import Run, RunEvent
from agents.runs.writer import storable_text
from agents.runtime.spec import RunStatus
from providers.pricing import usage_cost
from providers.runtime.types import Usage

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
) -> Run:
    """A model call the platform made outside a run's loop (a judge's verdict, a knowledge
    base's embeddings) recorded as a finished run of `gateway_model` with its usage and
    cost (`price_kind`'s prices: what its quota hold settled at), so the usage page and
    quota counters rebuilt from runs count it. One INSERT."""
    run = _model_call_run(
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
    )
    with rls.tenant_scope(tenant_id):
        run.save(force_insert=True)
    return run


def record_gateway_calls(calls: list[GatewayCall]) -> None:
    """Record each call as a finished run of its key with its usage: one INSERT per tenant
    (under its row-level scope), and row by row if that fails, so one bad row loses only
    itself."""
    by_tenant: dict[int, list[Run]] = {}
    for call in calls:
        by_tenant.setdefault(call.api_key.tenant_id, []).append(_gateway_run(call))
    for tenant_id, runs in by_tenant.items():
        with rls.tenant_scope(tenant_id):
            try:
                with transaction.atomic():
                    Run.objects.bulk_create(runs)
                    _record_gateway_events(runs)
            except Exception:
                logger.exception("gateway calls of tenant %s: recording them one by one", tenant_id)
                for run in runs:
                    try:
                        with transaction.atomic():
                            run.save(force_insert=True)
                            _record_gateway_events([run])
                    except Exception:
                        logger.exception("a gateway call of tenant %s was not recorded", tenant_id)


def _record_gateway_events(runs: list[Run]) -> None:
    """The events of recorded gateway calls (a model alias's fallbacks): one INSERT."""
    events = [
        RunEvent(tenant_id=run.tenant_id, run=run, seq=seq, type=type, payload=payload)
        for run in runs
        for seq, (type, payload) in enumerate(getattr(run, "gateway_events", ()), start=1)
    ]
    if events:
        RunEvent.objects.bulk_create(events)


def column_text(value: str, limit: int) -> str:
    """`value` as a text column stores it: storable, valid UTF-8, at most `limit` long."""
    clean = storable_text(value).encode("utf-8", "replace").decode("utf-8")
    return clean[:limit]


def _gateway_run(call: GatewayCall) -> Run:
    run = _model_call_run(
        tenant_id=call.api_key.tenant_id,
        price_kind=call.price_kind or call.provider,
        usage=call.usage,
        started_at=call.started_at,
        finished_at=call.finished_at,
        initiated_by_api_key=call.api_key,
        gateway_model=call.gateway_model,
        model=call.model,
        provider=call.provider,
        error=call.error,
        input=call.input,
    )
    run.gateway_events = call.events  # written with it (_record_gateway_events)
    return run


def _model_call_run(
    *,
    tenant_id: int,
    price_kind: str,
    usage: Usage,
    started_at: Any,
    finished_at: Any,
    gateway_model: str,
    model: str,
    provider: str,
    error: str,
    input: str,
    **initiator: Any,
) -> Run:
    """The unsaved finished run recording one model call made outside a run's loop (a
    gateway call, a judge's verdict, a knowledge base's embeddings): its usage, priced by
    `price_kind`'s table, and its text columns made storable."""

    def count(value: int) -> int:
        return min(max(int(value or 0), 0), 2**31 - 1)  # (a provider's odd number)

    usage = Usage(*(count(n) for n in dataclasses.astuple(usage)))
    cost = usage_cost(tenant_id, price_kind, model, usage)
    return Run(
        tenant_id=tenant_id,
        **initiator,
        gateway_model=column_text(gateway_model, 300),
        model=column_text(model, 200),
        provider=column_text(provider, 100),
        status=RunStatus.FAILED if error else RunStatus.SUCCEEDED,
        error=column_text(error, 2000),
        input=column_text(input, 2000),
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cost_usd=cost,
        total_cost_usd=cost,
        correlation_id=uuid.uuid4().hex,
        started_at=started_at,
        finished_at=finished_at or timezone.now(),
    )
