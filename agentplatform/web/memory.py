"""A person's memory page, `/t/<tenant>/memory/`: what agents remember about them in the
workspace (their person-scope facts, agents.memory), each with the agent and run that
wrote it and when it expires; they edit its text (embedded again) or delete it. Another
person's fact answers 404, whoever asks; shared facts are the admins' (REST, the admin)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from agents import memory
from tenancy.policy import Action
from tenancy.resolution import tenant_member_required


def _page(
    request: HttpRequest, *, editing: int | None = None, error: str = "", status: int = 200
) -> HttpResponse:
    context = {
        "facts": memory.facts_about(tenant=request.tenant, user=request.user),
        "may_write": request.principal.may(Action.WRITE_DATA),
        "editing": editing,
        "error": error,
        "tenant_slug": request.tenant.slug,
    }
    return render(request, "web/memory.html", context, status=status)


@tenant_member_required(Action.READ_DATA)
def memory_page(request: HttpRequest) -> HttpResponse:
    return _page(request)


@tenant_member_required(Action.WRITE_DATA)
@require_POST
def fact_edit(request: HttpRequest, fact_id: int) -> HttpResponse:
    fact = memory.fact_about(tenant=request.tenant, user=request.user, fact_id=fact_id)
    try:
        memory.fact_edit(principal=request.principal, fact=fact, text=request.POST.get("text"))
    except ValidationError as error:
        return _page(request, editing=fact.pk, error=" ".join(error.messages), status=400)
    messages.success(request, "The fact is changed.")
    return redirect("memory", tenant_slug=request.tenant.slug)


@tenant_member_required(Action.WRITE_DATA)
@require_POST
def fact_delete(request: HttpRequest, fact_id: int) -> HttpResponse:
    fact = memory.fact_about(tenant=request.tenant, user=request.user, fact_id=fact_id)
    memory.fact_delete(principal=request.principal, fact=fact)
    messages.success(request, "The fact is forgotten: no agent will recall it.")
    return redirect("memory", tenant_slug=request.tenant.slug)
