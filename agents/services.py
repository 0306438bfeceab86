"""Starting, deciding, cancelling and reading runs. Every entry point calls these.

Reads take the tenant and answer 404 (Http404) for another tenant's ids.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models.functions import Now
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.http import Http404
from django.utils import timezone
from guardian.models import UserObjectPermission
from guardian.shortcuts import (
    assign_perm,
    get_groups_with_perms,
    get_users_with_perms,
    remove_perm,
)

from agentplatform.saving import delete_recorded, save_validated
from agentplatform.tenancy import audit, rls
from agentplatform.tenancy.access import get_for_tenant
from agentplatform.tenancy.models import ApiKey, Membership, Tenant, TenantGroup
from agentplatform.tenancy.policy import Principal
from agents import access, quotas
from agents.models import (
    MAX_INPUT_CHARS,
    Agent,
    Approval,
    ApprovalStatus,
    Conversation,
    Crew,
    CrewMember,
    Fact,
    Message,
    Run,
    RunEvent,
    Trigger,
)
from agents.runs.channels import publisher
from agents.runs.confirmation import prepare_edited
from agents.runs.engine import cancel_key, execute_run, lease_seconds
from agents.runs.writer import storable, storable_text
from agents.runtime.client_request import ClientRequest
from agents.runtime.memory import MEMORY_TOOL_NAMES
from agents.runtime.spec import TERMINAL, RunStatus
from agents.runtime.structured import FINAL_ANSWER
from agents.runtime.tracing import current_traceparent
from agents.signals import request_execution
from agents.tool_sources import effective_tools
from providers.models import ProviderKind
from providers.pricing import usage_cost
from providers.runtime.types import Usage
from providers.services import default_connection
from tools.loader import invalidate_now_and_after_commit, per_version
from tools.runtime.tool import ToolCall

Initiator = AbstractBaseUser | ApiKey | None
logger = logging.getLogger(__name__)
BUSY = "Wait for the current answer to finish, or stop it."


# -- selectors -----------------------------------------------------------------------
def run_get(*, tenant: Tenant, run_id: Any) -> Run:
    return get_for_tenant(Run.objects.select_related("agent"), tenant, pk=_int(run_id))


def conversation_get(*, tenant: Tenant, conversation_id: Any) -> Conversation:
    return get_for_tenant(Conversation, tenant, pk=_int(conversation_id))


def approval_get(*, tenant: Tenant, approval_id: Any) -> Approval:
    return get_for_tenant(Approval.objects.select_related("run"), tenant, pk=_int(approval_id))


def fact_get(*, tenant: Tenant, fact_id: Any) -> Fact:
    return get_for_tenant(Fact, tenant, pk=_int(fact_id))


def agent_get(*, tenant: Tenant, slug: str) -> Agent:
    return get_for_tenant(Agent, tenant, slug=slug, active=True)


def crew_get(*, tenant: Tenant, slug: str) -> Crew:
    return get_for_tenant(Crew, tenant, slug=slug, active=True)


def model_target(*, tenant: Tenant, slug: str) -> Agent | Crew:
    """What a model name means to the OpenAI-compatible face and MCP's `ask_*`: the active
    agent `slug`, else the active crew `slug`; Http404 if neither. A copy of what this
    process remembers per tenant configuration version (any agent, crew or connection
    change moves it): the lookup was 3 ms of a chat's first token (bench/api.py)."""

    found = per_version(_targets, tenant.pk, dict)
    target = found.get(slug)
    if target is None:  # (misses are not kept: any name may be asked for)
        agents = Agent.objects.filter(tenant=tenant, slug=slug, active=True)
        target = agents.select_related("provider_connection").first()
        target = target or Crew.objects.filter(tenant=tenant, slug=slug, active=True).first()
        if target is None:
            raise Http404(f"No active agent or crew {slug!r}.")
        found[slug] = target
    return copy.copy(target)  # (its own state: a caller may cache relations on it)


_targets: dict[int, tuple[str, dict[str, Agent | Crew]]] = {}


@receiver([post_save, post_delete], sender=Agent)
@receiver([post_save, post_delete], sender=Crew)
def _target_changed(sender, instance: Agent | Crew, **kwargs) -> None:
    invalidate_now_and_after_commit(instance.tenant_id)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1  # matches nothing: a 404 like any unknown id


