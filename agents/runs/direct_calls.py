"""Direct tool calls as runs: one tool of the tenant's registry, called by an integrator
(over MCP or REST) or an admin (the config and admin test pages) instead of a model,
recorded as a Run (`tool_name` set, no agent) so it joins the audit trail with its events.

Every direct call takes the tool-call step the agent loop takes (agents/runtime/tool_step.py)
and is recorded by the recorder (agents/runs/writer.py). A call the step says waits for a
human (its tool requires approval) is not executed: the run parks with a pending Approval,
decided like any other (`approval_decide`); a worker then takes the call through the step
again with the decision — executing it, with the approver's edited arguments, or recording
the rejection (`execute_tool_run`). A call that runs now is recorded once it has finished,
in one statement (its `tool.started` and `tool.completed` events together): a process that
dies during the call leaves no record of it.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Callable
from dataclasses import astuple, dataclass, replace
from decimal import Decimal
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.urls import reverse
from django.utils import timezone

from agents import quotas
from agents.models import Approval, Run, approval_decisions
from agents.runs import writer as run_writer
from agents.runs.costs import TOOL_USAGE, tool_call_cost
from agents.runtime.spec import Decision, RunOutcome, RunStatus
from agents.runtime.state import NoCheckpoint, RunState
from agents.runtime.tool_step import ApprovalRule, ToolCallStep, call_payload
from base.stream_reads import stream_read
from tenancy.models import ApiKey, Tenant
from tenancy.policy import Principal
from tools.loader import fresh_tenant_tools, tenant_tools
from tools.runtime.context import RunContext, SecretAccessor
from tools.runtime.rate_limit import RateLimiter
from tools.runtime.tool import ToolCall, ToolResult
from tools.services import tool_context

DIRECT_CALLS = ApprovalRule("flagged")  # a direct call waits only for tools flagged so


@dataclass(frozen=True)
class ToolRunOutcome:
    run_id: int
    status: str  # "succeeded" | "failed" | "awaiting_approval"
    call_id: str
    result: Any = None
    error: str | None = None
    latency_ms: float = 0.0
    decide_at: str = ""  # for awaiting_approval: where a human decides it
    prepared_request: dict[str, Any] | None = None  # for awaiting_approval: what it would send
    data: Any = None  # for succeeded: the whole result, before the tool's view (model_view)


async def atool_run(**kwargs: Any) -> ToolRunOutcome:
    """`tool_run` for async callers (the MCP server): its database work borrows a pooled
    connection on any free thread and gives it back at once; its record is group-committed
    on the loop's own connection (`run_writer.awrite_call`)."""
    return await _tool_run(db=stream_read, record=run_writer.awrite_call, **kwargs)


def tool_run(**kwargs: Any) -> ToolRunOutcome:
    """Call one of the tenant's tools now (or park it for approval) and record the run;
    keyword arguments as `_tool_run`. For sync callers (REST views, the config and admin
    test pages, the verifier task): database work stays on the caller's thread and
    connection."""
    return async_to_sync(atool_run_on_callers_thread)(**kwargs)


async def atool_run_on_callers_thread(**kwargs: Any) -> ToolRunOutcome:
    """`tool_run` for the coroutines a sync caller runs with `async_to_sync` (the self-tests'
    calls, several at once): database work on the caller's thread and connection, one
    statement at a time, so within its tenant scope (row-level security)."""
    return await _tool_run(db=sync_to_async, record=sync_to_async(write_one), **kwargs)


def write_one(record: run_writer.CallRecord) -> int:
    """Record one finished call (its run and events) on the caller's connection."""
    return run_writer.write_calls([record])[0]


