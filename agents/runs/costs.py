"""What a run's own model calls cost (providers.pricing), written by finalize.

A run's usage holds its model's calls and the calls its tools made to other models (the
`llm` built-in: a `tool.usage` event names each one's connection and model). Those are
priced at their own model; the rest at the run's. A workflow run has no model of its own:
its outcome names every model its steps called (`RunOutcome.priced`: its agent steps' and
its tool steps' calls, kept in its durable records), each priced at its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from agents.models import Run, RunEvent
from providers.models import ProviderConnection
from providers.pricing import usage_cost
from providers.runtime.types import Usage

TOOL_USAGE = "tool.usage"


def run_own_cost(
    run: Run,
    own: Usage,
    pending: Iterable[tuple[str, dict[str, Any]]],
    tool_usage: list[dict[str, Any]] | None = None,
    priced: list[dict[str, Any]] | None = None,
) -> Decimal:
    """`own`: the run's usage without its children's; `pending`: its events not written
    yet (type, payload); `tool_usage`: the payloads of all its `tool.usage` events when the
    caller saw every one (a run's first attempt), else None. One query for its stored
    `tool.usage` events (none given `tool_usage`), and one for the connections they name
    when there are any. `priced`: model calls priced at their own model besides (a workflow
    run's: RunOutcome.priced)."""
    if tool_usage is None:
        tool_usage = _tool_usage_payloads(run, pending)
    if priced:
        tool_usage = [*tool_usage, {"models": priced}]
    cost, used = spent_by_tools(run.tenant_id, tool_usage)
    if run.model:
        rest = Usage(*(max(a - b, 0) for a, b in zip(_tuple(own), _tuple(used), strict=True)))
        cost += usage_cost(run.tenant_id, run.provider, run.model, rest)
    return cost


def tool_call_cost(tenant_id: int, events: Iterable[tuple[str, dict[str, Any]]]) -> Decimal:
    """What a direct tool call's tools spent on models, from its events (type, payload):
    no query when it spent nothing."""
    return spent_by_tools(tenant_id, [p for t, p in events if t == TOOL_USAGE])[0]


def spent_by_tools(tenant_id: int, payloads: Iterable[dict[str, Any]]) -> tuple[Decimal, Usage]:
    """The cost and tokens of the model calls in `tool.usage` payloads, each priced at its
    connection's model. One query for the connections when there are any."""
    spent = [
        model
        for payload in payloads
        if isinstance(payload, dict)
        for model in payload.get("models") or []
        if isinstance(model, dict)
    ]
    cost, total = Decimal(0), Usage()
    if not spent:
        return cost, total
    names = {str(m.get("connection") or "") for m in spent}
    kinds = {
        c.name: c.price_kind
        for c in ProviderConnection.objects.filter(tenant_id=tenant_id, name__in=names)
    }
    for model in spent:
        used = Usage(*(_count(model.get(f)) for f in _FIELDS))
        kind = kinds.get(str(model.get("connection") or ""), "")
        cost += usage_cost(tenant_id, kind, str(model.get("model") or ""), used)
        total = total + used
    return cost, total


_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def _tuple(usage: Usage) -> tuple[int, int, int, int]:
    return (
        usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens
    )  # fmt: skip


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def _tool_usage_payloads(run: Run, pending) -> list[dict[str, Any]]:
    written = RunEvent.objects.filter(run_id=run.pk, type=TOOL_USAGE).values_list(
        "payload", flat=True
    )
    return [*written, *(p for t, p in pending if t == TOOL_USAGE)]
