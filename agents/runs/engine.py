"""Executing a Run from its record: claim it, run (or resume) the loop, a crew, a direct
call or a workflow (agents.runs.workflows), finalize.

Safe to call twice for the same run: a run is claimed with a lease (an UPDATE that only
one caller wins), the lease is renewed while the run works, and every checkpoint writes
only under that lease. A run whose worker died keeps its lease until it expires; the
sweeper then queues it again and the next claimer resumes from the last checkpoint. No DB
transaction is open while the model or a tool runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.postgres.expressions import ArraySubquery
from django.db import transaction
from django.db.models import Sum
from django.db.models.functions import Now
from django.utils import timezone

from agents import quotas
from agents.conversations import (
    CompactionSettings,
    History,
    RunAttachments,
    attachments_read_wait,
    compacted_history,
    conversation_frame,
    run_attachments,
    run_history,
)
from agents.draft_runs import agent_of_run, crew_of_run, draft_run_versions
from agents.models import (
    MAX_INPUT_CHARS,
    Agent,
    Approval,
    ApprovalStatus,
    Conversation,
    Crew,
    CrewMember,
    Message,
    QueuedMessage,
    Run,
    RunEvent,
    approval_decisions,
)
from agents.observability import observed_run, traced_outcome
from agents.runs import bridge, cancellation
from agents.runs import claim as run_claim
from agents.runs.bridge import db
from agents.runs.claim import lease_seconds
from agents.runs.costs import run_own_cost
from agents.runs.direct_calls import execute_tool_run, run_tool_context
from agents.runs.recorder import record_model_call
from agents.runs.steering import RunSteering, turn_ended
from agents.runs.workflows import execute_workflow
from agents.runs.writer import (
    Batch,
    EventConflict,
    LeaseLost,
    RunEventSink,
    RunWriter,
    compiled_insert,
    publish,
    storable_outcome,
    storable_text,
    write_batch,
)
from agents.runtime import tracing
from agents.runtime.claims import outcome_claim
from agents.runtime.client_request import ClientRequest
from agents.runtime.crew import (
    ChildOutcome,
    CrewSpec,
    delegation_tools,
    member_prompt,
    run_parallel,
    run_sequential,
)
from agents.runtime.kinds import get_kind
from agents.runtime.loop import agent_registry
from agents.runtime.prompt import instructions_digest, tools_digest
from agents.runtime.spec import AgentSpec, Decision, RunOutcome, RunStatus
from agents.runtime.state import RunState
from agents.signals import request_execution, request_verification
from agents.skills import run_skills
from agents.specs import agent_spec, run_config_versions
from agents.tool_routing import tool_routing
from agents.tool_sources import effective_tools
from providers.routing import model_targets, routed_adapter
from providers.runtime.fallback import Target
from providers.runtime.types import Usage, UserMessage
from providers.services import adapter_for, default_connection
from tenancy import rls
from tools.loader import egress_client, tenant_tools
from tools.runtime.context import ConfigurationError, StaticSecrets
from tools.runtime.frames import Frame
from tools.runtime.registry import ToolRegistry

logger = logging.getLogger(__name__)


MAX_ATTEMPTS = 5


def claim(run_id: int, owner: str) -> Run | None:
    """Take the run if it is queued, or running under an expired lease (agents.runs.claim)."""
    return run_claim.claim(run_id, owner, lease_seconds())


class _Checkpoint:
    def __init__(self, writer: RunWriter) -> None:
        self.writer = writer

    async def save(self, state: RunState, reason: str, *, durable: bool = True) -> None:
        usage = state.usage
        fields = {
            "state": state.to_dict(),
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        }
        if reason == "finished":
            # Nothing runs after this but the terminal event: finalize writes both with the
            # outcome in one statement. A crash before then repeats the last model call only.
            self.writer.stage(**fields)
        elif durable:
            await self.writer.save(**fields)
        else:
            self.writer.save_behind(**fields)


def execute_run(run_id: int, *, owner: str | None = None, claimed: Run | None = None) -> str:
    """Claim and execute (or resume) a run; returns what happened, for logs. `owner` and
    `claimed` as for execute_run_async."""
    return bridge.call(execute_run_async, run_id, owner=owner, claimed=claimed)


async def execute_run_async(
    run_id: int,
    *,
    owner: str | None = None,
    tenant_id: int | None = None,
    claimed: Run | None = None,
) -> str:
    """As execute_run, inside an event loop (crews run their members this way; a worker
    holds many at once, agents.runs.worker). In the tenant of the caller's scope (a
    request's, a crew's: another tenant's run is not claimable there); a worker has none
    and is told the run's tenant (in the task), or looks it up (one query). `owner` names
    the lease holder; `claimed`: the run, inserted already under that lease
    (`run_start(claimed_by=)`), so not claimed again."""
    owner = owner or uuid.uuid4().hex
    if rls.current().tenant_ids:
        return await _execute_run(run_id, owner, claimed)
    if tenant_id is None and claimed is not None:
        tenant_id = claimed.tenant_id
    if tenant_id is None:
        tenant_id = await db(rls.tenant_id_of)(Run, run_id)
    if tenant_id is None:
        return "not claimable"
    with rls.tenant_scope(tenant_id):
        return await _execute_run(run_id, owner, claimed)


def hand_over(owners: list[str]) -> list[int]:
    """Runs leased by `owners` (a worker stopping) become claimable now and are queued
    again, instead of waiting for their leases to expire."""
    with rls.owner():  # the runs of every tenant
        released = list(
            Run.objects.filter(lease_owner__in=owners, status=RunStatus.RUNNING).values_list(
                "pk", flat=True
            )
        )
        Run.objects.filter(pk__in=released, lease_owner__in=owners).update(
            lease_owner="", lease_expires_at=Now()
        )
    for run_id in released:
        request_execution(run_id)
    return released


async def _execute_run(run_id: int, owner: str, claimed: Run | None = None) -> str:
    run = claimed or await db(claim)(run_id, owner)
    if run is None:
        return "not claimable"
    writer = RunWriter(run, owner, next_seq=run.stored_seq + 1, lease_s=lease_seconds())
    outcome = "lease lost"
    with observed_run(run) as span:
        try:
            outcome = await _execute_claimed(run, owner, writer, claimed is not None)
        finally:
            if outcome in ("lease lost", "will retry"):  # (or raised): not recorded by this one
                writer.abandon()
            span.set(**{"agentplatform.run.status": outcome})
    return outcome


async def _execute_claimed(run: Run, owner: str, writer: RunWriter, claimed: bool) -> str:
    sink = RunEventSink(writer)
    heartbeat = asyncio.create_task(_renew_lease(run.pk, owner, asyncio.current_task()))
    try:
        if run.crew_id is not None:
            outcome = await _execute_crew(run, sink)
        elif run.tool_name:
            outcome = await execute_tool_run(run, sink, _Checkpoint(writer))
        elif run.workflow_id is not None:
            outcome = await execute_workflow(run, sink)
        else:
            outcome = await _execute_agent(run, sink)
        await sink.flush()
        batch = await writer.take()
    except (asyncio.CancelledError, LeaseLost, EventConflict):
        return "lease lost"
    except ConfigurationError as exc:  # the tenant admin's to fix: retrying cannot help
        logger.info("run %s failed on its configuration: %s", run.pk, exc)
        outcome = await _fail(sink, f"{type(exc).__name__}: {exc}")
        batch = await writer.take()
    except Exception as exc:  # a bug or an outage: logged; retried, then failed
        logger.exception("run %s raised on attempt %s", run.pk, run.attempts)
        if run.attempts < MAX_ATTEMPTS:
            await Run.objects.filter(pk=run.pk, lease_owner=owner).aupdate(lease_expires_at=Now())
            return "will retry"
        outcome = RunOutcome(
            status=RunStatus.FAILED,
            error=f"internal error after {run.attempts} attempts ({type(exc).__name__})",
        )
        await sink.emit("run.failed", {"status": "failed", "error": outcome.error})
        batch = await writer.take()
    finally:
        heartbeat.cancel()
    outcome = writer.redacted(outcome)  # as its events and fields were
    # A caller that inserted the run holds it (run_inline, Nearby): finalize refreshes it.
    finalized = db(finalize)
    if not await finalized(run, owner, outcome, batch, writer.tool_usage, refresh=claimed):
        return "lease lost"
    traced_outcome(run, outcome)
    return outcome.status.value


async def _renew_lease(run_id: int, owner: str, worker: asyncio.Task | None) -> None:
    """Keep the lease while a long model or tool call runs; stop the run when it is lost,
    or when it could not be renewed before it expires (another worker may take it)."""
    held_until = time.monotonic() + lease_seconds()
    while True:
        await asyncio.sleep(lease_seconds() / 3)
        try:
            renewed = await Run.objects.filter(pk=run_id, lease_owner=owner).aupdate(
                lease_expires_at=Now() + timedelta(seconds=lease_seconds())
            )
        except Exception:  # a database hiccup: try again before the lease runs out
            logger.warning("could not renew the lease of run %s", run_id, exc_info=True)
            renewed = None
        if renewed:
            held_until = time.monotonic() + lease_seconds()
        elif renewed == 0 or time.monotonic() >= held_until - 1:
            if worker is not None:
                worker.cancel()
            return


async def _fail(sink: RunEventSink, error: str) -> RunOutcome:
    """A configuration problem: say so on the stream too."""
    await sink.emit("run.failed", {"status": "failed", "error": error})
    return RunOutcome(status=RunStatus.FAILED, error=error)


async def _execute_agent(run: Run, sink: RunEventSink) -> RunOutcome:
    # The agent as stored; an evaluation's run of a draft: as drafted (agents.publishing).
    agent = run.agent if run.agent_draft_id is None else await db(agent_of_run)(run)
    if isinstance(agent, str):
        return await _fail(sink, agent)
    prepared = await db(_prepare_agent)(run, agent)
    if not isinstance(prepared, str) and prepared.reading and run.state is None:
        # Documents given to it that a worker still reads: waited for, bounded (the lease
        # is renewed meanwhile), then read again; those still not ready are named to the
        # model and listed so. (Only then: a run given none costs no query for it.)
        await attachments_read_wait(run)
        prepared = await db(_prepare_agent)(run, agent)
    if isinstance(prepared, str):
        return await _fail(sink, prepared)
    if prepared.attachments and run.state is None:  # what it was given, in its events too
        await sink.emit("run.attachments", {"attachments": list(prepared.attachments)})
    if prepared.skills and prepared.skills_resolved:  # fixed from now on (`_skills_given`)
        await sink.emit("run.skills", {"skills": list(prepared.skills)})
    return await _think(run, sink, prepared, prepared.registry)


async def _think(run: Run, sink: RunEventSink, prepared, registry) -> RunOutcome:
    """Run the agent's kind (the tool loop, one call, a remote agent...) on this run."""
    sink.writer.redact_with(prepared.run_secrets)
    sink.writer.stage(**prepared.audit)
    for name, value in prepared.audit.items():  # as written: finalize prices the model
        setattr(run, name, value)
    tracing.annotate(**{"gen_ai.request.model": prepared.spec.model})
    adapter = prepared.adapter
    if prepared.targets:  # fallbacks: each switch a `provider.fallback` event

        async def switched(failed: Target, following: Target, reason: str) -> None:
            payload = {"from": failed.label, "to": following.label, "reason": reason}
            await sink.emit("provider.fallback", payload)
            # The run names what answered it last, and finalize prices its calls at that.
            served = {"provider": following.adapter.provider, "model": following.model}
            sink.writer.stage(**served)
            for name, value in served.items():
                setattr(run, name, value)

        # Metered around the fallbacks: one hold per call, whichever connection answers it.
        routed = routed_adapter(prepared.targets, prepared.balancing, switched)
        adapter = quotas.metered(routed, prepared.meter)
    history, conversation = prepared.history, prepared.conversation
    if prepared.planned is not None:  # a long conversation: its summary first
        history = await compacted_history(
            prepared.planned, emit=sink.emit, durable=sink.writer.drain, record=record_model_call
        )
        if conversation is not None:  # the turn with its images, after the history it got
            conversation = [*history, conversation[-1]]
    return await get_kind(prepared.spec.kind)(
        spec=prepared.spec,
        adapter=adapter,
        registry=registry,
        ctx=prepared.ctx,
        state=prepared.state,
        input=run.input,
        history=history,
        conversation=conversation,
        decisions=prepared.decisions,
        context_blocks=prepared.context_blocks,
        sink=sink,
        checkpoint=_Checkpoint(sink.writer),
        is_cancelled=cancellation.checker(run),
        steering=RunSteering(run) if run.parent_id is None else None,
        egress=egress_client(tuple(settings.EGRESS_ALLOWLIST)),
        routing=prepared.routing,
        frame=prepared.frame,
    )


