"""Agents: list, create and edit (with the live effective tool list), delete."""

from __future__ import annotations

import json
from copy import copy
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_POST

import agents.runtime.remote  # noqa: F401 (registers the remote kind the form offers)
from agentplatform.web.config.common import (
    JsonTextarea,
    PlainLabels,
    PrettyJSONField,
    SecretField,
    StoredSecretForm,
    admin_required,
    confirm_delete,
    refusal_shown,
    render_form,
    render_page,
    try_save,
    unique_in_tenant,
)
from agents import publishing, selectors, skills
from agents.fallback_forms import FallbacksField
from agents.models import Agent, ApprovalDeciders, Crew, MemoryScope
from agents.runtime.code_mode import limits_text
from agents.runtime.kinds import KINDS
from agents.services import agent_delete, agent_save
from agents.specs import code_limits
from agents.tool_sources import agent_context_providers, effective_tools
from providers.selectors import connections_of
from tenancy.models import Tenant
from tenancy.policy import Action
from tenancy.selectors import groups_of
from tools.loader import tenant_tools
from tools.runtime.registry import ToolRegistry
from tools.runtime.validation import SchemaError, check_schema

FORM = "web/config/agent_form.html"
TOOL_FIELDS = ("use_all_tools", "tool_names", "tool_tags", "tool_exclude")


