"""Resuming a failed run from its last checkpoint, once a person fixed what failed it (a
provider down past its retries, a tool misconfigured, a quota refused).

The run goes on where it stopped, as a run parked for approval does once decided: queued
again, claimed by a worker, its loop started from `Run.state` (agents.runs.engine). What it
recorded stays: a tool call whose result is in the state is never made again, and a
non-idempotent call that started without a recorded result is never repeated (its model
is told the outcome is unknown; agents/runtime/tool_step.py). What it runs with is the
agent's configuration *now* — its connection, model, instructions and tools as the admin
fixed them: the engine records them again on the run with its next write (provider,
model, digests, `config_versions`), and the `run.resumed` event names who resumed it and
the versions that applied then, beside those the failed attempt used.

Only a failed top-level run is resumed: an agent's, a crew's or a workflow's. A workflow
goes on from its records (agents/runtime/workflow.py): its completed steps are reused, the
step that failed runs again (a write interrupted in flight, whose outcome is unknown, is
not: it fails again, saying so). A run that failed before
its first checkpoint starts over from its input. A crew's run goes on as the crew engine
runs it (agents.runtime.crew): its members are runs of their own, found again by their
keys, so a member that answered is not asked again (its answer is reused); a member that
failed is resumed too, from its own checkpoint (or its input, if it had none), with the
same `run.resumed` event on its timeline. A hierarchical crew's manager goes on from the
crew run's checkpoint, where each delegation's answer (or failure) is a recorded tool
result. Refused, clearly (409): a run in any other status; a crew member's run alone
(its crew's run resumes it); a crew whose member ended otherwise than failed or answered
(start the crew again); a tool called directly (call it again); a run of a conversation
that went on after it (ask again there). In a conversation, the failed answer stays as an
earlier version of the turn (as a regenerated answer's does) and the resumed run's answer
becomes the one shown. Every resume is in the tenant's audit log (`run.resumed`: who,
which run, when).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404
from django.utils import timezone

from agents import access
from agents.models import Conversation, Message, Run
from agents.runs.start import conversation_unfinished_run
from agents.runs.writer import append_event, next_seq
from agents.runtime.spec import RunStatus
from agents.signals import request_execution
from agents.specs import run_config_versions
from providers.services import default_connection
from tenancy.models import ApiKey, AuditAction, Tenant
from tenancy.policy import Principal
from tenancy.records import audit


class RunNotResumable(ValidationError):
    """The run cannot be resumed as it is (REST answers 409, MCP an error result)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="conflict")


def resumable_refusal(run: Run) -> str | None:
    """Why the run cannot be resumed, whoever asks; None if it can (its status may still
    change before the resume's transaction looks again). No query."""
    if run.status != RunStatus.FAILED:
        return f"This run is {run.status}: only a failed run can be resumed."
    return _kind_refusal(run)


def _kind_refusal(run: Run) -> str | None:
    """Why a run of this kind is not resumed (what never changes about a run)."""
    if run.parent_id is not None and run.workflow_id is not None:
        return (
            f"This workflow was called as a tool by run {run.parent_id}: call it again there "
            "(its recorded steps are reused)."
        )
    if run.parent_id is not None:
        return (
            f"This is a crew member's run: resume its crew's run (run {run.parent_id}), "
            "which resumes this one."
        )
    if run.tool_name or run.gateway_model:
        return "A direct call is not resumed: make the call again."
    if run.agent_id is None and run.crew_id is None and run.workflow_id is None:
        return "The agent, crew or workflow of this run was deleted."
    return None


def may_resume(principal: Principal, run: Run) -> bool:
    """Whether the page shows a Resume button: the run can be resumed, by this principal."""
    return resumable_refusal(run) is None and access.may_resume(principal, run)


def run_resume(*, tenant: Tenant, run: Run, by: AbstractBaseUser | ApiKey) -> Run:
    """Queue the failed `run` to continue from its last checkpoint with its agent's (or
    crew's) current configuration; returns it, queued. `by`: its starter or an admin
    (agents.access; PermissionDenied), who may still use its agent or crew. Another
    tenant's run is a 404; a run that cannot be resumed (`resumable_refusal`), or that
    another resume took first, a RunNotResumable. One transaction: the run's row locked (of
    two resumes, one wins), a few reads, its update (a crew's failed members' too), its
    `run.resumed` event and its audit-log entry; sent to the workers on commit."""
    if run.tenant_id != tenant.pk:
        raise Http404("No such run.")
    principal = Principal.for_initiator(tenant, by)
    refusal = _kind_refusal(run)  # (what the run is: shown to whoever sees it anyway)
    if refusal is not None:
        raise RunNotResumable(refusal)
    access.require_resume(principal, run)
    now_applies = _config_now(run)
    with transaction.atomic():
        if run.conversation_id is not None:  # one turn at a time, as run_start takes it
            Conversation.objects.select_for_update().filter(pk=run.conversation_id).first()
        locked = Run.objects.select_for_update().get(pk=run.pk)
        refusal = resumable_refusal(locked)  # its status as it is now: of two resumes,
        if refusal is not None:  # the second finds the run queued already
            raise RunNotResumable(refusal)
        if locked.conversation_id is not None:
            _reopen_turn(locked)
        payload: dict[str, Any] = {
            "by": principal.label,
            "error": locked.error,  # what it failed on
            "from_checkpoint": locked.state is not None,
            "config_versions": now_applies,
            "previous_config_versions": locked.config_versions,
        }
        if locked.workflow_id is not None:  # (its steps' records are in its state)
            payload["workflow"] = run.workflow.slug
        if locked.crew_id is not None:
            reused, resumed = _reopen_members(locked, principal.label)
            payload["members_reused"], payload["members_resumed"] = reused, resumed
            payload["from_checkpoint"] = payload["from_checkpoint"] or bool(reused)
        _requeue(locked)
        append_event(locked, next_seq(locked.pk), "run.resumed", payload)
        audit.record(
            tenant=tenant,
            action=AuditAction.RUN_RESUMED,
            actor=by,
            obj=locked,
            details={
                "run": locked.pk,
                "agent": run.agent.slug if run.agent_id else None,
                "crew": run.crew.slug if run.crew_id else None,
                **({"workflow": run.workflow.slug} if run.workflow_id else {}),
                "error": locked.error[:500],
                "from_checkpoint": payload["from_checkpoint"],
                **({"members_resumed": payload["members_resumed"]} if run.crew_id else {}),
            },
        )
        locked.refresh_from_db()  # as queued: once committed, a worker may take it at once
        transaction.on_commit(lambda: request_execution(locked.pk, locked.tenant_id))
    return locked


