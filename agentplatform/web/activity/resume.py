"""A failed run resumed from its page (agents.runs.resume): its starter or an admin presses
Resume; the page comes back with the run queued and its timeline going on. A refusal (the
run no longer failed, a crew's run, a conversation that went on) is the page again with
the reason, 409 (429 past the member's request budget); a principal who may not resume it
gets 403."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from agentplatform.web.activity.runs import run_page
from agentplatform.web.activity.visibility import visible_run
from agents.runs import RunNotResumable, run_resume
from tenancy.policy import Action
from tenancy.request_budgets import budget_refusal
from tenancy.resolution import tenant_member_required


@tenant_member_required(Action.RESUME_RUN)
@require_POST
def resume_run(request: HttpRequest, run_id: int) -> HttpResponse:
    run = visible_run(request, run_id)
    if (refusal := budget_refusal(request.principal)) is not None:
        return run_page(request, run, status=429, resume_error=refusal)
    try:
        run_resume(tenant=request.tenant, run=run, by=request.user)
    except RunNotResumable as exc:
        return run_page(request, run, status=409, resume_error=" ".join(exc.messages))
    return redirect("activity:run", tenant_slug=request.tenant.slug, run_id=run.pk)
