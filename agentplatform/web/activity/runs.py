"""The runs list (filterable, paginated, newest first; top-level runs only) and a run's
page with its timeline. One URL serves the full page or, for htmx, the results partial."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Any

from django import forms
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers

from agentplatform.web.activity.timeline import as_text, run_timeline
from agentplatform.web.activity.verification import with_verdict
from agentplatform.web.activity.visibility import visible_run, with_authority
from agents import conversations
from agents.models import Agent, Run
from agents.runs import may_resume
from agents.runtime.spec import RunStatus
from agents.selectors import agents_by_name, child_runs, top_level_runs
from tenancy.policy import Action
from tenancy.records import history
from tenancy.resolution import tenant_member_required

PAGE_SIZE = 25


class RunFilterForm(forms.Form):
    agent = forms.ModelChoiceField(queryset=Agent.objects.none(), required=False, empty_label="All")
    status = forms.ChoiceField(required=False)
    since = forms.DateField(
        required=False, label="From", widget=forms.DateInput(attrs={"type": "date"})
    )
    until = forms.DateField(
        required=False, label="To", widget=forms.DateInput(attrs={"type": "date"})
    )

    def __init__(self, *args, tenant, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["agent"].queryset = agents_by_name(tenant=tenant)
        self.fields["agent"].to_field_name = "slug"
        self.fields["status"].choices = [("", "All")] + [
            (s.value, s.value.replace("_", " ")) for s in RunStatus
        ]

    def clean(self) -> dict:
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            raise forms.ValidationError("“From” must not be after “To”.")
        return data

    def filters(self) -> dict[str, Any]:
        """The valid fields as top_level_runs' filters; an invalid form filters by nothing."""
        if not self.is_valid():
            return {}
        data = self.cleaned_data
        zone = timezone.get_current_timezone()
        since, until = data.get("since"), data.get("until")
        return {
            "agent": data.get("agent") or None,
            "status": data.get("status") or None,
            "created_from": datetime.combine(since, time(), zone) if since else None,
            "created_before": (
                datetime.combine(until + timedelta(days=1), time(), zone) if until else None
            ),
        }


def duration_s(run: Run) -> float | None:
    """Seconds from started_at to finished_at; None while either is missing."""
    if run.started_at is None or run.finished_at is None:
        return None
    return (run.finished_at - run.started_at).total_seconds()


@tenant_member_required(Action.READ_RUN)
def run_list(request: HttpRequest) -> HttpResponse:
    """Top-level runs the user may see (see visibility.py); children appear in their
    run's page. Two queries per page (count, rows)."""
    form = RunFilterForm(request.GET or None, tenant=request.tenant)
    runs = top_level_runs(principal=request.principal, **form.filters())
    page = Paginator(runs, PAGE_SIZE).get_page(request.GET.get("page"))
    page.object_list = list(page.object_list)
    for row in page.object_list:
        row.duration_s = duration_s(row)
    query = request.GET.copy()
    query.pop("page", None)
    context = {"form": form, "page": page, "query": query.urlencode()}
    template = "web/activity/runs.html"
    if request.htmx and not request.htmx.boosted:
        template += "#results"
    response = render(request, template, context)
    patch_vary_headers(response, ["HX-Request"])
    return response


@tenant_member_required(Action.READ_RUN)
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    return run_page(request, visible_run(request, run_id))


def run_page(
    request: HttpRequest, run: Run, *, status: int = 200, resume_error: str = ""
) -> HttpResponse:
    """The run's page: its facts, outcome, child runs and timeline; a Resume button when it
    failed and the viewer may resume it (agents.runs.resume), or why a resume was refused."""
    entries, truncated = run_timeline(run)
    for entry in entries:
        if entry.approval is not None:
            with_authority(request, entry.approval)
    children = child_runs(principal=request.principal, run=run)
    run.duration_s = duration_s(run)
    with_verdict(request.principal, run)
    context = {
        "tenant_slug": request.tenant.slug,
        "run": run,
        "entries": entries,
        "truncated": truncated,
        "children": children,
        "structured_output": as_text(run.structured_output),
        "config_versions": config_version_links(request, run),
        "attachments": conversations.run_attachment_list(run),  # what it was given
        "may_resume": may_resume(request.principal, run),
        "resume_error": resume_error,
        # the skills it was given, as name@version (its early `run.skills` event)
        "skills": next((e.payload.get("skills") for e in entries if e.type == "run.skills"), []),
    }
    return render(request, "web/activity/run_detail.html", context, status=status)


def config_version_links(request: HttpRequest, run) -> list[dict]:
    """The configuration versions the run used, with a link to each where the viewer may
    see configuration history (owners and admins). One query."""
    linked = request.principal.may(Action.CHANGE_CONFIG)
    links = []
    for version in history.versions_used(run.tenant_id, run.config_versions):
        kind = history.kind_of(version.object_type)
        url = None
        if linked and kind is not None:
            url = reverse(
                "config:history_version",
                kwargs={
                    "tenant_slug": request.tenant.slug,
                    "kind": kind.name,
                    "pk": int(version.object_id),
                    "number": version.number,
                },
            )
        noun = kind.noun if kind else version.object_type
        links.append({"label": f"{noun} {version.object_repr} v{version.number}", "url": url})
    return links
