"""What the platform keeps of a gateway call (`agentplatform/v1/gateway.py` sends it to the
provider): what it may cost held against its tenant's and its key's limits before any
provider is contacted (`hold`: a `Held`); once it is answered, what was held settled at what
the call used and its `chat` span given its cost, off the answer's path
(`Held.settle_later`); what a call that reached no provider held given back
(`Held.release_later`); and the call recorded as a run of its key, in batches
(`record_later`); `flush` writes and settles what this process holds. Its settlement
looks the price up once for the quota and the span, and only when a cost limit or the span
needs it. docs/quotas.md, docs/observability.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from agents import quotas
from agents.runs import GatewayCall, record_gateway_calls
from base.stream_reads import stream_read
from providers.pricing import Price, cost_of, price_for
from providers.runtime.types import Usage

logger = logging.getLogger(__name__)


async def hold(
    tenant_id: int,
    api_key_id: int,
    price_kind: str,
    model: str,
    input_tokens: int,
    output_tokens: int,
) -> Held:
    """`input_tokens` and `output_tokens` of `model` (priced at `price_kind`, only if a cost
    limit needs it) held against the limits of the tenant and its key; QuotaExceeded naming
    the first that cannot take them."""
    price = _PriceOnce(tenant_id, price_kind, model)
    estimate = Usage(input_tokens=input_tokens, output_tokens=output_tokens)
    reservation = await quotas.reserve_async(
        quotas.Meter(tenant_id=tenant_id, api_key_id=api_key_id),
        tokens=input_tokens + output_tokens,
        cost_usd=lambda: price.cost(estimate),
    )
    return Held(reservation, tenant_id)


@dataclass
class Held:
    """What a gateway call holds against the limits of its tenant and key."""

    reservation: quotas.Reservation
    tenant_id: int

    def settle_later(
        self,
        price_kind: str,
        model: str,
        usage: Usage,
        *,
        span: Any = None,
        answered: Usage | None = None,
        ended_at: int | None = None,
    ) -> None:
        """What is held replaced by `usage` of `model` (at `price_kind`: the pair that
        answered), and `span` (given its answer by the caller) given the cost of the
        provider's own usage `answered` and ended at `ended_at`: in one task, off the
        answer's path, the price found at most once (it may need a query: found now, as the
        call's record finds it) and only when a cost limit or the span needs it."""
        if self.reservation.empty and span is None:
            return
        price = _PriceOnce(self.tenant_id, price_kind, model)
        _later(_settled(self.reservation, price, usage, span, answered, ended_at))

    def release_later(self) -> None:
        """What a call that reached no provider held, given back off the answer's path."""
        if not self.reservation.empty:
            _later(quotas.settle_async(self.reservation, tokens=0))


class _PriceOnce:
    """A pair's price at its tenant's prices, looked up when first asked (synchronous: it
    may query), then kept."""

    def __init__(self, tenant_id: int, price_kind: str, model: str) -> None:
        self.tenant_id, self.price_kind, self.model = tenant_id, price_kind, model
        self._found: tuple[Price | None] | None = None

    def cost(self, usage: Usage) -> Decimal | None:
        """What `usage` costs; None when no price is known."""
        if self._found is None:
            self._found = (price_for(self.tenant_id, self.price_kind, self.model),)
        price = self._found[0]
        if price is None:
            return None
        return cost_of(
            price,
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
        )


async def _settled(
    held: quotas.Reservation,
    price: _PriceOnce,
    usage: Usage,
    span: Any,
    answered: Usage | None,
    ended_at: int | None,
) -> None:
    try:
        if not held.empty:
            tokens = usage.input_tokens + usage.output_tokens
            await quotas.settle_async(held, tokens=tokens, cost_usd=lambda: price.cost(usage))
    finally:
        if span is not None:
            try:
                cost = None if answered is None else await stream_read(price.cost)(answered)
                if cost is not None:
                    span.set(**{"agentplatform.cost_usd": float(cost)})
            finally:
                span.end(ended_at)


def _later(work: Coroutine[Any, Any, None]) -> None:
    task = asyncio.get_running_loop().create_task(work)
    _settling.add(task)
    task.add_done_callback(_settling.discard)


_settling: set[asyncio.Task] = set()


# -- the record ------------------------------------------------------------------------------
class _Recorder:
    """Gateway calls written in batches, one INSERT for all those of about FLUSH_S: one per
    call took the gateway from 229 to 123 requests/s, and batches of 50 ms instead of 250
    cost 0.4 ms more CPU per call at 170 calls/s (bench/gateway.py). A process stopped with
    SIGTERM writes what it holds (`flush`, at lifespan shutdown)."""

    FLUSH_S = 0.25

    def __init__(self) -> None:
        self.pending: list[GatewayCall] = []
        self.flushing: asyncio.Task | None = None

    def add(self, call: GatewayCall) -> None:
        self.pending.append(call)
        if self.flushing is None:
            self.flushing = asyncio.get_running_loop().create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        try:
            await asyncio.sleep(self.FLUSH_S)
            await self.flush()
        finally:
            self.flushing = None

    async def flush(self) -> None:
        while self.pending:
            calls, self.pending = self.pending, []
            try:
                await stream_read(record_gateway_calls)(calls)
            except Exception:
                logger.exception("%d gateway calls were not recorded", len(calls))


_recorder = _Recorder()


def record_later(call: GatewayCall) -> None:
    """`call` recorded as a run of its key in the next batch."""
    _recorder.add(call)


async def flush() -> None:
    """The calls this process holds recorded, and its settlements made."""
    await _recorder.flush()
    if _settling:
        await asyncio.wait(set(_settling), timeout=30)
