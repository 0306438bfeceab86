"""Crews: list, create and edit (mode, members in order, manager), delete."""

from __future__ import annotations

from copy import copy
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from agentplatform.web.config.agents import DRAFTED, draft_context
from agentplatform.web.config.common import (
    PlainLabels,
    admin_required,
    confirm_delete,
    refusal_shown,
    render_form,
    render_page,
    try_save,
    unique_in_tenant,
)
from agents import selectors
from agents.models import Agent, Crew
from agents.services import crew_delete, crew_save
from providers.selectors import connections_of
from tenancy.models import Tenant


class CrewForm(PlainLabels, forms.ModelForm):
    """The crew's fields, plus one optional position per agent of the tenant: the agents
    with a position are the members, in that order (no script needed to reorder)."""

    class Meta:
        model = Crew
        fields = [
            "name", "slug", "description", "mode", "manager",
            "max_delegations", "max_depth", "token_budget", "active",
            "compaction_threshold", "compaction_connection", "compaction_model",
            "required_evaluation", "pass_threshold",
        ]  # fmt: skip
        widgets = {"description": forms.Textarea(attrs={"rows": 2})}
        help_texts = {
            "manager": "Needed for hierarchical crews: the agent that delegates to the members."
        }
        labels = {
            "compaction_threshold": "Summarise above (tokens)",
            "compaction_connection": "Summarising connection",
            "compaction_model": "Summarising model",
            "required_evaluation": "Publish only changes that pass",
        }

    def __init__(self, *args: Any, tenant: Tenant, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        self.agents = list(selectors.agents_by_name(tenant=tenant))
        self.fields["manager"].queryset = selectors.agents_of(tenant=tenant)
        self.fields["manager"].empty_label = "No manager"
        summarising = self.fields["compaction_connection"]
        summarising.queryset = connections_of(tenant=tenant)
        summarising.empty_label = "The tenant's default connection"
        gate = self.fields["required_evaluation"]
        gate.queryset = selectors.datasets_of(tenant=tenant)
        gate.empty_label = "No evaluation: changes go live at once"
        self.fields["pass_threshold"].required = False  # absent: every case must pass
        current = {}
        if self.instance.pk:
            members = selectors.crew_member_ids(self.instance)
            current = {agent_id: index + 1 for index, agent_id in enumerate(members)}
        for agent in self.agents:
            self.fields[self.position_name(agent)] = forms.IntegerField(
                required=False,
                min_value=1,
                max_value=len(self.agents),
                label=f"{agent.name} ({agent.slug})",
                initial=current.get(agent.pk),
                widget=forms.NumberInput(attrs={"class": "position"}),
            )

    @staticmethod
    def position_name(agent: Agent) -> str:
        return f"position_{agent.pk}"

    def member_fields(self) -> list[forms.BoundField]:
        return [self[self.position_name(agent)] for agent in self.agents]

    def clean_slug(self) -> str:
        return unique_in_tenant(self, "slug", "crew")

    def members(self) -> list[Agent]:
        placed = [
            (self.cleaned_data[self.position_name(agent)], agent.name, agent)
            for agent in self.agents
            if self.cleaned_data.get(self.position_name(agent)) is not None
        ]
        return [agent for _, _, agent in sorted(placed, key=lambda row: row[:2])]

    def clean_pass_threshold(self) -> float:
        value = self.cleaned_data.get("pass_threshold")
        return 1.0 if value is None else value

    def changes(self) -> dict[str, Any]:
        return {name: self.cleaned_data[name] for name in self.Meta.fields}


@admin_required
def crew_list(request: HttpRequest) -> HttpResponse:
    rows = selectors.crews_of(tenant=request.tenant)
    return render_page(request, "web/config/crew_list.html", {"crews": rows})


@admin_required
def crew_create(request: HttpRequest) -> HttpResponse:
    return _crew_form(request, Crew(tenant=request.tenant))


@admin_required
def crew_edit(request: HttpRequest, slug: str) -> HttpResponse:
    return _crew_form(request, selectors.crew_configured(tenant=request.tenant, slug=slug))


def _crew_form(request: HttpRequest, crew: Crew) -> HttpResponse:
    tenant = request.tenant
    existing = crew.pk is not None
    # The form validates a copy: a refused slug must not reach this page's links.
    form = CrewForm(request.POST or None, instance=copy(crew), tenant=tenant)
    save = lambda: crew_save(  # noqa: E731
        tenant=tenant,
        crew=crew if existing else None,
        changes=form.changes(),
        members=form.members(),
        by=request.principal,
    )
    if saved := try_save(request, form, refusal_shown(save), "crew"):
        if getattr(saved, "pending_draft", None) is not None:  # gated: back to its draft
            messages.info(request, DRAFTED)
            return redirect("config:crew_edit", tenant_slug=tenant.slug, slug=saved.slug)
        return redirect("config:crews", tenant_slug=tenant.slug)
    context = {"form": form, "crew": crew if existing else None}
    if existing and crew.required_evaluation_id is not None:
        context.update(draft_context(request, crew))
    return render_form(request, "web/config/crew_form.html", context)


@admin_required
def crew_remove(request: HttpRequest, slug: str) -> HttpResponse:
    crew = selectors.crew_configured(tenant=request.tenant, slug=slug)
    return confirm_delete(
        request, crew, what="crew", cancel="config:crews",
        delete=lambda: crew_delete(tenant=request.tenant, crew=crew),
    )  # fmt: skip