# -- services ------------------------------------------------------------------------
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
    add_message: bool = True,
    claimed_by: str | None = None,
    client_request: ClientRequest | None = None,
    acting_for: AbstractBaseUser | None = None,
    trigger: Trigger | None = None,
) -> Run:
    """A queued Run, and a Celery task to execute it once the transaction commits.

    `initiated_by` (a user or key) must be allowed to start `agent`/`crew` (`agents.access`:
    PermissionDenied otherwise); None is the platform itself (previews, benchmarks). The
    same `idempotency_key` returns the same run (even while it runs). The input joins the
    conversation (unless `add_message` is False: `run_regenerate` answers a message already
    there). A conversation takes one turn at a time: while its previous answer is
    unfinished, ConversationBusy; of concurrent turns, one wins (the conversation's row is
    locked for the insert).

    `claimed_by`: the run is executed at once by its caller's process
    (agents.runs.worker.Nearby), so it is inserted running, under that lease owner's lease,
    and not sent to a worker (a replayed idempotency key returns the earlier run as it is).

    `client_request`: what an API caller sent beside `input` (its conversation, tools,
    output format, sampling; agents.runtime.client_request), kept with the run. Only an
    agent takes one; a tool of the caller's may not share a name with the agent's.

    `acting_for`: the member a key that may act for members (ApiKey.acts_for_members)
    starts the run for: it is theirs (their runs, memory, grants) as well as the key's.

    `trigger`: the schedule or webhook that started it (agents.triggers), for its history.
    """
    target = agent or crew
    if target is None or (agent is not None and crew is not None):
        raise ValidationError({"agent": "Run exactly one agent or crew."})
    if target.tenant_id != tenant.pk or (conversation and conversation.tenant_id != tenant.pk):
        raise Http404("No such agent, crew or conversation.")  # other tenants' ids: 404
    if conversation is not None and not _owns(conversation, initiated_by):
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
    if not input.strip():
        raise ValidationError({"input": "Say something."})
    if len(input) > MAX_INPUT_CHARS:
        raise ValidationError({"input": f"At most {MAX_INPUT_CHARS} characters."})
    if client_request is not None:
        _check_client_request(target, client_request)
    if idempotency_key:
        existing = Run.objects.filter(tenant=tenant, idempotency_key=idempotency_key).first()
        if existing is not None:
            return _replayed(existing, initiated_by)
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
        alone = (
            conversation is None and api_key is None and not (idempotency_key and _in_transaction())
        )
        with nullcontext() if alone else transaction.atomic():
            if conversation is not None:
                # One turn at a time: concurrent turns queue on the conversation's row, and
                # each sees what the one before it committed (a replay of its key included).
                Conversation.objects.select_for_update().filter(pk=conversation.pk).first()
                if idempotency_key:
                    existing = Run.objects.filter(
                        tenant=tenant, idempotency_key=idempotency_key
                    ).first()
                    if existing is not None:
                        return _replayed(existing, initiated_by)
                _refuse_if_busy(conversation)
            run = Run.objects.create(
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
                **(_claimed(claimed_by) if claimed_by else {}),
            )
            if conversation is not None and add_message:
                Message.objects.create(
                    tenant=tenant, conversation=conversation, role="user", content=input, run=run
                )
                if not conversation.title:
                    conversation.title = input.strip().splitlines()[0][:80]
                conversation.save(update_fields=["title", "updated_at"])
            if api_key is not None:
                audit.record_run_started(run, api_key)
            if enqueue and not claimed_by:
                transaction.on_commit(lambda: request_execution(run.pk, tenant.pk))
    except IntegrityError:  # the same idempotency key, concurrently
        existing = Run.objects.get(tenant=tenant, idempotency_key=idempotency_key)
        return _replayed(existing, initiated_by)
    return run


@dataclass(frozen=True)
class GatewayCall:
    """A call straight to a connection's model (/v1 gateway models, embeddings)."""

    api_key: ApiKey
    gateway_model: str
    model: str
    provider: str
    input: str
    usage: Usage
    started_at: Any
    finished_at: Any = None
    error: str = ""
    # Which price table prices `model` (a connection's `price_kind`); else `provider`'s.
    price_kind: str = ""
    events: tuple[tuple[str, dict[str, Any]], ...] = ()  # (type, payload): provider.fallback