@dataclass
class _Prepared:
    spec: AgentSpec
    adapter: Any
    registry: Any
    ctx: Any
    state: RunState | None
    history: Any
    conversation: Any  # an API caller's (agents.runtime.client_request), else None
    decisions: dict[str, Decision]
    audit: dict[str, Any]
    context_blocks: tuple[tuple[str, str], ...]
    run_secrets: StaticSecrets  # every secret the run may send: scrubbed from what it stores
    routing: Any = None  # a ToolRouting when the agent has more tools than the threshold
    frame: Frame | None = None  # a new run's: the conversation's so far
    targets: list[Target] | None = None  # with fallbacks: the connections calls may go to
    meter: quotas.Meter | None = None  # the limits every model call of the run is held against
    balancing: str = ""
    attachments: tuple[dict[str, Any], ...] = ()  # the conversation's files it was given
    reading: bool = False  # one of them is still being read (agents.conversations)
    skills: tuple[str, ...] = ()  # name@version of the skills it was given (agents.skills)
    skills_resolved: bool = False  # resolved from the agent's pins now: the run's first start
    planned: History | None = None  # a conversation's history, maybe with a summary to make


def _skills_given(run: Run) -> list[str] | None:
    """The name@version of the skills a run that started before was given (its `run.skills`
    event; [] without one), so that a run going on — parked for approval, resumed after a
    failure, a later round — keeps the versions it started with rather than whatever its
    agent's `@latest` pins resolve to now. None for a run starting (no query): it has no
    checkpoint, and has recorded no provider yet (written after its `run.skills` event;
    a resume keeps it)."""
    if run.state is None and not run.provider:
        return None
    payload = (
        RunEvent.objects.filter(run_id=run.pk, type="run.skills")
        .order_by("seq")
        .values_list("payload", flat=True)
        .first()
    )
    return [str(label) for label in (payload or {}).get("skills", [])]


