"""A person's say over a started run: cancelling it, deciding its approvals (an edited
prepared request asked again). Every entry point decides here."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models.functions import Now
from django.dispatch import receiver
from django.http import Http404
from django.utils import timezone

from agents import access
from agents.models import Approval, ApprovalStatus, Run
from agents.runs.cancellation import request_cancel
from agents.runs.confirmation import prepare_edited
from agents.runs.engine import record_answer
from agents.runs.start import Initiator
from agents.runs.steering import turn_ended
from agents.runs.writer import append_event, next_seq, storable
from agents.runtime.spec import RunStatus
from agents.signals import request_execution
from tenancy import rls
from tenancy.models import ApiKey, Tenant
from tenancy.policy import Principal
from tenancy.records import audit
from tools.mcp_oauth import CONNECT_EVENT, account_connected
from tools.runtime.tool import ToolCall


def run_cancel(*, tenant: Tenant, run: Run, by: Initiator) -> Run:
    """Cancel now if nothing executes it (queued, awaiting approval); otherwise flag it and
    the executing loop stops at its next check (between steps and during streaming).
    What it produced stays: the text so far is the turn's answer (agents.runs.engine.
    finalize, or here for a parked run), and the conversation's next queued turn starts.
    `by` must be the run's starter or an admin (PermissionDenied); None is the platform."""
    if run.tenant_id != tenant.pk:
        raise Http404("No such run.")
    if by is not None:
        access.require_cancel(Principal.for_initiator(tenant, by), run)
    if run.is_terminal:
        return run
    request_cancel(run)
    with transaction.atomic():  # the status and its event: one commit, then the publish
        stopped = Run.objects.filter(
            pk=run.pk, status__in=[RunStatus.QUEUED, RunStatus.AWAITING_APPROVAL]
        ).update(status=RunStatus.CANCELLED, finished_at=timezone.now(), error="cancelled")
        if stopped:
            run.refresh_from_db()
            append_event(run, next_seq(run.pk), "run.cancelled", {"status": "cancelled"})
            if run.conversation_id is not None and run.parent_id is None:
                if run.output:  # a parked run's answer so far
                    record_answer(run, run.output)
                turn_ended(run)
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


def runs_wake_for_account(*, tenant_id: int, user_id: int, connection_id: int) -> list[int]:
    """The person's runs parked on a call that needed their account at that MCP server
    (an `account.connect_required` event) go on, now that they connected it: queued again,
    the call made with their token. Runs also waiting for an approval stay parked. Two
    statements."""
    with rls.tenant_scope(tenant_id):
        waiting = (
            Run.objects.filter(
                tenant_id=tenant_id, initiated_by_user_id=user_id,
                status=RunStatus.AWAITING_APPROVAL, events__type=CONNECT_EVENT,
                events__payload__connection_id=connection_id,
            )
            .exclude(approvals__status=ApprovalStatus.PENDING)
            .values_list("pk", flat=True).distinct()
        )  # fmt: skip
        ids = list(waiting)
        if ids:
            Run.objects.filter(pk__in=ids, status=RunStatus.AWAITING_APPROVAL).update(
                status=RunStatus.QUEUED, queued_at=Now()
            )
    for run_id in ids:
        request_execution(run_id, tenant_id)
    return ids


@receiver(account_connected)
def _account_connected(sender, tenant_id: int, user_id: int, connection_id: int, **kwargs) -> None:
    runs_wake_for_account(tenant_id=tenant_id, user_id=user_id, connection_id=connection_id)
