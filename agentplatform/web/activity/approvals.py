"""The approvals inbox: pending calls of the runs the user sees, decided inline (htmx swaps
the card in place; without JavaScript the form posts and redirects back), and the recently
decided ones. Deciding needs the member role; viewers get 403."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from agentplatform.web.activity.timeline import as_text
from agentplatform.web.activity.visibility import visible_approval, with_authority
from agentplatform.web.edited_arguments import edited_arguments
from agents.models import Approval
from agents.runs import approval_decide, request_text
from agents.selectors import approvals_decided, approvals_pending, approvals_pending_count
from tenancy.policy import Action
from tenancy.resolution import tenant_member_required

RECENT = 20
MAX_PENDING = 100


def _with_text(request: HttpRequest, approvals: list[Approval]) -> list[Approval]:
    for approval in approvals:
        with_authority(request, approval)
        approval.arguments_text = as_text(approval.arguments)
        approval.edited_text = as_text(approval.edited_arguments)
        approval.request_text = request_text(approval.prepared_request)
    return approvals


@tenant_member_required(Action.READ_RUN)
def inbox(request: HttpRequest) -> HttpResponse:
    """Two queries: the pending calls (oldest first, at most MAX_PENDING) and the
    RECENT most recently decided."""
    principal = request.principal
    context = {
        "pending": _with_text(request, approvals_pending(principal=principal, limit=MAX_PENDING)),
        "decided": _with_text(request, approvals_decided(principal=principal, limit=RECENT)),
    }
    return render(request, "web/activity/approvals.html", context)


@tenant_member_required(Action.DECIDE_APPROVAL)
@require_POST
def decide(request: HttpRequest, approval_id: int) -> HttpResponse:
    """Approve or reject one call. htmx gets the card back (decided, or with the reason it
    could not be); a plain form post is redirected to `next` (the inbox or the run)."""
    approval = visible_approval(request, approval_id)
    decision = request.POST.get("decision")
    error = ""
    if decision not in {"approve", "reject"}:
        error = "Choose approve or reject."
    else:
        try:
            arguments = None
            if decision == "approve":
                arguments = edited_arguments(request.POST.get("arguments"), approval)
            approval = approval_decide(
                tenant=request.tenant,
                approval=approval,
                approved=decision == "approve",
                by=request.user,
                reason=request.POST.get("reason", "").strip(),
                arguments=arguments,
            )
        except PermissionDenied as exc:  # the agent's approval authority is someone else's
            error = str(exc)
        except ValidationError as exc:
            error = " ".join(exc.messages)
            approval.refresh_from_db()
    if not request.htmx:
        return redirect(_next_url(request))
    in_run = request.POST.get("in_run") == "1"  # the card sits in the run's timeline
    context = {
        "approval": _with_text(request, [approval])[0],
        "error": error,
        "just_decided": not error,
        "in_run": in_run,
        # the inbox's heading count, swapped out of band
        "pending_count": None if in_run else approvals_pending_count(principal=request.principal),
    }
    response = render(request, "web/activity/_approval.html", context)
    if approval.replaced_by_id is not None:  # asked again: the new card follows the old one
        again = {**context, "approval": _with_text(request, [approval.replaced_by])[0]}
        again.update(just_decided=False, pending_count=None)
        response.content += render(request, "web/activity/_approval.html", again).content
    return response


def _next_url(request: HttpRequest) -> str:
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return target
    return reverse("activity:approvals", kwargs={"tenant_slug": request.tenant.slug})