def _prepare_agent(
    run: Run, agent: Agent | None, compaction: CompactionSettings | None = None
) -> _Prepared | str:
    """Everything an agent's loop needs, read before any model call; or why it cannot run.
    `compaction`: a long conversation's settings, when not the agent's own (a crew's)."""
    if agent is None:
        return "the agent of this run was deleted"
    connection = agent.provider_connection or default_connection(run.tenant)
    if connection is None and agent.kind != "remote":
        return "no provider connection: an admin must add one (Admin → Provider connections)"
    if connection is not None and connection.pk and connection.tenant_id != run.tenant_id:
        return "the agent's provider connection belongs to another tenant"
    spec: AgentSpec = agent_spec(agent, connection)
    client = ClientRequest.from_dict(run.client_request) if run.client_request else None
    if client is not None:
        spec = client.apply(spec)
    adapter = adapter_for(connection) if connection is not None else None
    meter = quotas.Meter.for_run(run, agent.pk)
    adapter = quotas.metered(adapter, meter)  # limits, per call
    toolbox = tenant_tools(run.tenant)
    with_user = run.initiated_by_user_id is not None
    with_key = run.initiated_by_api_key_id is not None
    effective = effective_tools(
        agent, spec=spec, toolbox=toolbox, with_user=with_user, with_key=with_key
    )
    spec, tools = effective.spec, effective.registry  # the loop picks effective.offered
    # The conversation's attachments the run's record lists: images, documents, a search.
    attached = RunAttachments()
    if run.conversation_id is not None:  # (a resumed run's state holds its images)
        attached = run_attachments(run, images=not run.state)
    # Its approved skills (listed in its prompt, two tools): as its pins resolve now for a
    # run starting, exactly those it started with for one going on; a draft's run starting:
    # the draft's pins (agents/draft_runs.py).
    given_skills = _skills_given(run)
    skills_resolved = given_skills is None
    drafted = getattr(agent, "drafted_skills", None)
    if skills_resolved and drafted is not None:
        given_skills = [skill.label for skill in drafted]
    skilled = run_skills(agent, code_mode=spec.code_mode, pinned=given_skills)
    given = (*attached.tools, *skilled.tools)
    if given:
        tools = ToolRegistry(list(tools))  # (the tenant's registry is shared: a copy)
        for item in given:
            tools.register(item, replace=True)
        if spec.tool_names is not None:
            spec = replace(spec, tool_names=(*spec.tool_names, *(t.name for t in given)))
    secrets = toolbox.secrets
    if agent.remote_token:
        secrets = secrets.with_values({"agent:remote_token": agent.remote_token})
    ctx = run_tool_context(run, secrets)
    targets, fallback_keys = None, []
    if connection is not None and agent.fallbacks and spec.kind != "remote":
        targets, fallback_keys = model_targets(connection, spec.model, agent.fallbacks)
    # The provider keys are not the tools' to use (not in ctx), but are scrubbed all the same.
    keys = {"provider:api_key": connection.api_key if connection is not None else None}
    keys |= {f"provider:fallback:{n}": key for n, key in enumerate(fallback_keys)}
    keys = {name: key for name, key in keys.items() if key}
    run_secrets = secrets.with_values(keys) if keys else secrets
    audit = {}  # what this run resolved to, recorded with its first write
    if not run.instructions_digest:
        audit = {
            "provider": adapter.provider if adapter is not None else "remote",
            "model": spec.model,
            "instructions_digest": instructions_digest(spec),
            "tools_digest": tools_digest(effective.offered),
            "config_versions": draft_run_versions(
                run_config_versions(
                    run.tenant_id,
                    agent=agent,
                    connection=connection,
                    tool_names=effective.offered.names(),
                ),
                run,
            ),
            "limits": agent_limits(spec),
        }
    state = RunState.from_dict(run.state) if run.state else None
    history, conversation, planned = (), None, None
    if state is None and client is None:
        compaction = compaction or CompactionSettings.of(agent)
        planned = run_history(run, compaction=compaction, connection=connection, model=spec.model)
        history = planned.turns
        if attached.images:  # the turn as a message with its images (a model that takes them)
            conversation = [*history, UserMessage(run.input, attached.images)]
    elif state is None and spec.kind == "remote":  # its own protocol: text turns, an input
        history = client.text_turns()
    elif state is None:
        conversation = client.messages
    decisions = {} if state is None else approval_decisions(run.pk)
    frame = conversation_frame(run) if state is None else None
    return _Prepared(
        spec=spec,
        adapter=adapter,
        registry=tools,
        ctx=ctx,
        state=state,
        history=history,
        conversation=conversation,
        decisions=decisions,
        audit=audit,
        context_blocks=_context_blocks(spec, tools, toolbox.context_blocks)
        + attached.context_blocks
        + skilled.context_blocks,
        run_secrets=run_secrets,
        routing=tool_routing(toolbox, run.tenant_id, effective.offered),
        frame=frame,
        targets=targets,
        balancing=agent.load_balancing,
        meter=meter,
        attachments=attached.listed,
        skills=skilled.listed,
        skills_resolved=skills_resolved,
        reading=attached.reading,
        planned=planned,
    )