def record_model_call(
    *,
    tenant_id: int,
    user_id: int | None,
    api_key_id: int | None,
    gateway_model: str,
    model: str,
    provider: str,
    price_kind: str,
    input: str,
    usage: Usage,
    started_at: Any,
    error: str = "",
) -> Run:
    """A model call the platform made outside a run's loop (a judge's verdict, a knowledge
    base's embeddings) recorded as a finished run of `gateway_model` with its usage and
    cost (`price_kind`'s prices: what its quota hold settled at), so the usage page and
    quota counters rebuilt from runs count it. One INSERT."""
    run = _model_call_run(
        tenant_id=tenant_id,
        price_kind=price_kind,
        usage=usage,
        started_at=started_at,
        finished_at=None,
        initiated_by_user_id=user_id,
        initiated_by_api_key_id=api_key_id,
        gateway_model=gateway_model,
        model=model,
        provider=provider,
        error=error,
        input=input,
    )
    with rls.tenant_scope(tenant_id):
        run.save(force_insert=True)
    return run


def record_gateway_calls(calls: list[GatewayCall]) -> None:
    """Record each call as a finished run of its key with its usage: one INSERT per tenant
    (under its row-level scope), and row by row if that fails, so one bad row loses only
    itself."""
    by_tenant: dict[int, list[Run]] = {}
    for call in calls:
        by_tenant.setdefault(call.api_key.tenant_id, []).append(_gateway_run(call))
    for tenant_id, runs in by_tenant.items():
        with rls.tenant_scope(tenant_id):
            try:
                with transaction.atomic():
                    Run.objects.bulk_create(runs)
                    _record_gateway_events(runs)
            except Exception:
                logger.exception("gateway calls of tenant %s: recording them one by one", tenant_id)
                for run in runs:
                    try:
                        with transaction.atomic():
                            run.save(force_insert=True)
                            _record_gateway_events([run])
                    except Exception:
                        logger.exception("a gateway call of tenant %s was not recorded", tenant_id)


def _record_gateway_events(runs: list[Run]) -> None:
    """The events of recorded gateway calls (a model alias's fallbacks): one INSERT."""
    events = [
        RunEvent(tenant_id=run.tenant_id, run=run, seq=seq, type=type, payload=payload)
        for run in runs
        for seq, (type, payload) in enumerate(getattr(run, "gateway_events", ()), start=1)
    ]
    if events:
        RunEvent.objects.bulk_create(events)


def column_text(value: str, limit: int) -> str:
    """`value` as a text column stores it: storable, valid UTF-8, at most `limit` long."""
    clean = storable_text(value).encode("utf-8", "replace").decode("utf-8")
    return clean[:limit]


def _gateway_run(call: GatewayCall) -> Run:
    run = _model_call_run(
        tenant_id=call.api_key.tenant_id,
        price_kind=call.price_kind or call.provider,
        usage=call.usage,
        started_at=call.started_at,
        finished_at=call.finished_at,
        initiated_by_api_key=call.api_key,
        gateway_model=call.gateway_model,
        model=call.model,
        provider=call.provider,
        error=call.error,
        input=call.input,
    )
    run.gateway_events = call.events  # written with it (_record_gateway_events)
    return run


def _model_call_run(
    *,
    tenant_id: int,
    price_kind: str,
    usage: Usage,
    started_at: Any,
    finished_at: Any,
    gateway_model: str,
    model: str,
    provider: str,
    error: str,
    input: str,
    **initiator: Any,
) -> Run:
    """The unsaved finished run recording one model call made outside a run's loop (a
    gateway call, a judge's verdict, a knowledge base's embeddings): its usage, priced by
    `price_kind`'s table, and its text columns made storable."""

    def count(value: int) -> int:
        return min(max(int(value or 0), 0), 2**31 - 1)  # (a provider's odd number)

    usage = Usage(*(count(n) for n in dataclasses.astuple(usage)))
    cost = usage_cost(tenant_id, price_kind, model, usage)
    return Run(
        tenant_id=tenant_id,
        **initiator,
        gateway_model=column_text(gateway_model, 300),
        model=column_text(model, 200),
        provider=column_text(provider, 100),
        status=RunStatus.FAILED if error else RunStatus.SUCCEEDED,
        error=column_text(error, 2000),
        input=column_text(input, 2000),
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cost_usd=cost,
        total_cost_usd=cost,
        correlation_id=uuid.uuid4().hex,
        started_at=started_at,
        finished_at=finished_at or timezone.now(),
    )


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
        own = effective_tools(target).offered
        reserved = {FINAL_ANSWER, *MEMORY_TOOL_NAMES}  # the platform's, whatever the agent
        taken = sorted(t.name for t in client.tools if own.has(t.name) or t.name in reserved)
        if taken:
            raise ValidationError(
                {"tools": f"The agent has its own tool named `{taken[0]}`: rename yours."}
            )


