"""Evaluation pages (agents.evaluations; docs/evaluations.md): datasets and their cases
(read: viewers; change: admins), evaluations started from a dataset or the list, an
evaluation's results (refreshed while it runs), two evaluations side by side, and the thumbs
under a chat answer (feedback, and adding the exchange to a dataset)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST

from agentplatform.web.activity.visibility import visible_run
from agents import access, selectors
from agents.evaluations import (
    case_delete,
    case_from_run,
    case_save,
    dataset_delete,
    dataset_get,
    dataset_save,
    evaluation_cancel,
    evaluation_compare,
    evaluation_start,
    feedback_record,
    visible_evaluation,
    visible_evaluations,
)
from agents.models import Agent, Case, Dataset, EvaluationStatus
from agents.runtime.spec import RunStatus
from providers.selectors import connection_of, connections_of
from tenancy.policy import Action
from tenancy.request_budgets import budget_refusal
from tenancy.resolution import tenant_member_required

KIND_LABELS = [
    ("contains", "Contains the text"),
    ("exact", "Exactly (JSON or text)"),
    ("regex", "Matches the regular expression (RE2)"),
    ("schema", "Matches the JSON Schema"),
    ("judge", "A judge model decides, by this rubric"),
    ("succeeds", "Just succeeds"),
]


def _page(request: HttpRequest, template: str, context: dict[str, Any], status: int = 200):
    response = render(
        request, template, {"tenant_slug": request.tenant.slug, **context}, status=status
    )
    patch_vary_headers(response, ["HX-Request"])
    return response


def _errors(exc: ValidationError) -> str:
    return " ".join(exc.messages)


def _url(request: HttpRequest, name: str, **kwargs) -> str:
    return reverse(f"activity:{name}", kwargs={"tenant_slug": request.tenant.slug, **kwargs})


def expect_from_form(kind: str, value: str) -> Any:
    """What the case form's kind and text mean as an expectation (checked by the service)."""
    if kind == "succeeds":
        return {"succeeds": True}
    if kind in ("exact", "schema"):
        try:
            return {kind: json.loads(value)}
        except ValueError:
            if kind == "schema":
                raise ValidationError({"expect": "schema: give a JSON Schema (JSON)."}) from None
            return {kind: value}
    return {kind: value}


def expect_for_form(expect: dict[str, Any]) -> tuple[str, str]:
    [(kind, value)] = expect.items()
    if kind == "succeeds":
        return kind, ""
    if isinstance(value, str):
        return kind, value
    return kind, json.dumps(value, indent=2, ensure_ascii=False)


# -- datasets -------------------------------------------------------------------------------
@tenant_member_required(Action.READ_CONFIG)
@require_GET
def dataset_list(request: HttpRequest) -> HttpResponse:
    datasets = selectors.datasets_of(tenant=request.tenant)
    return _page(request, "web/activity/datasets.html", {"datasets": datasets})


@tenant_member_required(Action.CHANGE_CONFIG)
@require_POST
def dataset_create(request: HttpRequest) -> HttpResponse:
    try:
        dataset = dataset_save(
            tenant=request.tenant,
            changes={
                "name": request.POST.get("name", ""),
                "description": request.POST.get("description", ""),
            },
        )
    except ValidationError as exc:
        datasets = selectors.datasets_of(tenant=request.tenant)
        context = {"datasets": datasets, "error": _errors(exc), "posted": request.POST}
        return _page(request, "web/activity/datasets.html", context, status=400)
    return redirect(_url(request, "dataset", dataset_id=dataset.pk))


def _dataset(request: HttpRequest, dataset_id: int) -> Dataset:
    return selectors.dataset_with_judge(tenant=request.tenant, dataset_id=dataset_id)


def _dataset_context(request: HttpRequest, dataset: Dataset, **extra: Any) -> dict[str, Any]:
    cases = list(selectors.dataset_cases(dataset=dataset))
    for case in cases:
        case.kind, case.value = expect_for_form(case.expect)
    return {
        "dataset": dataset,
        "cases": cases,
        "kinds": KIND_LABELS,
        "connections": connections_of(tenant=request.tenant),
        "agents": access.usable(Agent, request.principal),
        "evaluations": selectors.dataset_evaluations(
            principal=request.principal, dataset_id=dataset.pk
        ),
        "may_change": request.principal.may(Action.CHANGE_CONFIG),
        "may_start": request.principal.may(Action.START_RUN),
        **extra,
    }


@tenant_member_required(Action.READ_CONFIG)
@require_GET
def dataset_detail(request: HttpRequest, dataset_id: int) -> HttpResponse:
    dataset = _dataset(request, dataset_id)
    return _page(request, "web/activity/dataset.html", _dataset_context(request, dataset))


