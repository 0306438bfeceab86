"""A person's verdict on a run's outcome claim (agents.verification), from the run page or
the chat: htmx gets the verdict block back (with the reason when it could not be recorded);
a plain form post is redirected to `next` (the page it came from) or the run."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from agentplatform.web.activity.visibility import visible_run
from agents import access
from agents.models import Run
from agents.selectors import run_verifications
from agents.verification import verify
from tenancy.policy import Action, Principal
from tenancy.resolution import tenant_member_required


def with_verdict(principal: Principal, run: Run) -> Run:
    """The run, marked for its verdict block (_verdict.html): its latest verification and
    whether `principal` may give one. One query unless its verifications were prefetched."""
    verifications = run_verifications(run)
    run.latest_verification = verifications[-1] if verifications else None
    run.may_verify = run.claim is not None and access.may_verify(principal, run)
    return run


@tenant_member_required(Action.VERIFY_RUN)
@require_POST
def verify_run(request: HttpRequest, run_id: int) -> HttpResponse:
    run = visible_run(request, run_id)
    error, status = "", 200
    try:
        verify(
            tenant=request.tenant,
            run=run,
            verdict=request.POST.get("verdict", ""),
            note=request.POST.get("note", ""),
            by=request.user,
        )
    except ValidationError as exc:
        error, status = " ".join(exc.messages), 400
    except PermissionDenied as exc:
        error, status = str(exc), 403
    if request.htmx:
        run = with_verdict(request.principal, run)
        context = {"run": run, "verdict_error": error, "tenant_slug": request.tenant.slug}
        return render(request, "web/activity/_verdict.html", context, status=status)
    if status == 403:
        raise PermissionDenied(error)
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        target = reverse(
            "activity:run", kwargs={"tenant_slug": request.tenant.slug, "run_id": run.pk}
        )
    return redirect(target)