def _takes_images(agent: Agent) -> bool:
    """Anthropic, OpenAI and OpenAI-compatible connections take images; the offline demo
    and remote agents do not."""
    if agent.kind == "remote":
        return False
    connection = agent.provider_connection or default_connection(agent.tenant)
    return connection is not None and connection.kind != ProviderKind.OFFLINE


def _claimed(owner: str) -> dict[str, Any]:
    """A new run's fields as agents.runs.claim's claim leaves them (its lease by the
    database's clock)."""
    return {
        "status": RunStatus.RUNNING,
        "lease_owner": owner,
        "lease_expires_at": Now() + timedelta(seconds=lease_seconds()),
        "attempts": 1,
        "started_at": timezone.now(),
    }


class IdempotencyKeyReused(ValidationError):
    """The Idempotency-Key names a run someone else started (REST answers 409)."""


def _replayed(run: Run, initiated_by: Initiator) -> Run:
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
    """Answer the conversation's last message again, in place of the answer it has: a new
    run of the conversation's agent or crew on the same input; the message now belongs to
    it and the replaced answer leaves the conversation (and so the history the model sees).
    The earlier run keeps that answer and its events."""
    question = (
        Message.objects.filter(conversation=conversation, role=Message.Role.USER)
        .order_by("-id")
        .first()
    )
    if question is None:
        raise ValidationError({"input": "Nothing to answer again yet."})
    with transaction.atomic():  # run_start refuses a busy conversation
        run = run_start(
            tenant=tenant,
            agent=conversation.agent,
            crew=conversation.crew,
            input=question.content,
            conversation=conversation,
            initiated_by=initiated_by,
            add_message=False,
        )
        Message.objects.filter(conversation=conversation, id__gt=question.pk).delete()
        question.run = run
        question.save(update_fields=["run"])
    return run


def _in_transaction() -> bool:
    return transaction.get_connection().in_atomic_block


def _owns(conversation: Conversation, who: Initiator) -> bool:
    """A conversation with an owner takes turns from that owner only."""
    if conversation.owner_user_id is not None:
        return isinstance(who, AbstractBaseUser) and who.pk == conversation.owner_user_id
    if conversation.owner_api_key_id is not None:
        return isinstance(who, ApiKey) and who.pk == conversation.owner_api_key_id
    return True


def run_inline(
    *,
    tenant: Tenant,
    agent: Agent | None = None,
    crew: Crew | None = None,
    input: str,
    conversation: Conversation | None = None,
    initiated_by: Initiator = None,
) -> Run:
    """Start and execute a run in this process (admin previews, tests, benchmarks)."""
    run = run_start(
        tenant=tenant,
        agent=agent,
        crew=crew,
        input=input,
        conversation=conversation,
        initiated_by=initiated_by,
        enqueue=False,
    )
    execute_run(run.pk)
    run.refresh_from_db()
    return run


def run_cancel(*, tenant: Tenant, run: Run, by: Initiator) -> Run:
    """Cancel now if nothing executes it (queued, awaiting approval); otherwise flag it and
    the executing loop stops at its next check (between steps and during streaming).
    `by` must be the run's starter or an admin (PermissionDenied); None is the platform."""
    if run.tenant_id != tenant.pk:
        raise Http404("No such run.")
    if by is not None:
        access.require_cancel(Principal.for_initiator(tenant, by), run)
    if run.is_terminal:
        return run
    publisher().set(cancel_key(run), 1, ex=24 * 3600)
    with transaction.atomic():  # the status and its event: one commit, then the publish
        stopped = Run.objects.filter(
            pk=run.pk, status__in=[RunStatus.QUEUED, RunStatus.AWAITING_APPROVAL]
        ).update(status=RunStatus.CANCELLED, finished_at=timezone.now(), error="cancelled")
        if stopped:
            from agents.runs.writer import append_event, next_seq

            run.refresh_from_db()
            append_event(run, next_seq(run.pk), "run.cancelled", {"status": "cancelled"})
    run.refresh_from_db()
    return run