def _config_now(run: Run) -> dict[str, list[list[int]]]:
    """The configuration versions that apply now to the run's agent (and its connection)
    or crew; none are recorded of a workflow's."""
    if run.workflow_id is not None:
        return {}
    if run.crew_id is not None:
        return run_config_versions(run.tenant_id, crew=run.crew)
    agent = run.agent
    connection = agent.provider_connection or default_connection(run.tenant)
    return run_config_versions(run.tenant_id, agent=agent, connection=connection)


def _requeue(run: Run) -> None:
    """The failed run queued again, its checkpoint kept (the failure taken back)."""
    Run.objects.filter(pk=run.pk).update(
        status=RunStatus.QUEUED,
        queued_at=timezone.now(),
        finished_at=None,
        error="",
        claim=None,
        state=_reopened_state(run.state),
        attempts=0,  # a fresh budget of retries (agents.runs.engine.MAX_ATTEMPTS)
        instructions_digest="",  # the engine records the configuration used again
        lease_owner="",
        lease_expires_at=None,
    )


def _reopen_members(run: Run, by: str) -> tuple[list[int], list[int]]:
    """Inside run_resume's transaction, the crew run's row locked: its failed members'
    runs queued again (the crew engine executes them when it comes to them, by their keys:
    no worker is sent one), each with its own `run.resumed` event. Returns the members'
    runs that answered (reused as they are) and those resumed. A hierarchical crew's
    manager was told each delegation's outcome (a tool result in the crew run's
    checkpoint): none is reopened. Refused when a member ended otherwise (its round limit,
    stopped): resuming could only end the same way."""
    children = list(
        Run.objects.select_for_update(of=("self",))
        .filter(parent_id=run.pk)
        .select_related("agent")
        .order_by("pk")
    )
    reused = [c.pk for c in children if c.status == RunStatus.SUCCEEDED]
    if run.crew is not None and run.crew.mode == "hierarchical":
        return reused, []
    failed = [c for c in children if c.status != RunStatus.SUCCEEDED]
    for child in failed:
        name = child.agent.slug if child.agent is not None else "(deleted)"
        if child.status != RunStatus.FAILED:
            raise RunNotResumable(
                f"The crew's member {name} ended {child.status}, not failed: start the crew again."
            )
        if child.agent is None:
            raise RunNotResumable("The agent of a failed crew member was deleted.")
    for child in failed:
        payload = {
            "by": by,
            "error": child.error,
            "from_checkpoint": child.state is not None,
            "crew_run": run.pk,
            "previous_config_versions": child.config_versions,
        }
        _requeue(child)
        append_event(child, next_seq(child.pk), "run.resumed", payload)
    return reused, [c.pk for c in failed]


def _reopened_state(state: dict[str, Any] | None) -> dict[str, Any] | None:
    """The checkpoint, with the failure it recorded taken back (the loop would report it
    again and stop); everything it did stays, its tool results first."""
    if state is None:
        return None
    return {**state, "finished": "", "error": ""}


def _reopen_turn(run: Run) -> None:
    """Inside run_resume's transaction, the conversation's row locked: the turn the run
    answered is open again. Its failed answer stays as an earlier version; the branch is
    shown up to the question until the resumed answer lands (agents.runs.engine.
    record_answer moves the leaf). Refused when another answer runs, or when the
    conversation went on after this turn."""
    conversation = Conversation.objects.get(pk=run.conversation_id)
    if conversation_unfinished_run(conversation) is not None:
        raise RunNotResumable("Another answer of this conversation is running: wait for it.")
    failed_answer = (
        Message.objects.filter(run_id=run.pk, role=Message.Role.ASSISTANT)
        .values_list("pk", flat=True)
        .last()
    )
    if conversation.leaf_id not in (failed_answer, run.in_reply_to_id):
        raise RunNotResumable(
            "The conversation went on after this answer: ask again there instead."
        )
    Conversation.objects.filter(pk=conversation.pk).update(leaf_id=run.in_reply_to_id)