def agent_limits(spec: AgentSpec) -> dict[str, Any]:
    """What an agent's run records in `Run.limits`: the bounds its loop runs under, an API
    caller's `max_tokens` included (`client_request.apply`)."""
    return {
        "max_rounds": spec.max_rounds,
        "max_tool_calls": spec.max_tool_calls,
        "max_tokens_per_run": spec.max_tokens_per_run,
        "max_tokens_per_response": spec.max_tokens_per_response,
    }


def crew_limits(spec: CrewSpec) -> dict[str, Any]:
    """What a crew's run records in `Run.limits` (a hierarchical crew's manager adds its
    agent's): the bounds its delegations run under."""
    return {
        "max_delegations": spec.max_delegations,
        "max_depth": spec.max_depth,
        "token_budget": spec.token_budget,
    }


def _context_blocks(spec: AgentSpec, tools, blocks) -> tuple[tuple[str, str], ...]:
    """A context provider's block joins the prompt of an agent that uses its tools."""
    if not blocks:
        return ()
    used = {
        tag.removeprefix("context:")
        for item in agent_registry(spec, tools, None)
        for tag in item.tags
        if tag.startswith("context:")
    }
    return tuple(block for name, block in sorted(blocks.items()) if name in used)


# -- crews ---------------------------------------------------------------------------
async def _execute_crew(run: Run, sink: RunEventSink) -> RunOutcome:
    if run.agent_draft_id is not None:  # an evaluation's run of a draft: the crew as drafted
        drafted = await db(crew_of_run)(run)
        if isinstance(drafted, str):
            return await _fail(sink, drafted)
        crew, members = drafted
    else:
        crew = await Crew.objects.select_related(
            "manager", "manager__compaction_connection", "compaction_connection"
        ).aget(pk=run.crew_id)
        members = {
            m.agent.slug: m.agent
            async for m in CrewMember.objects.filter(crew=crew).select_related("agent")
        }
    if not members:
        return await _fail(sink, f"crew {crew.slug} has no members")
    spec = CrewSpec(
        name=crew.slug,
        mode=crew.mode,  # type: ignore[arg-type]
        members=tuple(members),
        manager=crew.manager.slug if crew.manager else None,
        max_delegations=crew.max_delegations,
        max_depth=crew.max_depth,
        token_budget=crew.token_budget,
    )
    if crew.manager is not None:
        members.setdefault(crew.manager.slug, crew.manager)

    async def emit(type: str, **payload: Any) -> None:
        await sink.emit(type, payload)

    tracing.annotate(**{"gen_ai.agent.name": crew.slug})
    run_child = _child_runner(run, members)
    task = ""
    if crew.mode != "hierarchical":  # (its manager's history: an agent's, in _think)
        task = await _crew_task(run, sink, crew)
    if run.state is None:
        await emit("run.started", crew=crew.slug, mode=crew.mode)
        versions = await db(run_config_versions)(run.tenant_id, crew=crew)
        versions = draft_run_versions(versions, run)
        # with the run's next write
        sink.writer.stage(config_versions=versions, limits=crew_limits(spec))
    if crew.mode == "sequential":
        outcome = await run_sequential(spec, task, run_child, emit)
    elif crew.mode == "parallel":
        outcome = await run_parallel(spec, task, run_child, emit)
    else:
        outcome = await _run_manager(run, sink, spec, crew, run_child, emit)
    if outcome.status is not RunStatus.AWAITING_APPROVAL or crew.mode != "hierarchical":
        await _emit_end(emit, outcome)
    return outcome