def approval_decide(
    *,
    tenant: Tenant,
    approval: Approval,
    approved: bool,
    by: AbstractBaseUser | ApiKey,
    reason: str = "",
    arguments: dict[str, Any] | None = None,
) -> Approval:
    """Record a decision; when the run's last pending approval is decided, queue it to
    resume. `by` must hold the approval authority of the run's agent (`agents.access`;
    PermissionDenied otherwise). Deciding twice is refused (409-style ValidationError).

    Approving a prepared request (an HTTP tool's) with edited arguments sends nothing: the
    call is prepared again (`agents.runs.confirmation`) and asked again as a new pending approval
    (this one becomes `edited`, `replaced_by` the new one; the run stays parked). Arguments
    it cannot be prepared from are a ValidationError, the approval left pending."""
    if approval.tenant_id != tenant.pk:
        raise Http404("No such approval.")
    access.require_decide(Principal.for_initiator(tenant, by), approval)
    if arguments is not None:
        arguments = _storable_arguments(arguments)
    asked_again = None  # (the call prepared again, its approval.required event)
    if approved and arguments is not None and approval.prepared_request is not None:
        asked_again = prepare_edited(approval, arguments)
    label = by.get_username() if isinstance(by, AbstractBaseUser) else f"API key {by.name}"
    with transaction.atomic():
        locked = Approval.objects.select_for_update().get(pk=approval.pk)
        if locked.status != ApprovalStatus.PENDING:
            raise ValidationError(f"This call was already {locked.status}.")
        locked.status = ApprovalStatus.APPROVED if approved else ApprovalStatus.REJECTED
        locked.decided_by = by if isinstance(by, AbstractBaseUser) else None
        locked.decided_by_label = label
        locked.decided_at = timezone.now()
        locked.reason = reason[:2000]
        locked.edited_arguments = arguments if approved else None
        if asked_again is not None:
            _ask_again(locked, *asked_again)
            audit.record_approval(locked, by)
            return locked
        locked.save()
        audit.record_approval(locked, by)
        pending = Approval.objects.filter(run_id=locked.run_id, status=ApprovalStatus.PENDING)
        if not pending.exists():
            resumed = Run.objects.filter(
                pk=locked.run_id, status=RunStatus.AWAITING_APPROVAL
            ).update(status=RunStatus.QUEUED, queued_at=timezone.now())
            if resumed:
                transaction.on_commit(lambda: request_execution(locked.run_id, locked.tenant_id))
    return locked


def _storable_arguments(arguments: Any) -> dict[str, Any]:
    """Edited arguments as they are stored and used: a JSON object, NUL characters replaced
    (the platform's rule, `agents.runs.writer.storable`); text that is not Unicode refused."""
    if not isinstance(arguments, dict):
        raise ValidationError({"arguments": "Edited arguments must be a JSON object."})
    try:
        json.dumps(arguments, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError):
        problem = "Edited arguments must be valid Unicode JSON."
        raise ValidationError({"arguments": problem}) from None
    return storable(arguments)


def _ask_again(edited: Approval, call: ToolCall, event: dict[str, Any]) -> None:
    """Inside approval_decide's transaction: `edited` replaced by a pending approval of the
    same call with its new request, announced on the run's stream."""
    from agents.runs.writer import append_event, next_seq

    run = Run.objects.select_for_update().get(pk=edited.run_id)  # one event writer at a time
    if run.is_terminal:
        raise ValidationError(f"The run already finished ({run.status}).")
    edited.status = ApprovalStatus.EDITED
    edited.save()
    edited.replaced_by = Approval.objects.create(
        tenant_id=edited.tenant_id,
        run=run,
        call_id=call.id,
        tool_name=call.name,
        arguments=storable(event["arguments"]),
        prepared_request=call.prepared.to_dict(),
    )
    edited.save(update_fields=["replaced_by"])
    append_event(run, next_seq(run.pk), "approval.required", event)


def _check_tenant(instance: Any, tenant: Tenant, what: str) -> None:
    if instance.tenant_id != tenant.pk:
        raise Http404(f"No such {what}.")  # other tenants' objects: 404


def agent_save(
    *,
    tenant: Tenant,
    agent: Agent | None = None,
    changes: dict[str, Any],
    graph_checked: bool = False,
) -> Agent:
    """Create (agent None) or change one of the tenant's agents through its full_clean,
    which compiles the tenant's whole configuration with it — unless `graph_checked`: the
    caller compiled the end state itself (`agentplatform.config_checks`)."""
    if agent is None:
        agent = Agent(tenant=tenant)
    else:
        _check_tenant(agent, tenant, "agent")
    agent.graph_checked = graph_checked
    return save_validated(agent, changes)


