"""Executing a Run from its record: claim it, run (or resume) the loop, finalize.

Safe to call twice for the same run: a run is claimed with a lease (an UPDATE that only
one caller wins), the lease is renewed while the run works, and every checkpoint writes
only under that lease. A run whose worker died keeps its lease until it expires; the
sweeper then queues it again and the next claimer resumes from the last checkpoint. No DB
transaction is open while the model or a tool runs.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import timedelta

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from agents.events import RunEventSink, next_seq, publisher
from agents.facts import DjangoFactStore
from agents.models import Approval, ApprovalStatus, Message, Run
from agents.runtime.loop import agent_registry, run_agent
from agents.runtime.prompt import instructions_digest, tools_digest
from agents.runtime.spec import AgentSpec, Decision, RunOutcome, RunStatus
from agents.runtime.state import RunState
from agents.specs import agent_spec, conversation_history
from providers.services import adapter_for, default_connection
from tools.loader import tenant_tools
from tools.services import tool_context

logger = logging.getLogger(__name__)


class LeaseLost(Exception):
    """Another worker owns this run now; stop without writing."""


def lease_seconds() -> float:
    return float(getattr(settings, "RUN_LEASE_S", 30))


def cancel_key(run: Run) -> str:
    # The correlation id makes keys unique even where run ids repeat (a reset database
    # beside a kept Redis, test sessions sharing one Redis).
    return f"ap:run:{run.pk}:{run.correlation_id}:cancel"


def claim(run_id: int, owner: str) -> Run | None:
    """Take the run if it is queued, or running under an expired lease. One UPDATE."""
    now = timezone.now()
    claimable = Q(status=RunStatus.QUEUED) | Q(status=RunStatus.RUNNING, lease_expires_at__lt=now)
    won = Run.objects.filter(claimable, pk=run_id).update(
        status=RunStatus.RUNNING,
        lease_owner=owner,
        lease_expires_at=now + timedelta(seconds=lease_seconds()),
        attempts=F("attempts") + 1,
    )
    if not won:
        return None
    run = Run.objects.select_related("agent", "tenant", "conversation").get(pk=run_id)
    if run.started_at is None:
        Run.objects.filter(pk=run_id).update(started_at=now)
        run.started_at = now
    return run


class _Checkpoint:
    def __init__(self, run: Run, owner: str, sink: RunEventSink) -> None:
        self.run, self.owner, self.sink = run, owner, sink

    async def save(self, state: RunState, reason: str) -> None:
        await sync_to_async(self._save)(state)

    def _save(self, state: RunState) -> None:
        usage = state.usage
        updated = Run.objects.filter(pk=self.run.pk, lease_owner=self.owner).update(
            state=state.to_dict(),
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            last_seq=self.sink.seq,
            lease_expires_at=timezone.now() + timedelta(seconds=lease_seconds()),
        )
        if not updated:
            raise LeaseLost(f"run {self.run.pk} was taken over")


def execute_run(run_id: int) -> str:
    """Claim and execute (or resume) a run; returns what happened, for logs."""
    owner = uuid.uuid4().hex
    run = claim(run_id, owner)
    if run is None:
        return "not claimable"
    try:
        outcome = async_to_sync(_execute)(run, owner)
    except LeaseLost:
        return "lease lost"
    finalize(run, owner, outcome)
    return outcome.status.value


async def _execute(run: Run, owner: str) -> RunOutcome:
    prepared = await sync_to_async(_prepare)(run)
    if isinstance(prepared, RunOutcome):  # a configuration problem: say so on the stream too
        sink = RunEventSink(run, next_seq=await sync_to_async(next_seq)(run.pk))
        await sink.emit("run.failed", {"status": "failed", "error": prepared.error})
        run.last_seq = sink.seq
        return prepared
    spec, adapter, toolbox, ctx, state, history, decisions, seq = prepared
    sink = RunEventSink(run, next_seq=seq)
    heartbeat = asyncio.create_task(_renew_lease(run.pk, owner, asyncio.current_task()))
    redis = publisher()

    async def is_cancelled() -> bool:
        return bool(redis.exists(cancel_key(run)))

    try:
        outcome = await run_agent(
            spec=spec,
            adapter=adapter,
            registry=toolbox.registry,
            ctx=ctx,
            state=state,
            input=run.input,
            history=history,
            decisions=decisions,
            facts=DjangoFactStore(run_id=run.pk),
            sink=sink,
            checkpoint=_Checkpoint(run, owner, sink),
            is_cancelled=is_cancelled,
        )
    except asyncio.CancelledError:
        raise LeaseLost(f"run {run.pk} lost its lease") from None
    finally:
        heartbeat.cancel()
    await sink.flush()
    run.last_seq = sink.seq
    return outcome


async def _renew_lease(run_id: int, owner: str, worker: asyncio.Task | None) -> None:
    """Keep the lease while a long model or tool call runs; stop the run if it is lost."""
    while True:
        await asyncio.sleep(lease_seconds() / 3)
        renewed = await Run.objects.filter(pk=run_id, lease_owner=owner).aupdate(
            lease_expires_at=timezone.now() + timedelta(seconds=lease_seconds())
        )
        if not renewed and worker is not None:
            worker.cancel()
            return


def _prepare(run: Run):
    """Everything the loop needs, read from the database before any model call."""
    agent = run.agent
    if agent is None:
        return RunOutcome(status=RunStatus.FAILED, error="the agent of this run was deleted")
    connection = agent.provider_connection or default_connection(run.tenant)
    if connection is None:
        return RunOutcome(
            status=RunStatus.FAILED,
            error="no provider connection: an admin must add one (Admin → Provider connections)",
        )
    spec: AgentSpec = agent_spec(agent, connection)
    adapter = adapter_for(connection)
    toolbox = tenant_tools(run.tenant)
    facts = DjangoFactStore(run_id=run.pk)
    ctx = tool_context(
        tenant=run.tenant,
        user_id=run.initiated_by_user_id,
        run_id=str(run.pk),
        correlation_id=run.correlation_id,
    )
    if not run.instructions_digest:
        Run.objects.filter(pk=run.pk).update(
            provider=adapter.provider,
            model=spec.model,
            instructions_digest=instructions_digest(spec),
            tools_digest=tools_digest(agent_registry(spec, toolbox.registry, facts)),
            limits={
                "max_rounds": spec.max_rounds,
                "max_tool_calls": spec.max_tool_calls,
                "max_tokens_per_run": spec.max_tokens_per_run,
            },
        )
    state = RunState.from_dict(run.state) if run.state else None
    history = conversation_history(run) if state is None else ()
    decisions = {
        a.call_id: Decision(
            approved=a.status == ApprovalStatus.APPROVED,
            by=a.decided_by_label or "an approver",
            reason=a.reason,
            arguments=a.edited_arguments,
        )
        for a in run.approvals.exclude(status=ApprovalStatus.PENDING)
    }
    return spec, adapter, toolbox, ctx, state, history, decisions, next_seq(run.pk)


def finalize(run: Run, owner: str, outcome: RunOutcome) -> None:
    """Record the outcome under the lease, in one transaction."""
    now = timezone.now()
    terminal = outcome.status not in (RunStatus.AWAITING_APPROVAL, RunStatus.RUNNING)
    with transaction.atomic():
        updated = Run.objects.filter(pk=run.pk, lease_owner=owner).update(
            status=outcome.status,
            output=outcome.output,
            structured_output=outcome.structured_output,
            error=outcome.error,
            input_tokens=outcome.usage.input_tokens,
            output_tokens=outcome.usage.output_tokens,
            cache_read_tokens=outcome.usage.cache_read_tokens,
            cache_write_tokens=outcome.usage.cache_write_tokens,
            finished_at=now if terminal else None,
            lease_owner="",
            lease_expires_at=None,
            last_seq=run.last_seq,
        )
        if not updated:
            return
        for call in outcome.awaiting:
            Approval.objects.get_or_create(
                run_id=run.pk,
                call_id=call.id,
                defaults={
                    "tenant_id": run.tenant_id,
                    "tool_name": call.name,
                    "arguments": call.arguments,
                },
            )
        if terminal and run.conversation_id and outcome.status != RunStatus.CANCELLED:
            Message.objects.create(
                tenant_id=run.tenant_id,
                conversation_id=run.conversation_id,
                role=Message.Role.ASSISTANT,
                content=outcome.output or outcome.error,
                run_id=run.pk,
            )
    if terminal:
        publisher().delete(cancel_key(run))
    if run.status == RunStatus.FAILED or outcome.status == RunStatus.FAILED:
        logger.info("run %s failed: %s", run.pk, outcome.error)