async def _crew_task(run: Run, sink: RunEventSink, crew: Crew) -> str:
    """A crew's members are runs of their own: in a conversation, they get its earlier turns
    in front of the task, the older ones summarised above the crew's compaction threshold
    (as an agent's run gets them; its events are the crew run's)."""
    if run.client_request:  # an API caller's conversation
        return ClientRequest.from_dict(run.client_request).transcript(MAX_INPUT_CHARS)
    planned = await db(_crew_history)(run, crew)
    turns = await compacted_history(
        planned, emit=sink.emit, durable=sink.writer.drain, record=record_model_call
    )
    if not turns:
        return run.input
    transcript = "\n".join(
        f"{'User' if isinstance(t, UserMessage) else 'Assistant'}: {t.text}" for t in turns
    )
    return f"## Conversation so far\n{transcript}\n\n## Now\n{run.input}"


def _crew_history(run: Run, crew: Crew) -> History:
    """Empty settings of a crew: the tenant's default connection and its default model."""
    connection = default_connection(run.tenant) if run.in_reply_to_id else None
    return run_history(run, compaction=CompactionSettings.of(crew), connection=connection, model="")


async def _emit_end(emit, outcome: RunOutcome) -> None:
    if outcome.status is RunStatus.AWAITING_APPROVAL:
        await emit("approval.required", via_child=True)
    elif outcome.status is RunStatus.FAILED:
        await emit("run.failed", status="failed", error=outcome.error, output=outcome.output)
    elif outcome.status is RunStatus.CANCELLED:
        await emit("run.cancelled", status="cancelled")
    else:
        await emit("run.completed", status=outcome.status.value, output=outcome.output)