@tenant_member_required(Action.CHANGE_CONFIG)
@require_POST
def dataset_edit(request: HttpRequest, dataset_id: int) -> HttpResponse:
    dataset = _dataset(request, dataset_id)
    connection_id = request.POST.get("judge_connection", "")
    connection = None
    if connection_id:
        connection = connection_of(
            tenant=request.tenant, connection_id=connection_id if connection_id.isdigit() else 0
        )
    changes = {
        "description": request.POST.get("description", ""),
        "judge_model": request.POST.get("judge_model", ""),
        "judge_connection": connection,
    }
    try:
        if connection_id and connection is None:
            raise ValidationError({"judge_connection": "Choose one of this tenant's connections."})
        dataset_save(tenant=request.tenant, dataset=dataset, changes=changes)
    except ValidationError as exc:
        context = _dataset_context(request, dataset, settings_error=_errors(exc))
        return _page(request, "web/activity/dataset.html", context, status=400)
    messages.success(request, f"Saved dataset “{dataset.name}”.")
    return redirect(_url(request, "dataset", dataset_id=dataset.pk))


@tenant_member_required(Action.CHANGE_CONFIG)
@require_POST
def dataset_remove(request: HttpRequest, dataset_id: int) -> HttpResponse:
    dataset = _dataset(request, dataset_id)
    dataset_delete(tenant=request.tenant, dataset=dataset)
    messages.success(request, f"Deleted dataset “{dataset.name}”.")
    return redirect(_url(request, "datasets"))


def _case_changes(request: HttpRequest) -> dict[str, Any]:
    kind = request.POST.get("kind", "contains")
    return {
        "name": request.POST.get("name", ""),
        "input": request.POST.get("input", ""),
        "expect": expect_from_form(kind, request.POST.get("value", "")),
    }


@tenant_member_required(Action.CHANGE_CONFIG)
@require_POST
def case_create(request: HttpRequest, dataset_id: int) -> HttpResponse:
    dataset = _dataset(request, dataset_id)
    try:
        case_save(tenant=request.tenant, dataset=dataset, changes=_case_changes(request))
    except ValidationError as exc:
        context = _dataset_context(request, dataset, case_error=_errors(exc), posted=request.POST)
        return _page(request, "web/activity/dataset.html", context, status=400)
    messages.success(request, "Added a case.")
    return redirect(_url(request, "dataset", dataset_id=dataset.pk))


def _case(request: HttpRequest, dataset: Dataset, case_id: int) -> Case:
    return selectors.case_get(tenant=request.tenant, dataset=dataset, case_id=case_id)


@tenant_member_required(Action.CHANGE_CONFIG)
def case_edit(request: HttpRequest, dataset_id: int, case_id: int) -> HttpResponse:
    dataset = _dataset(request, dataset_id)
    case = _case(request, dataset, case_id)
    error = ""
    if request.method == "POST":
        try:
            case_save(
                tenant=request.tenant, dataset=dataset, case=case, changes=_case_changes(request)
            )
        except ValidationError as exc:
            error = _errors(exc)
        else:
            messages.success(request, "Saved the case.")
            return redirect(_url(request, "dataset", dataset_id=dataset.pk))
    case.kind, case.value = expect_for_form(case.expect)
    context = {"dataset": dataset, "case": case, "kinds": KIND_LABELS, "error": error}
    return _page(request, "web/activity/case_form.html", context, status=400 if error else 200)


@tenant_member_required(Action.CHANGE_CONFIG)
@require_POST
def case_remove(request: HttpRequest, dataset_id: int, case_id: int) -> HttpResponse:
    dataset = _dataset(request, dataset_id)
    case_delete(tenant=request.tenant, case=_case(request, dataset, case_id))
    messages.success(request, "Deleted the case.")
    return redirect(_url(request, "dataset", dataset_id=dataset.pk))


# -- evaluations ----------------------------------------------------------------------------
@tenant_member_required(Action.READ_RUN)
@require_GET
def evaluation_list(request: HttpRequest) -> HttpResponse:
    context = {
        "evaluations": visible_evaluations(request.principal)[:100],
        "datasets": selectors.datasets_of(tenant=request.tenant),
        "agents": access.usable(Agent, request.principal),
        "may_start": request.principal.may(Action.START_RUN),
    }
    return _page(request, "web/activity/evaluations.html", context)


@tenant_member_required(Action.START_RUN)
@require_POST
def evaluation_create(request: HttpRequest) -> HttpResponse:
    def number(name: str) -> int:
        value = request.POST.get(name, "")
        return int(value) if value.isascii() and value.isdigit() and len(value) < 19 else 0

    dataset = dataset_get(tenant=request.tenant, name_or_id=number("dataset"))
    agent = selectors.agent_usable(principal=request.principal, slug=request.POST.get("agent", ""))
    if (refusal := budget_refusal(request.principal)) is not None:
        messages.error(request, refusal)
        return redirect(_url(request, "dataset", dataset_id=dataset.pk))
    try:
        evaluation = evaluation_start(
            tenant=request.tenant, dataset=dataset, agent=agent, by=request.user
        )
    except ValidationError as exc:
        messages.error(request, _errors(exc))
        return redirect(_url(request, "dataset", dataset_id=dataset.pk))
    return redirect(_url(request, "evaluation", evaluation_id=evaluation.pk))