class AgentForm(StoredSecretForm, PlainLabels, forms.ModelForm):
    write_only_field = "remote_token"

    tool_names = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, label="Tools by name"
    )
    tool_tags = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Tools by tag",
        help_text="Every tool carrying one of these tags.",
    )
    tool_exclude = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Never these tools",
        help_text="Removed even when picked by name, by tag or by “use all tools”.",
    )
    kind = forms.ChoiceField(help_text="How the agent thinks: orchestrator is the tool loop.")
    remote_url = forms.URLField(
        required=False,
        assume_scheme="https",
        label="Remote agent URL",
        help_text="For the remote kind: its agent server.",
    )
    remote_command = forms.ChoiceField(
        required=False,
        label="Or a remote agent command",
        help_text="For the remote kind, instead of a URL: a command the operator allow-lists, "
        "spoken to in JSON lines.",
    )
    output_schema = PrettyJSONField(
        required=False,
        widget=JsonTextarea(),
        label="Output schema",
        help_text="Optional JSON Schema (an object): the agent answers with matching JSON.",
    )
    remote_token = SecretField(
        label="Remote agent token",
        help_text="Write-only: never shown again. Leave blank to keep the stored token.",
    )
    clear_remote_token = forms.BooleanField(required=False, label="Remove the stored token")
    fallbacks = FallbacksField()
    skills = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Skills",
        help_text="Approved skills (Config → Skills): a version, or “latest”, which follows "
        "each newly approved version (with a required evaluation: the latest now, as a "
        "draft). One per skill.",
    )

    class Meta:
        model = Agent
        fields = [
            "name", "slug", "description", "instructions", "active",
            "provider_connection", "model", "fallbacks", "load_balancing", "temperature",
            "compaction_threshold", "compaction_connection", "compaction_model",
            "kind", "remote_url", "remote_command",
            "use_all_tools", "tool_names", "tool_tags", "tool_exclude",
            "approval_policy", "approval_deciders", "approval_group", "approval_not_starter",
            "memory", "memory_scope", "memory_retention_days", "memory_key_runs",
            "results_without_tools", "code_mode", "verifier_tool", "output_schema",
            "max_rounds", "max_tool_calls", "max_tokens_per_run",
            "required_evaluation", "pass_threshold",
        ]  # fmt: skip
        widgets = {
            "description": forms.Textarea(attrs={"rows": 2}),
            "instructions": forms.Textarea(attrs={"rows": 6}),
        }
        help_texts = {"slug": "Lowercase letters, digits, _ and -; used in URLs and the API."}
        labels = {
            "compaction_threshold": "Summarise above (tokens)",
            "compaction_connection": "Summarising connection",
            "compaction_model": "Summarising model",
            "approval_deciders": "Who decides its approvals",
            "approval_not_starter": "Never the run's starter",
            "required_evaluation": "Publish only changes that pass",
            "memory_scope": "Whose memory",
            "memory_retention_days": "Forget facts after (days)",
            "memory_key_runs": "Memory for API-key runs",
        }

    def __init__(self, *args: Any, tenant: Tenant, registry: ToolRegistry, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        connections = self.fields["provider_connection"]
        connections.queryset = connections_of(tenant=tenant)
        connections.empty_label = "The tenant's default connection"
        self.fields["fallbacks"].connection_names = [c.name for c in connections.queryset]
        summarising = self.fields["compaction_connection"]
        summarising.queryset = connections.queryset
        summarising.empty_label = "The agent's own connection"
        self.fields["approval_deciders"].required = False  # absent: the default
        self.fields["memory_scope"].required = False  # absent: each person's own
        groups = self.fields["approval_group"]
        groups.queryset = groups_of(tenant=tenant)
        groups.empty_label = "No group"
        gate = self.fields["required_evaluation"]
        gate.queryset = selectors.datasets_of(tenant=tenant)
        gate.empty_label = "No evaluation: changes go live at once"
        self.fields["pass_threshold"].required = False  # absent: every case must pass
        self.fields["kind"].choices = [(name, name) for name in sorted(KINDS)]
        stored = self.instance
        names = sorted({*registry.names(), *stored.tool_names, *stored.tool_exclude})
        tags = sorted({tag for item in registry for tag in item.tags} | set(stored.tool_tags))
        self.fields["tool_names"].choices = [(n, n) for n in names]
        self.fields["tool_exclude"].choices = [(n, n) for n in names]
        self.fields["tool_tags"].choices = [(t, t) for t in tags]
        pinned = skills.agent_pin_labels(stored) if stored.pk else []
        offered = [*skills.skill_pin_choices(tenant), *pinned]
        self.fields["skills"].choices = [(c, c) for c in dict.fromkeys(offered)]
        self.fields["skills"].initial = pinned
        commands = sorted(settings.REMOTE_AGENT_COMMANDS)
        self.fields["remote_command"].choices = [("", "—"), *((c, c) for c in commands)]
        code_mode = self.fields["code_mode"]  # (the limits are the deployment's settings)
        code_mode.help_text = f"{code_mode.help_text} Each program: {limits_text(code_limits())}."
        self.has_stored_token = bool(stored.pk and stored.remote_token)
        if not self.has_stored_token:
            del self.fields["clear_remote_token"]

    def clean_slug(self) -> str:
        return unique_in_tenant(self, "slug", "agent")

    def clean_approval_deciders(self) -> str:
        return self.cleaned_data.get("approval_deciders") or ApprovalDeciders.STARTER

    def clean_memory_scope(self) -> str:
        return self.cleaned_data.get("memory_scope") or MemoryScope.PERSON

    def clean_pass_threshold(self) -> float:
        value = self.cleaned_data.get("pass_threshold")
        return 1.0 if value is None else value


def tool_preview(tenant: Tenant, data: QueryDict | None, agent: Agent) -> dict[str, Any]:
    """The tools a run of the agent would be offered (`agents.tool_sources.effective_tools`),
    for the picker's values (`data`, unvalidated) or the stored agent."""
    probe = Agent(tenant=tenant, pk=agent.pk, kind=agent.kind)  # its pk: its own tools
    if data is None:
        for name in (*TOOL_FIELDS, "memory", "output_schema"):
            setattr(probe, name, getattr(agent, name))
    else:
        probe.use_all_tools = data.get("use_all_tools") in ("on", "true", "1")
        probe.tool_names = data.getlist("tool_names")
        probe.tool_tags = data.getlist("tool_tags")
        probe.tool_exclude = data.getlist("tool_exclude")
        probe.memory = data.get("memory") in ("on", "true", "1")
        probe.output_schema = _schema_or_none(data.get("output_schema", ""))
        probe.kind = data.get("kind") or agent.kind
    effective = list(effective_tools(probe))
    return {"effective": effective, "providers": agent_context_providers(probe, effective)}


def _schema_or_none(text: str) -> dict | None:
    try:
        schema = json.loads(text) if text.strip() else None
        if schema is not None:
            check_schema(schema, what="output_schema")
    except (ValueError, SchemaError):
        return None  # the form reports it on save; the preview just leaves it out
    return schema


@admin_required
def agent_list(request: HttpRequest) -> HttpResponse:
    rows = selectors.agents_with_connections(tenant=request.tenant)
    return render_page(request, "web/config/agent_list.html", {"agents": rows})


@admin_required
def agent_create(request: HttpRequest) -> HttpResponse:
    return _agent_form(request, Agent(tenant=request.tenant))


@admin_required
def agent_edit(request: HttpRequest, slug: str) -> HttpResponse:
    return _agent_form(request, selectors.agent_configured(tenant=request.tenant, slug=slug))


def _agent_form(request: HttpRequest, agent: Agent) -> HttpResponse:
    tenant = request.tenant
    registry = tenant_tools(tenant).registry
    existing = agent.pk is not None
    data = request.POST if request.method == "POST" else None
    # The form validates a copy: a refused slug must not reach this page's links.
    form = AgentForm(data, instance=copy(agent), tenant=tenant, registry=registry)

    def save() -> Agent:
        pins = [skills.parse_pin(label) for label in form.cleaned_data["skills"]]
        return agent_save(
            tenant=tenant, agent=agent if existing else None, changes=form.changes(), pins=pins,
            by=request.principal,
        )  # fmt: skip

    if saved := try_save(request, form, refusal_shown(save), "agent"):
        if getattr(saved, "pending_draft", None) is not None:
            messages.info(request, DRAFTED)
        return redirect("config:agent_edit", tenant_slug=tenant.slug, slug=saved.slug)
    context = {"form": form, "agent": agent if existing else None}
    context.update(tool_preview(tenant, data, agent))
    if existing and agent.required_evaluation_id is not None:
        context.update(draft_context(request, agent))
    return render_form(request, FORM, context)


DRAFTED = (
    "The change is saved as a draft: it goes live when its evaluation passes (see the "
    "draft above the form)."
)


def draft_context(request: HttpRequest, agent: Agent | Crew) -> dict[str, Any]:
    """The agent's (or crew's) pending draft for its banner: what it changes against the
    live one, its score beside the live version's last one, and whether this person may
    override."""
    draft = publishing.pending_draft(agent)
    return {
        "draft": draft,
        "live_score": publishing.live_score(agent) if draft is not None else None,
        "may_override": request.principal.may(Action.OVERRIDE_EVALUATION),
    }


@admin_required
@require_POST
def agent_draft_decide(
    request: HttpRequest, slug: str, draft_id: str, decision: str, crew: bool = False
) -> HttpResponse:
    """Publish (an override, with a reason) or discard the agent's (or crew's) pending
    draft."""
    tenant = request.tenant
    if crew:
        agent = selectors.crew_configured(tenant=tenant, slug=slug)
    else:
        agent = selectors.agent_configured(tenant=tenant, slug=slug)
    draft = publishing.agent_draft_get(tenant=tenant, agent=agent, draft_id=draft_id)
    reason = request.POST.get("reason", "")
    try:
        if decision == "publish":
            publishing.draft_publish(
                tenant=tenant, draft=draft, by=request.principal, reason=reason
            )
            messages.success(request, "The draft is published.")
        else:
            publishing.draft_discard(
                tenant=tenant, draft=draft, by=request.principal, reason=reason
            )
            messages.success(request, "The draft is discarded.")
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    edit = "config:crew_edit" if crew else "config:agent_edit"
    return redirect(edit, tenant_slug=tenant.slug, slug=agent.slug)


@admin_required
@require_POST
def agent_tools(request: HttpRequest) -> HttpResponse:
    """The effective tool list for the picker's current values (htmx, on change); `?agent=`
    names the agent being edited (its knowledge bases give it tools of its own)."""
    slug = request.GET.get("agent")
    agent = (
        selectors.agent_configured(tenant=request.tenant, slug=slug)
        if slug
        else Agent(tenant=request.tenant)
    )
    context = tool_preview(request.tenant, request.POST, agent)
    response = render(request, f"{FORM}#effective-tools", context)
    patch_vary_headers(response, ["HX-Request"])
    return response


@admin_required
def agent_remove(request: HttpRequest, slug: str) -> HttpResponse:
    agent = selectors.agent_configured(tenant=request.tenant, slug=slug)
    return confirm_delete(
        request, agent, what="agent", cancel="config:agents",
        delete=lambda: agent_delete(tenant=request.tenant, agent=agent),
    )  # fmt: skip