async def _run_manager(run, sink, spec: CrewSpec, crew: Crew, run_child, emit) -> RunOutcome:
    manager = crew.manager
    compaction = None  # the crew's settings where set, else its manager's
    if manager is not None:
        compaction = CompactionSettings.of(crew).over(CompactionSettings.of(manager))
    prepared = await db(_prepare_agent)(run, manager, compaction)
    if isinstance(prepared, str):
        return RunOutcome(status=RunStatus.FAILED, error=prepared)
    if "limits" in prepared.audit:  # the crew's, and its manager's loop's
        prepared.audit["limits"] = {**crew_limits(spec), **prepared.audit["limits"]}

    async def used_tokens() -> int:
        usage = await db(_children_usage)(run.pk)
        return usage.input_tokens + usage.output_tokens

    registry = ToolRegistry(list(prepared.registry))
    for item in delegation_tools(spec, run_child, emit, depth=run.depth, used_tokens=used_tokens):
        registry.register(item, replace=True)
    return await _think(run, sink, prepared, registry)


def _child_runner(parent: Run, members: dict[str, Agent]):
    async def run_child(member: str, task: str, context: str, key: str) -> ChildOutcome:
        child = await db(_child_run)(parent, members[member], task, context, key)
        if child.status == RunStatus.QUEUED or (
            child.status == RunStatus.RUNNING and child.lease_expires_at
            and child.lease_expires_at < timezone.now()
        ):  # fmt: skip
            await execute_run_async(child.pk)
            child = await Run.objects.aget(pk=child.pk)
        status = RunStatus(child.status)
        if status in (RunStatus.RUNNING, RunStatus.QUEUED):
            status = RunStatus.AWAITING_APPROVAL  # busy elsewhere: wait like for a human
        return ChildOutcome(
            status=status,
            output=child.output,
            error=child.error,
            usage=Usage(child.input_tokens, child.output_tokens),
            run_id=child.pk,
        )

    return run_child


