"""What one execution of a run shows outside the database: its `invoke_agent` span
(agents/runtime/tracing.py) and the correlation id its log lines carry (base/logs.py).
agents.runs.engine wraps each execution in `observed_run`, and reports the outcome with
`traced_outcome`; the model and tool spans nest inside from the runtime's own hooks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agents.models import Run
from agents.runtime import tracing
from agents.runtime.spec import RunOutcome, RunStatus
from base import logs


@contextmanager
def observed_run(run: Run) -> Iterator[Any]:
    """Inside: the run's log context, and its span when tracing is on (yielded, to `set`
    attributes on; a do-nothing one when off). A direct tool call (REST, MCP) has no run
    span: its tool step's `execute_tool` span is the whole of it."""
    with logs.run_context(
        run_id=run.pk, correlation_id=run.correlation_id, tenant_id=run.tenant_id
    ), _span(run) as span:  # fmt: skip
        yield span


def _span(run: Run):
    if not tracing.enabled() or run.tool_name:
        return tracing.OFF
    agent = Run.agent.field.get_cached_value(run, None) if run.agent_id else None  # (no query here)
    tenant = Run.tenant.field.get_cached_value(run, None)
    if agent is not None:
        name = agent.slug
    elif run.crew_id is not None:
        name = f"crew {run.crew_id}"  # named by its slug once the crew is read (execution)
    else:
        name = run.gateway_model or "agent"
    return tracing.run_span(
        agent=name,
        agent_id=run.agent_id or run.crew_id,
        run_id=run.pk,
        tenant_id=run.tenant_id,
        tenant=tenant.slug if tenant is not None else "",
        correlation_id=run.correlation_id,
        conversation_id=run.conversation_id,
        parent_run_id=run.parent_id,
        traceparent=run.traceparent,
    )


def traced_outcome(run: Run, outcome: RunOutcome) -> None:
    """The recorded outcome on the run's span: status, tokens, and the cost where one is
    known (a `cost_usd` on the outcome or the run, when cost accounting sets one)."""
    if not tracing.enabled():
        return
    usage = outcome.usage
    cost = getattr(outcome, "cost_usd", None)
    if cost is None:
        cost = getattr(run, "cost_usd", None)
    tracing.annotate(
        **{
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "agentplatform.cost_usd": float(cost) if cost is not None else None,
        }
    )
    if outcome.status in (RunStatus.FAILED, RunStatus.MAX_ROUNDS):
        tracing.fail_current(outcome.status.value)