@tenant_member_required(Action.READ_RUN)
@require_GET
def evaluation_detail(request: HttpRequest, evaluation_id: int) -> HttpResponse:
    evaluation = visible_evaluation(request.principal, evaluation_id)
    others = selectors.dataset_evaluations(
        principal=request.principal, dataset_id=evaluation.dataset_id, but=evaluation.pk
    )
    context = {
        "evaluation": evaluation,
        "results": selectors.evaluation_results(evaluation=evaluation),
        "running": evaluation.status == EvaluationStatus.RUNNING,
        "others": others,
    }
    if request.htmx:
        return _page(request, "web/activity/evaluation.html#results", context)
    return _page(request, "web/activity/evaluation.html", context)


@tenant_member_required(Action.CANCEL_RUN)
@require_POST
def evaluation_stop(request: HttpRequest, evaluation_id: int) -> HttpResponse:
    evaluation = visible_evaluation(request.principal, evaluation_id)
    evaluation_cancel(tenant=request.tenant, evaluation=evaluation, by=request.principal)
    messages.success(request, "Stopped: no further case starts.")
    return redirect(_url(request, "evaluation", evaluation_id=evaluation.pk))


@tenant_member_required(Action.READ_RUN)
@require_GET
def evaluation_compare_page(request: HttpRequest, evaluation_id: int) -> HttpResponse:
    left = visible_evaluation(request.principal, evaluation_id)
    other = request.GET.get("with", "")
    right = visible_evaluation(request.principal, other)
    try:
        rows = evaluation_compare(left, right)
    except ValidationError as exc:
        context = {"left": left, "right": right, "rows": [], "error": _errors(exc)}
        return _page(request, "web/activity/compare.html", context, status=400)
    context = {"left": left, "right": right, "rows": rows, "changed": sum(r.changed for r in rows)}
    return _page(request, "web/activity/compare.html", context)


# -- feedback under a chat answer ------------------------------------------------------------
def _feedback_context(request: HttpRequest, run, **extra: Any) -> dict[str, Any]:
    mine = selectors.feedback_given(run=run, user=request.user)
    may_add = request.principal.may(Action.WRITE_DATA) and run.status == RunStatus.SUCCEEDED
    return {
        "run": run,
        "feedback": mine,
        "datasets": selectors.datasets_of(tenant=request.tenant) if may_add else [],
        **extra,
    }


def _feedback_answer(request: HttpRequest, context: dict[str, Any], status: int = 200):
    if request.htmx:
        return _page(request, "web/activity/_feedback.html", context, status=status)
    return _page(request, "web/activity/feedback.html", context, status=status)


@tenant_member_required(Action.VERIFY_RUN)
def run_feedback(request: HttpRequest, run_id: int) -> HttpResponse:
    """GET: the thumbs block (the chat loads it under each answer); POST: a rating."""
    run = visible_run(request, run_id)
    if request.method != "POST":
        return _feedback_answer(request, _feedback_context(request, run))
    try:
        feedback_record(
            tenant=request.tenant,
            run=run,
            by=request.user,
            rating=request.POST.get("rating", ""),
            note=request.POST.get("note", ""),
        )
    except ValidationError as exc:
        context = _feedback_context(request, run, feedback_error=_errors(exc))
        return _feedback_answer(request, context, status=400)
    except PermissionDenied as exc:
        context = _feedback_context(request, run, feedback_error=str(exc))
        return _feedback_answer(request, context, status=403)
    return _feedback_answer(
        request, _feedback_context(request, run, saved="Thanks for the feedback.")
    )


@tenant_member_required(Action.WRITE_DATA)
@require_POST
def run_to_dataset(request: HttpRequest, run_id: int) -> HttpResponse:
    """The exchange (input, and the answer expected) as a new case of a chosen dataset."""
    run = visible_run(request, run_id)
    value = request.POST.get("dataset", "")
    pk = int(value) if value.isascii() and value.isdigit() and len(value) < 19 else 0
    try:
        dataset = dataset_get(tenant=request.tenant, name_or_id=pk)
    except Http404:
        context = _feedback_context(request, run, feedback_error="Choose one of the datasets.")
        return _feedback_answer(request, context, status=400)
    try:
        case = case_from_run(
            tenant=request.tenant,
            run=run,
            dataset=dataset,
            by=request.user,
            match=request.POST.get("match", "contains"),
        )
    except ValidationError as exc:
        context = _feedback_context(request, run, feedback_error=_errors(exc))
        return _feedback_answer(request, context, status=400)
    except PermissionDenied as exc:
        context = _feedback_context(request, run, feedback_error=str(exc))
        return _feedback_answer(request, context, status=403)
    edit = _url(request, "case_edit", dataset_id=dataset.pk, case_id=case.pk)
    context = _feedback_context(
        request, run, saved=f"Added to dataset “{dataset.name}”.", case_url=edit
    )
    return _feedback_answer(request, context)
