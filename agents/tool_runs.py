"""Direct tool calls as runs: one tool of the tenant's registry, called by an integrator
(over MCP or REST) instead of a model, recorded as a Run (`tool_name` set, no agent) so it
joins the audit trail with its events.

A tool whose capability requires approval is not executed: the run parks with a pending
Approval, decided like any other (`approval_decide`); a worker then executes the call,
with the approver's edited arguments, or records the rejection (`execute_tool_run`).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.urls import reverse
from django.utils import timezone

from agentplatform.tenancy.models import ApiKey, Tenant
from agentplatform.tenancy.policy import Principal
from agents import run_records
from agents.events import stream_read
from agents.models import Approval, ApprovalStatus, Run, RunEvent
from agents.runtime.spec import Decision, RunOutcome, RunStatus
from agents.runtime.state import RunState
from tools.loader import fresh_tenant_tools, tenant_tools
from tools.runtime.tool import ToolCall, ToolResult
from tools.services import tool_context


@dataclass(frozen=True)
class ToolRunOutcome:
    run_id: int
    status: str  # "succeeded" | "failed" | "awaiting_approval"
    call_id: str
    result: Any = None
    error: str | None = None
    latency_ms: float = 0.0
    decide_at: str = ""  # for awaiting_approval: where a human decides it


async def atool_run(**kwargs: Any) -> ToolRunOutcome:
    """`tool_run` for async callers (the MCP server): its database work borrows a pooled
    connection on any free thread and gives it back at once."""
    return await _tool_run(db=stream_read, record=run_records.awrite, **kwargs)


def tool_run(**kwargs: Any) -> ToolRunOutcome:
    """Call one of the tenant's tools now (or park it for approval) and record the run;
    keyword arguments as `_tool_run`. For sync callers (REST views): database work stays
    on the caller's thread and connection."""
    return async_to_sync(_tool_run)(db=sync_to_async, record=sync_to_async(_write_one), **kwargs)


def _write_one(record: run_records.CallRecord) -> int:
    return run_records.write([record])[0]


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
) -> ToolRunOutcome:
    """Http404 for a name the tenant's registry does not have; PermissionDenied unless the
    key or user (None: the platform) may execute it (`Principal.may_execute_tool`)."""
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
    if toolbox.registry.get(name).capability.requires_approval:
        who = {"initiated_by_api_key": api_key, "initiated_by_user": user}
        run, approval = await db(_park)(tenant, call, who, via)
        return ToolRunOutcome(
            run.pk, "awaiting_approval", call.id, error="approval required",
            decide_at=decide_at(approval),
        )  # fmt: skip
    # Once started, the call runs to its end and is recorded even if the caller goes away
    # (an MCP client disconnecting cancels its request): no effect without its record.
    finishing = asyncio.ensure_future(
        _execute_and_record(record, toolbox, tenant, call, api_key, user, via)
    )
    _finishing.add(finishing)
    finishing.add_done_callback(_finishing.discard)
    return await asyncio.shield(finishing)


_finishing: set[asyncio.Future] = set()  # strong references to calls whose caller left


async def _execute_and_record(record, toolbox, tenant, call, api_key, user, via):
    correlation_id = uuid.uuid4().hex
    ctx = tool_context(
        tenant=tenant,
        user_id=user.pk if user is not None else None,
        correlation_id=correlation_id,
        secrets=toolbox.secrets,
    )
    started = timezone.now()
    result = await toolbox.registry.execute(call, ctx)
    failed = result.error is not None
    run_id = await record(
        run_records.CallRecord(
            tenant_id=tenant.pk,
            tool_name=call.name,
            input=run_records.storable_json(call.arguments),
            status=RunStatus.FAILED if failed else RunStatus.SUCCEEDED,
            output="" if failed else _storable_text(result.result),
            error=run_records.storable_text(result.error or ""),
            correlation_id=correlation_id,
            started_at=started,
            finished_at=timezone.now(),
            initiated_by_user_id=user.pk if user is not None else None,
            initiated_by_api_key_id=api_key.pk if api_key is not None else None,
            events=[("tool.started", _started(call, via)), ("tool.completed", _completed(result))],
        )
    )
    if failed:
        return ToolRunOutcome(
            run_id, "failed", call.id, error=result.error, latency_ms=result.latency_ms
        )
    return ToolRunOutcome(
        run_id, "succeeded", call.id, result=result.result, latency_ms=result.latency_ms
    )