def agent_delete(*, tenant: Tenant, agent: Agent) -> None:
    """Delete one of the tenant's agents."""
    _check_tenant(agent, tenant, "agent")
    delete_recorded(agent)


def crew_save(
    *,
    tenant: Tenant,
    crew: Crew | None = None,
    changes: dict[str, Any],
    members: list[Agent] | None = None,
    graph_checked: bool = False,
) -> Crew:
    """Create or change a crew; a `members` list replaces its members in that order. The
    tenant's whole configuration is compiled with the crew and these members, unless
    `graph_checked` (see `agent_save`)."""
    if crew is None:
        crew = Crew(tenant=tenant)
    else:
        _check_tenant(crew, tenant, "crew")
    if members is not None and any(agent.tenant_id != tenant.pk for agent in members):
        raise ValidationError({"members": "Choose this tenant's agents."})
    crew.graph_checked = graph_checked
    crew.pending_members = members

    def replace_members(saved: Crew) -> None:
        CrewMember.objects.filter(crew=saved).delete()
        CrewMember.objects.bulk_create(
            CrewMember(tenant=tenant, crew=saved, agent=agent, position=position)
            for position, agent in enumerate(members)
        )

    return save_validated(crew, changes, after=None if members is None else replace_members)


def crew_member_slugs(crew: Crew) -> list[str]:
    """The crew's members in order, by slug (its versions keep them so). One query."""
    return list(CrewMember.objects.filter(crew=crew).values_list("agent__slug", flat=True))


def crew_members_named(tenant: Tenant, slugs: list[str]) -> list[Agent]:
    """The tenant's agents with these slugs, in this order; ValidationError naming those
    that no longer exist (restoring a crew's version)."""
    found = {a.slug: a for a in Agent.objects.filter(tenant=tenant, slug__in=slugs)}
    if missing := [slug for slug in slugs if slug not in found]:
        raise ValidationError(
            f"This version's members include agents that no longer exist: {', '.join(missing)}."
        )
    return [found[slug] for slug in slugs]


def crew_delete(*, tenant: Tenant, crew: Crew) -> None:
    """Delete one of the tenant's crews (and its member rows)."""
    _check_tenant(crew, tenant, "crew")
    delete_recorded(crew)


def conversation_save(
    *,
    tenant: Tenant,
    conversation: Conversation | None = None,
    changes: dict[str, Any],
    owner_user: AbstractBaseUser | None = None,
    owner_api_key: ApiKey | None = None,
) -> Conversation:
    """Start a conversation owned by `owner_user` or `owner_api_key`, or change one."""
    if conversation is None:
        conversation = Conversation(
            tenant=tenant, owner_user=owner_user, owner_api_key=owner_api_key
        )
    else:
        _check_tenant(conversation, tenant, "conversation")
        if owner_user is not None or owner_api_key is not None:
            raise ValueError("A conversation keeps the owner it was started by.")
    for field in ("agent", "crew"):
        target = changes.get(field)
        if target is not None and target.tenant_id != tenant.pk:
            raise ValidationError({field: f"Choose one of this tenant's {field}s."})
        owner = conversation.owner_user or conversation.owner_api_key
        if target is not None and owner is not None:
            principal = Principal.for_initiator(tenant, owner)
            if not access.may_use(principal, target):
                raise PermissionDenied(f"You may not use this {field}.")
    return save_validated(conversation, changes)


def conversation_delete(*, tenant: Tenant, conversation: Conversation) -> None:
    """Delete one of the tenant's conversations and its messages."""
    _check_tenant(conversation, tenant, "conversation")
    conversation.delete()


def fact_delete(*, tenant: Tenant, fact: Fact) -> None:
    """Forget one of the tenant's remembered facts."""
    _check_tenant(fact, tenant, "fact")
    fact.delete()


