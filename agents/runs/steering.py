"""A person's messages while a conversation's answer is at work: queued as the next turn, or
steering the running loop.

- `message_queue`: the message starts the next turn when the answer at work ends (however
  it ends: answered, failed, stopped, or finished by another worker after a crash), in the
  order queued; with nothing at work it starts at once. `queued_remove` takes one back.
- `run_steer`: the message joins the running loop before its next model call, as a user
  turn (agents/runtime/loop.py; part of the run's state, and a `run.steered` event the
  thread shows). One that arrives after the loop's last round becomes the next turn
  instead (`late`).
- `turn_ended`: inside the transaction recording an answer's end (agents.runs.engine.
  finalize, agents.runs.control.run_cancel): late steers become turns, the first waiting
  turn starts. A conversation therefore never has two answers at work.

Everything is stored in PostgreSQL before it is acknowledged. The loop learns of steering
messages from a Redis flag read in the round trip of its cancel check
(agents.runs.cancellation.flags_set): a round costs no query unless some wait; it then reads
them (`RunSteering.take`: one transaction), and a resumed run reads once whatever the flag
says, so a crash loses none.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import Http404

from agents import access
from agents.models import Conversation, QueuedMessage, Run
from agents.runs.bridge import db
from agents.runs.cancellation import FLAG_TTL_S, cancel_key, flags_set
from agents.runs.channels import publisher
from agents.runs.start import (
    Initiator,
    check_input,
    conversation_owned_by,
    conversation_unfinished_run,
    run_start,
)
from agents.runs.writer import append_event, storable_text
from agents.runtime.spec import TERMINAL
from agents.runtime.steering import Steer
from tenancy.models import ApiKey, Tenant
from tenancy.policy import Action, Principal

MAX_WAITING = 20  # queued turns per conversation, steering messages per run


class RunFinished(ValidationError):
    """The run ended already: nothing steers it any more (REST answers 409)."""


def steer_key(run: Run) -> str:
    return f"ap:run:{run.pk}:{run.correlation_id}:steer"


# -- the person's side -------------------------------------------------------------------
def message_queue(
    *, tenant: Tenant, conversation: Conversation, text: str, by: Initiator
) -> QueuedMessage:
    """Queue `text` as the conversation's next turn. With no answer at work the turn starts
    now (the message is returned `started`, with its run). `by` must own the conversation
    (another's answers 404) and may start its agent or crew (PermissionDenied)."""
    _check_owner(tenant, conversation, by)
    target = conversation.agent or conversation.crew
    if target is None or not target.active:
        raise ValidationError({"input": "This conversation's agent is gone or inactive."})
    access.require_start(Principal.for_initiator(tenant, by), target)
    text = _checked_text(text)
    with transaction.atomic():
        at_work = _lock_unfinished(conversation)
        if at_work is None:  # nothing to wait for: the turn starts now
            which = "agent" if conversation.agent_id else "crew"
            run = run_start(
                tenant=tenant,
                input=text,
                conversation=conversation,
                initiated_by=by,
                **{which: target},
            )
            return _create(
                tenant, conversation, None, QueuedMessage.Kind.TURN, text, by,
                status=QueuedMessage.Status.STARTED, started_run=run,
            )  # fmt: skip
        waiting = QueuedMessage.objects.filter(
            conversation=conversation,
            kind=QueuedMessage.Kind.TURN,
            status=QueuedMessage.Status.WAITING,
        )
        if waiting.count() >= MAX_WAITING:
            raise ValidationError({"input": f"At most {MAX_WAITING} messages wait in a queue."})
        return _create(tenant, conversation, at_work, QueuedMessage.Kind.TURN, text, by)


def run_steer(*, tenant: Tenant, run: Run, text: str, by: Initiator) -> QueuedMessage:
    """A steering message for `run`'s loop, taken before its next model call. `run` is a
    conversation's answer (one that arrives too late becomes its next turn); `by` must own
    the conversation: others answer 404. RunFinished once the run ended."""
    if run.tenant_id != tenant.pk or run.parent_id is not None:
        raise Http404("No such run.")
    conversation = run.conversation
    if conversation is None:
        raise ValidationError({"input": "Only a conversation's answer can be steered."})
    _check_owner(tenant, conversation, by)
    Principal.for_initiator(tenant, by).require(Action.START_RUN)
    text = _checked_text(text)
    with transaction.atomic():
        locked = Run.objects.select_for_update().filter(pk=run.pk).first()
        if locked is None or locked.status in TERMINAL:
            status = locked.status if locked is not None else "gone"
            raise RunFinished({"input": f"This run already finished ({status}): send a new turn."})
        waiting = QueuedMessage.objects.filter(
            run=run, kind=QueuedMessage.Kind.STEER, status=QueuedMessage.Status.WAITING
        )
        if waiting.count() >= MAX_WAITING:
            raise ValidationError({"input": f"At most {MAX_WAITING} steering messages wait."})
        steer = _create(tenant, conversation, run, QueuedMessage.Kind.STEER, text, by)
        transaction.on_commit(lambda: publisher().set(steer_key(run), 1, ex=FLAG_TTL_S))
    return steer


def conversation_steer(
    *, tenant: Tenant, conversation: Conversation, text: str, by: Initiator
) -> QueuedMessage:
    """Steer the conversation's answer at work (run_steer). When none works any more (it
    ended a moment ago) the message is not lost: it is queued as the next turn instead
    (`message_queue`: started at once), which the caller says to the person."""
    _check_owner(tenant, conversation, by)
    run_id = conversation_unfinished_run(conversation)
    run = Run.objects.select_related("conversation").filter(pk=run_id).first() if run_id else None
    if run is not None:
        try:
            return run_steer(tenant=tenant, run=run, text=text, by=by)
        except RunFinished:
            pass
    return message_queue(tenant=tenant, conversation=conversation, text=text, by=by)


def turn_after(run: Run) -> tuple[Run | None, QueuedMessage | None]:
    """The conversation's turn started when `run` ended (from a queued message), with that
    message; (None, None) when none did. One query (two when one did)."""
    following = (
        Run.objects.select_related("agent", "crew")
        .filter(conversation_id=run.conversation_id, parent=None, pk__gt=run.pk)
        .order_by("pk")
        .first()
    )
    if following is None:
        return None, None
    return following, QueuedMessage.objects.filter(started_run=following).first()


def queued_remove(*, tenant: Tenant, conversation: Conversation, queued_id: int, by: Initiator):
    """Take back a message that waits to start the next turn, or one refused; one that
    started or steers already is a ValidationError (409 to REST). 404 if not there."""
    _check_owner(tenant, conversation, by)
    Principal.for_initiator(tenant, by).require(Action.START_RUN)
    with transaction.atomic():
        queued = (
            QueuedMessage.objects.select_for_update()
            .filter(tenant=tenant, conversation=conversation, pk=queued_id)
            .first()
        )
        if queued is None:
            raise Http404("No such queued message.")
        removable = queued.kind == QueuedMessage.Kind.TURN and queued.status in (
            QueuedMessage.Status.WAITING,
            QueuedMessage.Status.REFUSED,
        )
        if not removable:
            raise ValidationError({"queued": f"This message has {queued.status} already."})
        queued.delete()


def queued_messages(*, tenant: Tenant, conversation: Conversation) -> list[QueuedMessage]:
    """The conversation's messages still to start (and those refused at their start),
    oldest first; steering messages not taken yet too. One query."""
    shown = QueuedMessage.objects.filter(
        tenant=tenant,
        conversation=conversation,
        status__in=[QueuedMessage.Status.WAITING, QueuedMessage.Status.REFUSED],
    )
    return list(shown.order_by("id"))


def _check_owner(tenant: Tenant, conversation: Conversation, by: Initiator) -> None:
    if conversation.tenant_id != tenant.pk or by is None:
        raise Http404("No such conversation.")
    if not conversation_owned_by(conversation, by):
        raise Http404("No such conversation.")  # another user's: as if not there


def _checked_text(text: str) -> str:
    check_input(text)
    return storable_text(text)


def _lock_unfinished(conversation: Conversation) -> Run | None:
    """The conversation's answer at work, locked until the commit (so its end, recorded
    under the same row lock, sees what is queued behind it); None when there is none."""
    run_id = conversation_unfinished_run(conversation)
    if run_id is None:
        return None
    locked = Run.objects.select_for_update().filter(pk=run_id).first()
    return None if locked is None or locked.status in TERMINAL else locked


def _create(
    tenant, conversation, run, kind, text, by, *, status=QueuedMessage.Status.WAITING,
    started_run=None,
) -> QueuedMessage:  # fmt: skip
    return QueuedMessage.objects.create(
        tenant=tenant,
        conversation=conversation,
        run=run,
        kind=kind,
        status=status,
        content=text,
        started_run=started_run,
        initiated_by_user=by if isinstance(by, AbstractBaseUser) else None,
        initiated_by_api_key=by if isinstance(by, ApiKey) else None,
    )


# -- the loop's side ---------------------------------------------------------------------
class RunSteering:
    """The loop's Steering (agents/runtime/steering.py) for one executing run."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self._keys = (cancel_key(run), steer_key(run))

    async def poll(self) -> tuple[bool, bool]:
        cancelled, steered = await flags_set(*self._keys)
        return cancelled, steered

    async def take(self, known: Sequence[int]) -> list[Steer]:
        return await db(self._take)(list(known))

    def _take(self, known: list[int]) -> list[Steer]:
        """Clear the flag, then read: a message stored after the read sets it again. Those
        waiting become `applied`, in one transaction; those applied but not in `known` (a
        crash came before the checkpoint) are taken again. (Not conversation Messages: the
        branch tree has a user message, then its answer; a steer lives in its run's state and
        `run.steered` event.)"""
        publisher().delete(self._keys[1])
        with transaction.atomic():
            rows = list(
                QueuedMessage.objects.select_for_update()
                .filter(run_id=self.run.pk, kind=QueuedMessage.Kind.STEER)
                .exclude(pk__in=known)
                .order_by("id")
            )
            fresh = [r.pk for r in rows if r.status == QueuedMessage.Status.WAITING]
            if fresh:
                QueuedMessage.objects.filter(pk__in=fresh).update(
                    status=QueuedMessage.Status.APPLIED
                )
        return [Steer(r.pk, r.content) for r in rows]


# -- an answer's end ---------------------------------------------------------------------
def turn_ended(run: Run) -> Run | None:
    """Inside the transaction that records the end of `run` (a top-level run of a
    conversation): its steering messages not taken become turns (`late`), and the
    conversation's first waiting turn starts (returned). A turn that cannot start (quota
    used up, agent inactive, access withdrawn) is `refused` with the reason, and the next
    one is tried. One statement when nothing waits (the late ones made turns in a CTE)."""
    table, steer = QueuedMessage._meta.db_table, QueuedMessage.Kind.STEER.value
    turn, waiting = QueuedMessage.Kind.TURN.value, QueuedMessage.Status.WAITING.value
    with transaction.get_connection().cursor() as cursor:
        cursor.execute(
            f"WITH late AS (UPDATE {table} SET kind = %s, late = true "  # noqa: S608 (ours)
            "WHERE run_id = %s AND kind = %s AND status = %s RETURNING id) "
            f"SELECT EXISTS (SELECT FROM late) OR EXISTS (SELECT FROM {table} "
            "WHERE conversation_id = %s AND kind = %s AND status = %s)",
            [turn, run.pk, steer, waiting, run.conversation_id, turn, waiting],
        )
        (any_waits,) = cursor.fetchone()
    if not any_waits:
        return None
    queue = QueuedMessage.objects.filter(
        conversation_id=run.conversation_id,
        kind=QueuedMessage.Kind.TURN,
        status=QueuedMessage.Status.WAITING,
    ).order_by("id")
    for queued in queue.select_related(
        "conversation__agent", "conversation__crew", "initiated_by_user", "initiated_by_api_key"
    ):
        started = _start_queued(run, queued)
        if started is not None:
            return started
    return None


def _start_queued(ended: Run, queued: QueuedMessage) -> Run | None:
    conversation = queued.conversation
    target = conversation.agent or conversation.crew
    by = queued.initiated_by_user or queued.initiated_by_api_key
    try:
        if target is None or by is None:
            raise ValidationError("Its agent, or its sender, is gone.")
        with transaction.atomic():  # (a savepoint: a refusal leaves the ending intact)
            which = "agent" if conversation.agent_id else "crew"
            started = run_start(
                tenant=ended.tenant,
                input=queued.content,
                conversation=conversation,
                initiated_by=by,
                **{which: target},
            )
    except (ValidationError, PermissionDenied, Http404) as exc:
        reason = exc.messages[0] if isinstance(exc, ValidationError) else "not allowed"
        queued.status, queued.error = QueuedMessage.Status.REFUSED, str(reason)[:300]
        queued.save(update_fields=["status", "error"])
        return None
    queued.status, queued.started_run = QueuedMessage.Status.STARTED, started
    queued.save(update_fields=["status", "started_run"])
    # The new run's first event says where it came from (no worker has it before the commit).
    payload = {"queued": queued.pk, "behind_run": ended.pk, "late": queued.late}
    append_event(started, 1, "turn.dequeued", payload)
    return started