def _child_run(parent: Run, agent: Agent, task: str, context: str, key: str) -> Run:
    child, _ = Run.objects.get_or_create(
        parent=parent,
        child_key=key,
        defaults={
            "tenant_id": parent.tenant_id,
            "agent": agent,
            "input": storable_text(member_prompt(task, context)),
            "initiated_by_user_id": parent.initiated_by_user_id,
            "initiated_by_api_key_id": parent.initiated_by_api_key_id,
            "correlation_id": parent.correlation_id,
            "depth": parent.depth + 1,
        },
    )
    return child


def _children_usage(run_id: int) -> Usage:
    return _children_totals(run_id)[0]


def _children_totals(run_id: int) -> tuple[Usage, Decimal]:
    """The tokens of the run's children, and what they cost with their own children."""
    totals = Run.objects.filter(parent_id=run_id).aggregate(
        i=Sum("input_tokens"), o=Sum("output_tokens"), r=Sum("cache_read_tokens"),
        w=Sum("cache_write_tokens"), cost=Sum("total_cost_usd"),
    )  # fmt: skip
    usage = Usage(totals["i"] or 0, totals["o"] or 0, totals["r"] or 0, totals["w"] or 0)
    return usage, totals["cost"] or Decimal(0)


def finalize(
    run: Run,
    owner: str,
    outcome: RunOutcome,
    batch: Batch,
    tool_usage: list[dict[str, Any]] | None = None,
    *,
    refresh: bool = False,
) -> bool:
    """Record the outcome, with the events and fields still queued in `batch`, under the
    lease: one statement, or one transaction when approvals, a parent or a conversation are
    touched too (its next turn started, when one was queued); then publish those events (the
    ending among them), once committed: a follower told of the ending reads it on the
    record. False if the lease was lost (another worker owns the run now and will record its
    own outcome). `tool_usage`: the run's `tool.usage` payloads when its writer saw them all
    (RunWriter.tool_usage); `refresh`: `run` takes the row's values as recorded
    (write_batch)."""
    outcome = storable_outcome(outcome)
    now = timezone.now()
    terminal = outcome.status not in (RunStatus.AWAITING_APPROVAL, RunStatus.RUNNING)
    usage = own = outcome.usage
    children_cost = Decimal(0)
    if run.crew_id is not None:  # a crew's usage is its children's (plus its manager's own)
        own = outcome.usage if run.crew and run.crew.mode == "hierarchical" else Usage()
        children, children_cost = _children_totals(run.pk)
        usage = own + children
    pending = ((e.type, e.payload) for e, _ in batch.events)
    cost = run_own_cost(run, own, pending, tool_usage, outcome.priced)
    final = Batch(
        events=batch.events,
        fields={
            **batch.fields,
            "status": outcome.status,
            "output": outcome.output,
            "structured_output": outcome.structured_output,
            "error": outcome.error,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
            "cost_usd": cost,
            "total_cost_usd": cost + children_cost,
            "finished_at": now if terminal else None,
            # A workflow's output is its steps' doing, not an agent's say-so: nothing to verify.
            "claim": outcome_claim(outcome) if run.workflow_id is None else None,
            "lease_owner": "",
            "lease_expires_at": None,
        },
    )
    ends_turn = bool(terminal and run.conversation_id and run.parent_id is None)
    # A stopped answer keeps what it produced: the turn's message, if it said anything.
    said = outcome.status != RunStatus.CANCELLED or bool(outcome.output)
    message = terminal and run.conversation_id and said
    wakes_parent = terminal and run.parent_id
    run.cost_usd, run.total_cost_usd = cost, cost + children_cost  # (the run's span reads it)
    try:
        atomic = outcome.awaiting or message or wakes_parent or ends_turn
        with transaction.atomic() if atomic else nullcontext():
            write_batch(run, owner, final, refresh=refresh)
            _record_consequences(run, outcome, message=message, wakes_parent=wakes_parent)
            if ends_turn:  # what was queued behind it starts (agents.runs.steering)
                turn_ended(run)
    except (LeaseLost, EventConflict):
        return False
    transaction.on_commit(lambda: publish(run, final))  # (now, unless in a caller's atomic)
    if outcome.status == RunStatus.SUCCEEDED and run.agent_id and run.agent.verifier_tool:
        transaction.on_commit(lambda: request_verification(run.pk, run.tenant_id))
    if outcome.status == RunStatus.CANCELLED:  # (an unread flag expires on its own)
        cancellation.forget(run)
    if outcome.status == RunStatus.FAILED:
        logger.info("run %s failed: %s", run.pk, outcome.error)
    return True