# -- use grants ----------------------------------------------------------------------------
def use_grants(*, tenant: Tenant, target: Agent | Crew) -> tuple[list, list[TenantGroup]]:
    """The users and the tenant groups holding the use of `target` (none: open to every
    member)."""
    _check_tenant(target, tenant, "agent or crew")
    codename = access.USE_PERMISSIONS[type(target)]
    users = get_users_with_perms(target, only_with_perms_in=[codename], with_group_users=False)
    groups = get_groups_with_perms(target, attach_perms=True)
    holding = [group for group, perms in groups.items() if codename in perms]
    tenant_groups = TenantGroup.objects.filter(tenant=tenant, group__in=holding)
    return sorted(users, key=lambda u: u.get_username()), list(tenant_groups)


def use_grant(
    *,
    tenant: Tenant,
    target: Agent | Crew,
    granted: bool,
    user: AbstractBaseUser | None = None,
    group: TenantGroup | None = None,
) -> None:
    """Grant (`granted`) or revoke the use of `target` to a member or a tenant group. Once
    anyone holds it, only holders (and admins) may use `target`."""
    _check_tenant(target, tenant, "agent or crew")
    if (user is None) == (group is None):
        raise ValidationError("Grant to one member or one group.")
    if group is not None:
        _check_tenant(group, tenant, "group")
    elif not Membership.objects.filter(tenant=tenant, user=user).exists():
        raise ValidationError({"user": "Only the tenant's members can be granted its agents."})
    holder = user if user is not None else group.group
    codename = f"agents.{access.USE_PERMISSIONS[type(target)]}"
    (assign_perm if granted else remove_perm)(codename, holder, target)


def use_grant_holders(tenant: Tenant, lines: list[str]) -> list[AbstractBaseUser | TenantGroup]:
    """The members and groups a version's grant lines name ("user bob: use_agent", "group
    Finance: use_crew"; other permissions are not use grants and are left out), for
    restoring it; ValidationError naming those no longer there."""
    holders: list[AbstractBaseUser | TenantGroup] = []
    missing = []
    for line in lines:
        kind, _, rest = str(line).partition(" ")
        name, _, codename = rest.rpartition(": ")
        if codename not in access.USE_PERMISSIONS.values():
            continue
        if kind == "group":
            found = TenantGroup.objects.filter(tenant=tenant, name=name).first()
        else:
            membership = Membership.objects.filter(tenant=tenant, user__username=name).first()
            found = membership.user if membership else None
        if found is None:
            missing.append(f"{kind} {name}")
        else:
            holders.append(found)
    if missing:
        raise ValidationError(
            f"This version grants the use to members or groups no longer here: "
            f"{', '.join(missing)}."
        )
    return holders


def use_grants_set(
    *, tenant: Tenant, target: Agent | Crew, holders: list[AbstractBaseUser | TenantGroup]
) -> None:
    """Grant the use of `target` to exactly `holders` (members and tenant groups): those
    missing are granted, the others revoked, each as `use_grant` does."""
    users, groups = use_grants(tenant=tenant, target=target)
    want_users = {h.pk: h for h in holders if not isinstance(h, TenantGroup)}
    want_groups = {h.pk: h for h in holders if isinstance(h, TenantGroup)}
    for user in users:
        if user.pk not in want_users:
            use_grant(tenant=tenant, target=target, granted=False, user=user)
    for group in groups:
        if group.pk not in want_groups:
            use_grant(tenant=tenant, target=target, granted=False, group=group)
    held_users, held_groups = {u.pk for u in users}, {g.pk for g in groups}
    for pk, user in want_users.items():
        if pk not in held_users:
            use_grant(tenant=tenant, target=target, granted=True, user=user)
    for pk, group in want_groups.items():
        if pk not in held_groups:
            use_grant(tenant=tenant, target=target, granted=True, group=group)


def member_grants_forget(*, membership: Membership) -> None:
    """A member leaves: their use grants on the tenant's agents and crews and their place
    in its groups go too (else an agent stays restricted to nobody visible, and a second
    invitation would silently bring them back)."""
    user_id, tenant_id = membership.user_id, membership.tenant_id
    for model, codename in access.USE_PERMISSIONS.items():
        pks = [
            str(pk) for pk in model.objects.filter(tenant_id=tenant_id).values_list("pk", flat=True)
        ]
        UserObjectPermission.objects.filter(
            user_id=user_id,
            permission__codename=codename,
            content_type=ContentType.objects.get_for_model(model),
            object_pk__in=pks,
        ).delete()
    groups = TenantGroup.objects.filter(tenant_id=tenant_id).values_list("group_id", flat=True)
    get_user_model().groups.through.objects.filter(
        user_id=user_id, group_id__in=list(groups)
    ).delete()