async def _tool_run(
    *,
    db: Callable,
    record: Callable,
    tenant: Tenant,
    name: str,
    arguments: Any,
    api_key: ApiKey | None = None,
    user=None,
    via: str = "api",
    unattended: str | None = None,
) -> ToolRunOutcome:
    """Http404 for a name the tenant's registry does not have; PermissionDenied unless the
    key or user (None: the platform) may execute it (`Principal.may_execute_tool`).
    `unattended`: nobody can approve this call (a self-test, a verifier): a call that needs
    approval is not parked but refused with this text, recorded as a failed run."""
    toolbox = fresh_tenant_tools(tenant.pk) or await db(tenant_tools)(tenant.pk)
    if not toolbox.registry.has(name):
        raise Http404("No such tool.")
    if api_key is not None or user is not None:
        if api_key is not None:
            principal = Principal.of_key(api_key)  # no query: the MCP path stays off the DB
        else:
            principal = await db(Principal.for_initiator)(tenant, user)
        if not principal.may_execute_tool(name):
            raise PermissionDenied("You may not execute this tool.")
    call = ToolCall(id=f"call_{uuid.uuid4().hex[:12]}", name=name, arguments=arguments)
    # Once started, the call runs to its end and is recorded even if the caller goes away
    # (an MCP client disconnecting cancels its request): no effect without its record.
    finishing = asyncio.ensure_future(
        step_and_record(db, record, toolbox, tenant, call, api_key, user, via, unattended)
    )
    _finishing.add(finishing)
    finishing.add_done_callback(_finishing.discard)
    return await asyncio.shield(finishing)


_finishing: set[asyncio.Future] = set()  # strong references to calls whose caller left


class _Events:
    """A direct call's events, kept to be recorded with its run once the call has finished."""

    def __init__(self) -> None:
        self.kept: list[tuple[str, dict[str, Any]]] = []

    async def emit(self, type: str, payload: dict[str, Any]) -> None:
        self.kept.append((type, payload))


async def step_and_record(
    db, record, toolbox, tenant, call, api_key, user, via, unattended,
    *, approval: ApprovalRule = DIRECT_CALLS, rate_limiter: RateLimiter | None = None,
) -> ToolRunOutcome:  # fmt: skip
    """Take `call` of `toolbox.registry` through the tool-call step and record it as a run
    (`record`: writes a CallRecord, returns the run's id; `db`: how database work runs).
    The one path of direct calls and dry calls (dry_calls.py), which passes its `approval`
    rule and its `rate_limiter` (None: the tenant's, in Redis)."""
    correlation_id = uuid.uuid4().hex
    user_id = user.pk if user is not None else None
    api_key_id = api_key.pk if api_key is not None else None
    ctx = tool_context(
        tenant=tenant,
        user_id=user_id,
        api_key_id=None if user_id else api_key_id,  # (as a run's: run_tool_context)
        correlation_id=correlation_id,
        secrets=toolbox.secrets,
        model_calls=quotas.ToolModelCalls(
            quotas.Meter(tenant_id=tenant.pk, user_id=user_id, api_key_id=api_key_id)
        ),
    )
    if rate_limiter is not None:
        ctx = replace(ctx, rate_limiter=rate_limiter)
    state = RunState(pending_calls=[call])
    events = _Events()
    step = ToolCallStep(
        registry=toolbox.registry,
        ctx=ctx,
        emit=events.emit,
        checkpoint=NoCheckpoint(),  # recorded once, when the call has finished
        approval=approval,
        unattended=unattended,
        via=via,
    )
    started = timezone.now()
    outcome = await step.run(state, [call])
    if outcome.awaiting:  # nothing executed, nothing emitted: park it
        [waiting] = outcome.awaiting  # (with the exact request it sends, if prepared)
        park = functools.partial(
            run_writer.park_call,
            tenant_id=tenant.pk,
            call=waiting,
            state=state.to_dict(),
            event=call_payload(waiting, ctx, via),
            initiated_by_user_id=user_id,
            initiated_by_api_key_id=api_key_id,
            correlation_id=correlation_id,
        )
        run, pending = await db(park)()
        return ToolRunOutcome(
            run.pk, "awaiting_approval", call.id, error="approval required",
            decide_at=decide_at(pending), prepared_request=pending.prepared_request,
        )  # fmt: skip
    if outcome.suspended:  # a person must act first (connect an account): nobody waits here
        said = [p.get("message") for _, p in events.kept if isinstance(p.get("message"), str)]
        error = said[-1] if said else "the call waits for a person to act; it cannot run here"
        outcome.results[call.id] = ToolResult(call.id, call.name, error=error)
    result = outcome.results[call.id]
    failed = result.error is not None
    spent = any(t == TOOL_USAGE for t, _ in events.kept)  # (else no query: the MCP path)
    cost = await db(tool_call_cost)(tenant.pk, events.kept) if spent else Decimal(0)
    run_id = await record(
        run_writer.CallRecord(
            tenant_id=tenant.pk,
            tool_name=call.name,
            arguments=call.arguments,
            status=RunStatus.FAILED if failed else RunStatus.SUCCEEDED,
            output="" if failed else result.result,
            error=result.error or "",
            correlation_id=correlation_id,
            started_at=started,
            finished_at=timezone.now(),
            initiated_by_user_id=user_id,
            initiated_by_api_key_id=api_key_id,
            events=events.kept,
            usage=astuple(state.usage),  # what it asked models (`llm`)
            cost_usd=cost,
        )
    )
    if failed:
        return ToolRunOutcome(
            run_id, "failed", call.id, error=result.error, latency_ms=result.latency_ms
        )
    return ToolRunOutcome(
        run_id, "succeeded", call.id, result=result.result, latency_ms=result.latency_ms,
        data=result.data,
    )  # fmt: skip