def decide_at(approval: Approval) -> str:
    return (
        f"POST /api/v1/runs/{approval.run_id}/approvals/{approval.pk} "
        f"(or the admin: {reverse('admin:agents_approval_change', args=[approval.pk])})"
    )


def _park(tenant, call: ToolCall, who, via) -> tuple[Run, Approval]:
    run = Run.objects.create(
        tenant=tenant,
        tool_name=call.name,
        input=json.dumps(call.arguments, default=str),
        status=RunStatus.AWAITING_APPROVAL,
        state=RunState(pending_calls=[call]).to_dict(),
        correlation_id=uuid.uuid4().hex,
        last_seq=1,
        **who,
    )
    approval = Approval.objects.create(
        tenant=tenant, run=run, call_id=call.id, tool_name=call.name, arguments=call.arguments
    )
    RunEvent.objects.create(
        tenant=tenant, run=run, seq=1, type="approval.required", payload=_started(call, via)
    )
    return run, approval


async def execute_tool_run(run: Run, sink, checkpoint) -> RunOutcome:
    """A worker's part, once the approval is decided: execute the call (edited arguments
    honoured) or report the rejection. Never twice: a call that started before a crash is
    repeated only if its tool is idempotent."""
    state = RunState.from_dict(run.state)
    call = state.pending_calls[0]
    decision = await stream_read(_decision)(run.pk, call.id)
    if decision is None:  # not decided yet: nothing to do
        return RunOutcome(status=RunStatus.AWAITING_APPROVAL)
    if not decision.approved:
        reason = f": {decision.reason}" if decision.reason else ""
        return await _end(sink, RunStatus.FAILED, error=f"rejected by {decision.by}{reason}")
    toolbox = await stream_read(tenant_tools)(run.tenant_id)
    sink.writer.redact_with(toolbox.secrets)
    if not toolbox.registry.has(call.name):
        return await _end(sink, RunStatus.FAILED, error=f"the tool {call.name} is gone")
    item = toolbox.registry.get(call.name)
    if call.id in state.started and not item.capability.idempotent:
        return await _end(
            sink, RunStatus.FAILED,
            error="the outcome of this call is unknown: it was interrupted while running "
            "and is not safe to repeat; check its effect",
        )  # fmt: skip
    if decision.arguments is not None:
        call = ToolCall(id=call.id, name=call.name, arguments=decision.arguments)
    await sink.emit("tool.started", _started(call, "approval"))
    state.started.add(call.id)
    await checkpoint.save(state, "tools_started")
    ctx = tool_context(
        tenant=run.tenant,
        user_id=run.initiated_by_user_id,
        run_id=str(run.pk),
        correlation_id=run.correlation_id,
        secrets=toolbox.secrets,
    )
    result = await toolbox.registry.execute(call, ctx)
    await sink.emit("tool.completed", _completed(result))
    if result.error is not None:
        return await _end(sink, RunStatus.FAILED, error=result.error)
    return await _end(sink, RunStatus.SUCCEEDED, output=_as_text(result.result))


async def _end(sink, status: RunStatus, *, output: str = "", error: str = "") -> RunOutcome:
    if status is RunStatus.SUCCEEDED:
        await sink.emit("run.completed", {"status": status.value, "output": output})
    else:
        await sink.emit("run.failed", {"status": status.value, "error": error})
    return RunOutcome(status=status, output=output, error=error)


def _decision(run_id: int, call_id: str) -> Decision | None:
    approval = Approval.objects.filter(run_id=run_id, call_id=call_id).first()
    if approval is None or approval.status == ApprovalStatus.PENDING:
        return None
    return approval.as_decision()


def _started(call: ToolCall, via: str) -> dict[str, Any]:
    return {"call_id": call.id, "name": call.name, "arguments": call.arguments, "via": via}


def _completed(result: ToolResult) -> dict[str, Any]:
    return {
        "call_id": result.call_id,
        "name": result.name,
        "result": result.result,
        "error": result.error,
        "latency_ms": round(result.latency_ms, 3),
    }


def _storable_text(value: Any) -> str:
    if isinstance(value, str):
        return run_records.storable_text(value)
    return run_records.storable_json(value)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)
