"""Starting runs: run_start (who may, what the input may be, idempotency keys, one turn at a
time per conversation, what an API caller may send beside the input), run_regenerate and
run_edit (a conversation's branches: agents.conversations.branches). Every entry point
starts its runs here (run_inline, agents.runs.inline, through run_start).

Reads take the tenant and answer 404 (Http404) for another tenant's ids.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Exists
from django.db.models.expressions import RawSQL
from django.http import Http404
from django.utils import timezone

from agents import access, conversations, quotas
from agents.models import (
    MAX_INPUT_CHARS,
    Agent,
    AttachmentKind,
    Conversation,
    Crew,
    Message,
    Run,
    Trigger,
)
from agents.runs.claim import lease_seconds
from agents.runs.writer import insert_run
from agents.runtime.client_request import SYNTHETIC_TOOLS, ClientRequest, platform_name
from agents.runtime.spec import TERMINAL, RunStatus
from agents.runtime.tracing import current_traceparent
from agents.signals import request_execution
from agents.tool_sources import effective_tools
from providers.models import ProviderKind
from providers.services import default_connection
from tenancy.models import ApiKey, Tenant
from tenancy.policy import Principal
from tenancy.records import audit

Initiator = AbstractBaseUser | ApiKey | None
BUSY = "Wait for the current answer to finish, or stop it."


def run_start(
    *,
    tenant: Tenant,
    agent: Agent | None = None,
    crew: Crew | None = None,
    input: str,
    conversation: Conversation | None = None,
    initiated_by: Initiator = None,
    idempotency_key: str | None = None,
    enqueue: bool = True,
    reply_to: Message | None = None,
    edit_of: Message | None = None,
    claimed_by: str | None = None,
    client_request: ClientRequest | None = None,
    acting_for: AbstractBaseUser | None = None,
    trigger: Trigger | None = None,
    attachments: Sequence[int] = (),
    agent_draft_id: int | None = None,
) -> Run:
    """A queued Run, and a Celery task to execute it once the transaction commits.

    `initiated_by` (a user or key) must be allowed to start `agent`/`crew` (`agents.access`:
    PermissionDenied otherwise); None is the platform itself (previews, benchmarks). The
    same `idempotency_key` returns the same run (even while it runs). The input joins the
    conversation as a message following its leaf, or (`edit_of`: a new version of that user
    message) following what that message followed, and becomes its leaf; with `reply_to`
    (`run_regenerate`) none joins and the run answers that message again. The run records
    the message it answers (`in_reply_to`). A conversation takes one turn at a time: while
    its previous answer is unfinished, ConversationBusy; of concurrent turns, one wins (the
    conversation's row is locked for the insert).

    `claimed_by`: the run is executed at once by its caller's process
    (agents.runs.worker.Nearby), so it is inserted running, under that lease owner's lease,
    and not sent to a worker (a replayed idempotency key returns the earlier run as it is).

    `client_request`: what an API caller sent beside `input` (its conversation, tools,
    output format, sampling; agents.runtime.client_request), kept with the run. Only an
    agent takes one; a tool of the caller's may not share a name with the agent's.

    `acting_for`: the member a key that may act for members (ApiKey.acts_for_members)
    starts the run for: it is theirs (their runs, memory, grants) as well as the key's.

    `trigger`: the schedule or webhook that started it (agents.triggers), for its history.

    `attachments`: ids of files the starter attached in `conversation` and has not sent yet
    (agents.conversations): they join its message, and the run is given them with the
    conversation's earlier documents (its record lists them). Images need an agent whose
    model takes them; refused (ValidationError) before anything is written.

    `agent_draft_id`: a draft of the agent or crew that the run executes instead (the
    draft's evaluation, agents.evaluations).
    """
    target = agent or crew
    if target is None or (agent is not None and crew is not None):
        raise ValidationError({"agent": "Run exactly one agent or crew."})
    if target.tenant_id != tenant.pk or (conversation and conversation.tenant_id != tenant.pk):
        raise Http404("No such agent, crew or conversation.")  # other tenants' ids: 404
    if conversation is not None and not conversation_owned_by(conversation, initiated_by):
        raise PermissionDenied("This conversation belongs to someone else.")
    if not target.active:
        which = "agent" if agent else "crew"
        raise ValidationError({which: f"This {which} is not active."})
    if initiated_by is not None:
        access.require_start(Principal.for_initiator(tenant, initiated_by), target)
    if acting_for is not None:
        acts_for_members = isinstance(initiated_by, ApiKey) and (
            Principal.for_initiator(tenant, initiated_by).acts_for_members
        )
        if not acts_for_members:
            raise PermissionDenied("This API key may not act for members.")
        access.require_start(Principal.for_initiator(tenant, acting_for), target)
    check_input(input)
    if client_request is not None:
        _check_client_request(target, client_request)
    for given in (reply_to, edit_of):
        if given is not None and (conversation is None or given.conversation_id != conversation.pk):
            raise Http404("No such message in this conversation.")
    attached = _attachments(target, conversation, attachments, initiated_by)
    if idempotency_key:
        existing = Run.objects.filter(tenant=tenant, idempotency_key=idempotency_key).first()
        if existing is not None:
            return replayed(existing, initiated_by)
    user = initiated_by if isinstance(initiated_by, AbstractBaseUser) else acting_for
    api_key = initiated_by if isinstance(initiated_by, ApiKey) else None
    # A limit used up refuses the run before it exists (QuotaExceeded); its model calls
    # then reserve for themselves (agents.quotas.MeteredAdapter).
    quotas.check(
        quotas.Meter(
            tenant_id=tenant.pk,
            user_id=user.pk if user is not None else None,
            api_key_id=api_key.pk if api_key is not None else None,
            agent_id=agent.pk if agent is not None else None,
        ),
        tokens=quotas.estimate_text_tokens(input),
    )
    try:
        # Alone, the INSERT needs no transaction block (two round trips fewer); a possible
        # key conflict inside the caller's transaction needs a savepoint.
        alone = conversation is None and not (idempotency_key and _in_transaction())
        with nullcontext() if alone else transaction.atomic():
            if conversation is not None:
                # One turn at a time: concurrent turns queue on the conversation's row, and
                # each sees what the one before it committed (a replay of its key included).
                locked = Conversation.objects.select_for_update().filter(pk=conversation.pk)
                # (Read before the lock is granted: a turn committed meanwhile, which could
                # have sent attachments, makes this one busy below, so that reads nothing.)
                leaf_id, any_sent = locked.values_list(
                    "leaf_id", Exists(conversations.attachments_sent_in(conversation))
                ).first()
                if idempotency_key:
                    existing = Run.objects.filter(
                        tenant=tenant, idempotency_key=idempotency_key
                    ).first()
                    if existing is not None:
                        return replayed(existing, initiated_by)
                _refuse_if_busy(conversation)
            run = Run(
                tenant=tenant,
                agent=agent,
                crew=crew,
                conversation=conversation,
                initiated_by_user=user,
                initiated_by_api_key=api_key,
                input=input,
                client_request=client_request.to_dict() if client_request else None,
                correlation_id=uuid.uuid4().hex,
                traceparent=current_traceparent(),  # its starter's trace, continued by its runner
                queued_at=timezone.now(),
                idempotency_key=idempotency_key or None,
                trigger=trigger,
                in_reply_to=reply_to,
                agent_draft_id=agent_draft_id,
                **(claimed_fields(claimed_by) if claimed_by else {}),
            )
            entry = audit.run_started_entry(run, api_key) if api_key else None
            if conversation is not None and not conversation.title:
                conversation.title = input.strip().splitlines()[0][:80]
            if conversation is not None and reply_to is None:
                # The run, its audit entry, the person's message, the conversation's new
                # leaf: one statement.
                turn = Message(
                    tenant=tenant,
                    conversation=conversation,
                    parent_id=edit_of.parent_id if edit_of is not None else leaf_id,
                    role="user",
                    content=input,
                )
                insert_run(run, entry, turn, title=conversation.title)
                conversation.leaf_id = turn.pk
                if attached or any_sent:
                    conversations.attachments_send(message=turn, run=run, attachments=attached)
            else:
                insert_run(run, entry)  # (with its audit entry: one statement)
            if reply_to is not None:  # answered again: given what the message's first answer was
                if any_sent:
                    conversations.attachments_given(run=run, message=reply_to)
                conversation.leaf_id = run.in_reply_to_id
                conversation.save(update_fields=["title", "leaf", "updated_at"])
            if enqueue and not claimed_by:
                transaction.on_commit(lambda: request_execution(run.pk, tenant.pk))
    except IntegrityError:  # the same idempotency key, concurrently
        existing = Run.objects.get(tenant=tenant, idempotency_key=idempotency_key)
        return replayed(existing, initiated_by)
    return run


def check_input(text: str) -> None:
    """A person's turn or steering message: some text, at most MAX_INPUT_CHARS."""
    if not isinstance(text, str) or not text.strip():
        raise ValidationError({"input": "Say something."})
    if len(text) > MAX_INPUT_CHARS:
        raise ValidationError({"input": f"At most {MAX_INPUT_CHARS} characters."})


def _check_client_request(target: Agent | Crew, client: ClientRequest) -> None:
    """What a caller may send a run of `target` beside its input."""
    if isinstance(target, Crew):
        if not client.takes_text_only:
            raise ValidationError(
                {"input": "A crew takes text turns only: no tools, tool calls or output format."}
            )
        return
    if client.images and not _takes_images(target):
        raise ValidationError(
            {"input": "This agent's model connection does not take images: send text only."}
        )
    if client.tools and target.kind == "remote":
        raise ValidationError({"tools": "A remote agent runs its own tools: send it none."})
    if client.tools:
        # The platform's synthetic tools give way to the caller's names (renamed for the
        # model: client_request.platform_name); the agent's own tools do not: which one a
        # call meant could not be told apart.
        own = effective_tools(target).offered
        renamed = {platform_name(name, client.tools) for name in SYNTHETIC_TOOLS}
        names = {t.name for t in client.tools} | renamed
        taken = sorted(n for n in names if own.has(n) and n not in SYNTHETIC_TOOLS)
        if taken:
            raise ValidationError(
                {"tools": f"The agent has its own tool named `{taken[0]}`: rename yours."}
            )


def _attachments(
    target: Agent | Crew,
    conversation: Conversation | None,
    ids: Sequence[int],
    initiated_by: Initiator,
) -> list:
    """The pending attachments a new turn is sent with, checked before anything is written."""
    if not ids:
        return []
    if conversation is None:
        raise ValidationError({"attachments": "Files are attached in a conversation: give one."})
    chosen = conversations.attachments_for_send(conversation=conversation, ids=ids, by=initiated_by)
    images = any(a.kind == AttachmentKind.IMAGE for a in chosen)
    if images and (isinstance(target, Crew) or not _takes_images(target)):
        raise ValidationError(
            {
                "attachments": "This agent's model does not take images: remove the image, "
                "or chat with an agent whose model does."
            }
        )
    return chosen


def _takes_images(agent: Agent) -> bool:
    """Anthropic, OpenAI and OpenAI-compatible connections take images; the offline demo
    and remote agents do not."""
    if agent.kind == "remote":
        return False
    connection = agent.provider_connection or default_connection(agent.tenant)
    return connection is not None and connection.kind != ProviderKind.OFFLINE


def claimed_fields(owner: str) -> dict[str, Any]:
    """A new run's fields as agents.runs.claim's claim leaves them (its lease by the
    database's clock)."""
    return {
        "status": RunStatus.RUNNING,
        "lease_owner": owner,
        "lease_expires_at": RawSQL(  # (as the claim writes it; no expression to compile)
            "STATEMENT_TIMESTAMP() + %s * interval '1 second'", (lease_seconds(),)
        ),
        "attempts": 1,
        "started_at": timezone.now(),
    }


class IdempotencyKeyReused(ValidationError):
    """The Idempotency-Key names a run someone else started (REST answers 409)."""


def replayed(run: Run, initiated_by: Initiator) -> Run:
    """The run an Idempotency-Key names, if the same principal started it."""
    user = initiated_by if isinstance(initiated_by, AbstractBaseUser) else None
    api_key = initiated_by if isinstance(initiated_by, ApiKey) else None
    same = (run.initiated_by_user_id, run.initiated_by_api_key_id) == (
        user.pk if user else None,
        api_key.pk if api_key else None,
    )
    if not same:
        raise IdempotencyKeyReused({"idempotency_key": "This key was used by someone else."})
    return run


class ConversationBusy(ValidationError):
    """The conversation's previous answer (run `run_id`) is still running: a new turn
    waits for it to finish, or for someone to cancel it (REST answers 409)."""

    def __init__(self, run_id: int) -> None:
        super().__init__({"input": BUSY})
        self.run_id = run_id


def conversation_unfinished_run(conversation: Conversation) -> int | None:
    """The id of the conversation's unfinished answer (a top-level run), if any. One query."""
    runs = Run.objects.filter(conversation=conversation, parent=None)
    return runs.exclude(status__in=TERMINAL).values_list("pk", flat=True).first()


def conversation_busy(conversation: Conversation) -> bool:
    """Is an answer (a top-level run) of the conversation still unfinished?"""
    return conversation_unfinished_run(conversation) is not None


def _refuse_if_busy(conversation: Conversation) -> None:
    running = conversation_unfinished_run(conversation)
    if running is not None:
        raise ConversationBusy(running)


def run_regenerate(*, tenant: Tenant, conversation: Conversation, initiated_by: Initiator) -> Run:
    """Answer the last message of the conversation's branch again: a new run of its agent or
    crew on the same input, whose answer becomes a new version beside the answer it had
    (agents.conversations.branches: both stay, a switch shows either). The branch is shown
    up to that message until the new answer lands."""
    leaf = conversation.leaf
    question = leaf
    if leaf is not None and leaf.role == Message.Role.ASSISTANT:
        question = leaf.parent
    if question is None or question.role != Message.Role.USER:
        raise ValidationError({"input": "Nothing to answer again yet."})
    return run_start(
        tenant=tenant,
        agent=conversation.agent,
        crew=conversation.crew,
        input=question.content,
        conversation=conversation,
        initiated_by=initiated_by,
        reply_to=question,
    )


def run_edit(
    *,
    tenant: Tenant,
    conversation: Conversation,
    message: Message,
    input: str,
    initiated_by: Initiator,
) -> Run:
    """A new version of one of the person's earlier messages, and a run answering it: the
    conversation goes on from there on a new branch; the branch it had stays
    (agents.conversations.branches). Only a user message of this conversation is edited
    (404 for another conversation's, a ValidationError for an answer); refused like any
    turn while an answer runs (ConversationBusy)."""
    if message.conversation_id != conversation.pk or message.tenant_id != tenant.pk:
        raise Http404("No such message in this conversation.")
    if message.role != Message.Role.USER:
        raise ValidationError({"message": "Only your own messages can be edited."})
    return run_start(
        tenant=tenant,
        agent=conversation.agent,
        crew=conversation.crew,
        input=input,
        conversation=conversation,
        initiated_by=initiated_by,
        edit_of=message,
    )


def _in_transaction() -> bool:
    return transaction.get_connection().in_atomic_block


def conversation_owned_by(conversation: Conversation, who: Initiator) -> bool:
    """A conversation with an owner takes turns from that owner only."""
    if conversation.owner_user_id is not None:
        return isinstance(who, AbstractBaseUser) and who.pk == conversation.owner_user_id
    if conversation.owner_api_key_id is not None:
        return isinstance(who, ApiKey) and who.pk == conversation.owner_api_key_id
    return True