def run_tool_context(run: Run, secrets: SecretAccessor) -> RunContext:
    """The context the tools of `run` get — an agent's run (the engine), a direct call's run
    after its approval, an approval's call prepared again — from the run's record: its
    tenant, who started it, its id and correlation id, with `secrets` (the tenant's tool
    secrets, plus a remote agent's token for an agent's run); its tools' own model calls
    are held against the run's quotas."""
    return tool_context(
        tenant=run.tenant,
        user_id=run.initiated_by_user_id,
        unattended=started_by_trigger(run),
        # A key's run acting for a member is that member's: never the key's memory.
        api_key_id=None if run.initiated_by_user_id else run.initiated_by_api_key_id,
        run_id=str(run.pk),
        correlation_id=run.correlation_id,
        secrets=secrets,
        model_calls=quotas.ToolModelCalls(quotas.Meter.for_run(run)),
    )


def started_by_trigger(run: Run) -> bool:
    """Was `run`, or the run it is a step of (a crew's, a workflow's), started by a trigger?
    Its person is then not present (agents/triggers.py). One query per parent."""
    for _ in range(MAX_PARENTS):
        if run.trigger_id is not None:
            return True
        if run.parent_id is None:
            return False
        found = Run.objects.filter(pk=run.parent_id).only("trigger_id", "parent_id").first()
        if found is None:
            return False
        run = found
    return True  # deeper than any run nests: taken as unattended, the safe side


MAX_PARENTS = 32


def decide_at(approval: Approval) -> str:
    return (
        f"POST /api/v1/runs/{approval.run_id}/approvals/{approval.pk} "
        f"(or the admin: {reverse('admin:agents_approval_change', args=[approval.pk])})"
    )


async def execute_tool_run(run: Run, sink, checkpoint) -> RunOutcome:
    """A worker's part, once the approval is decided: the call goes through the tool-call
    step again, with the decision — executed (edited arguments honoured) or its rejection
    recorded. Never twice: a recorded result is not executed again, and a call that started
    before a crash is repeated only if its tool is idempotent."""
    state = RunState.from_dict(run.state)
    call = state.pending_calls[0]
    decision = await stream_read(_decision)(run.pk, call.id)
    if decision is None:  # not decided yet: nothing to do
        return RunOutcome(status=RunStatus.AWAITING_APPROVAL)
    toolbox = await stream_read(tenant_tools)(run.tenant_id)
    sink.writer.redact_with(toolbox.secrets)
    if decision.approved and not toolbox.registry.has(call.name):
        return await _end(sink, RunStatus.FAILED, error=f"the tool {call.name} is gone")
    ctx = run_tool_context(run, toolbox.secrets)
    step = ToolCallStep(
        registry=toolbox.registry,
        ctx=ctx,
        emit=sink.emit,
        checkpoint=checkpoint,
        approval=DIRECT_CALLS,
        decisions={call.id: decision},
        via="approval",
    )
    outcome = await step.run(state, [call])
    recorded = state.results[call.id]
    if recorded.is_error:
        return await _end(sink, RunStatus.FAILED, error=recorded.content)
    result = outcome.results.get(call.id)  # None: recorded before an interruption
    output = run_writer.stored_text(result.result) if result is not None else recorded.content
    return await _end(sink, RunStatus.SUCCEEDED, output=output)


async def _end(sink, status: RunStatus, *, output: str = "", error: str = "") -> RunOutcome:
    if status is RunStatus.SUCCEEDED:
        await sink.emit("run.completed", {"status": status.value, "output": output})
    else:
        await sink.emit("run.failed", {"status": status.value, "error": error})
    return RunOutcome(status=status, output=output, error=error)


def _decision(run_id: int, call_id: str) -> Decision | None:
    return approval_decisions(run_id).get(call_id)