def _record_consequences(run: Run, outcome: RunOutcome, *, message: bool, wakes_parent: bool):
    """Inside finalize's transaction: approvals to decide, a parent to wake, the answer in
    the conversation."""
    for call in outcome.awaiting:
        Approval.objects.exclude(status=ApprovalStatus.EDITED).get_or_create(
            run_id=run.pk,
            call_id=call.id,
            defaults={
                "tenant_id": run.tenant_id,
                "tool_name": call.name,
                "arguments": call.arguments,
                "prepared_request": call.prepared.to_dict() if call.prepared else None,
            },
        )
    if wakes_parent:  # a parent parked on this child goes on
        woke = Run.objects.filter(pk=run.parent_id, status=RunStatus.AWAITING_APPROVAL).update(
            status=RunStatus.QUEUED, queued_at=Now()
        )
        if woke:
            transaction.on_commit(lambda: request_execution(run.parent_id, run.tenant_id))
    if message:
        record_answer(run, outcome.output or outcome.error)


def record_answer(run: Run, content: str) -> int:
    """The run's answer in its conversation (its id): it follows the message it answers,
    and is shown if that still is (the conversation's leaf moves on), with the steering
    messages its loop took (read in the insert). One statement: the leaf moves in a CTE."""
    taken = QueuedMessage.objects.filter(
        run_id=run.pk, kind=QueuedMessage.Kind.STEER, status=QueuedMessage.Status.APPLIED
    )
    answer = Message(
        tenant_id=run.tenant_id,
        conversation_id=run.conversation_id,
        parent_id=run.in_reply_to_id,
        role=Message.Role.ASSISTANT,
        content=content,
        run_id=run.pk,
        steers=ArraySubquery(taken.order_by("id").values("content")),
    )
    insert, params = compiled_insert(answer)
    conversations = Conversation._meta.db_table
    statement = (
        f"WITH answer AS ({insert} RETURNING id), "  # noqa: S608 (our own names)
        f"moved AS (UPDATE {conversations} AS c SET leaf_id = answer.id FROM answer "
        "WHERE c.id = %s AND c.leaf_id IS NOT DISTINCT FROM %s) SELECT id FROM answer"
    )
    with transaction.get_connection().cursor() as cursor:
        cursor.execute(statement, [*params, run.conversation_id, run.in_reply_to_id])
        (answer_id,) = cursor.fetchone()
    return answer_id
