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

Only a failed top-level agent run is resumed. A run that failed before its first
checkpoint starts over from its input. Refused, clearly (409): a run in any other status;
a crew's run or a crew member's (its delegations are runs of their own, whose resumption
is not built yet: start the crew again); a tool called directly (call it again); a run of a
conversation that went on after it (ask again there). In a conversation, the failed
answer stays as an earlier version of the turn (as a regenerated answer's does) and the
resumed run's answer becomes the one shown.
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
from tenancy.models import ApiKey, Tenant
from tenancy.policy import Principal


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
    if run.crew_id is not None or run.parent_id is not None:
        return "A crew's run (or a crew member's) cannot be resumed yet: start the crew again."
    if run.tool_name or run.gateway_model:
        return "A direct call is not resumed: make the call again."
    if run.agent_id is None:
        return "The agent of this run was deleted."
    return None


def may_resume(principal: Principal, run: Run) -> bool:
    """Whether the page shows a Resume button: the run can be resumed, by this principal."""
    return resumable_refusal(run) is None and access.may_resume(principal, run)


def run_resume(*, tenant: Tenant, run: Run, by: AbstractBaseUser | ApiKey) -> Run:
    """Queue the failed `run` to continue from its last checkpoint with its agent's current
    configuration; returns it, queued. `by`: its starter or an admin (agents.access;
    PermissionDenied), who may still use its agent. Another tenant's run is a 404; a run
    that cannot be resumed (`resumable_refusal`), or that another resume took first, a
    RunNotResumable. One transaction: the run's row locked (of two resumes, one wins),
    a few reads, its update and its `run.resumed` event; sent to the workers on commit."""
    if run.tenant_id != tenant.pk:
        raise Http404("No such run.")
    principal = Principal.for_initiator(tenant, by)
    refusal = _kind_refusal(run)  # (what the run is: shown to whoever sees it anyway)
    if refusal is not None:
        raise RunNotResumable(refusal)
    access.require_resume(principal, run)
    agent = run.agent
    connection = agent.provider_connection or default_connection(tenant)
    now_applies = run_config_versions(tenant.pk, agent=agent, connection=connection)
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
        Run.objects.filter(pk=locked.pk).update(
            status=RunStatus.QUEUED,
            queued_at=timezone.now(),
            finished_at=None,
            error="",
            claim=None,
            state=_reopened_state(locked.state),
            attempts=0,  # a fresh budget of retries (agents.runs.engine.MAX_ATTEMPTS)
            instructions_digest="",  # the engine records the configuration used again
            lease_owner="",
            lease_expires_at=None,
        )
        append_event(locked, next_seq(locked.pk), "run.resumed", payload)
        locked.refresh_from_db()  # as queued: once committed, a worker may take it at once
        transaction.on_commit(lambda: request_execution(locked.pk, locked.tenant_id))
    return locked


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
