"""Triggers: list, create and edit (schedule or webhook), enable/disable, rotate a
webhook's secret (shown once, on the answer to that POST), delete, and each trigger's page
with its run history (agents.triggers; docs/triggers.md)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from agentplatform.web.config.common import (
    PlainLabels,
    add_service_errors,
    admin_required,
    confirm_delete,
    render_form,
    render_page,
)
from agents import selectors
from agents.models import Trigger, TriggerKind
from agents.runtime.triggers import MAX_CRON_CHARS, MAX_TEMPLATE_CHARS
from agents.triggers import (
    hook_path,
    trigger_delete,
    trigger_get,
    trigger_rotate_secret,
    trigger_runs,
    trigger_save,
    visible_triggers,
)
from tenancy.models import Tenant
from tenancy.policy import Principal
from tenancy.records.saving import SaveConflict
from tenancy.selectors import member_users

HISTORY = 50  # runs shown on a trigger's page


class TriggerForm(PlainLabels, forms.Form):
    name = forms.CharField(max_length=100)
    kind = forms.ChoiceField(choices=TriggerKind.choices, initial=TriggerKind.SCHEDULE)
    target = forms.ChoiceField(label="Agent, crew or workflow")
    cron = forms.CharField(
        max_length=MAX_CRON_CHARS, required=False, label="Cron expression",
        help_text="Schedules: minute hour day month weekday, e.g. “0 9 * * 1-5”.",
    )  # fmt: skip
    timezone = forms.CharField(
        max_length=64, initial="UTC", label="Time zone", help_text="An IANA name: Europe/Berlin."
    )
    input_template = forms.CharField(
        max_length=MAX_TEMPLATE_CHARS, strip=False, label="Input",
        widget=forms.Textarea(attrs={"rows": 4, "class": "code"}),
        help_text="The run's message. Webhooks: {{payload.issue.title}} takes a value from the "
        "JSON body; both kinds: {{trigger.name}}, {{fired_at}}. A workflow's input is this "
        "read as JSON: {{payload}} passes the whole body.",
    )  # fmt: skip
    run_as = forms.ModelChoiceField(
        queryset=get_user_model().objects.none(), label="Runs attributed to",
        help_text="A member who may use the agent, with a role not above yours.",
    )  # fmt: skip
    enabled = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args: Any, tenant: Tenant, trigger: Trigger | None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        agents = selectors.agents_by_name(tenant=tenant)
        crews = selectors.crews_by_name(tenant=tenant)
        workflows = selectors.workflows_by_name(tenant=tenant)
        self.fields["target"].choices = [
            ("Agents", [(f"agent:{a.slug}", a.name) for a in agents]),
            ("Crews", [(f"crew:{c.slug}", c.name) for c in crews]),
            ("Workflows", [(f"workflow:{w.slug}", w.name) for w in workflows]),
        ]
        self.fields["run_as"].queryset = member_users(tenant=tenant)
        self.tenant = tenant
        if trigger is not None:
            self.fields["kind"].disabled = True  # a trigger keeps its kind
            target = trigger.target
            which = "agent" if trigger.agent_id else "crew" if trigger.crew_id else "workflow"
            self.initial.update(
                name=trigger.name, kind=trigger.kind, target=f"{which}:{target.slug}",
                cron=trigger.cron, timezone=trigger.timezone,
                input_template=trigger.input_template, run_as=trigger.run_as,
                enabled=trigger.enabled,
            )  # fmt: skip

    def changes(self) -> dict[str, Any]:
        data = dict(self.cleaned_data)
        which, slug = data.pop("target").split(":", 1)
        named = {
            "agent": selectors.agent_named,
            "crew": selectors.crew_named,
            "workflow": selectors.workflow_named,
        }[which]
        data["agent"] = data["crew"] = data["workflow"] = None
        data[which] = named(tenant=self.tenant, slug=slug)
        if data["kind"] == TriggerKind.WEBHOOK:
            data["cron"] = ""
        return data


def _principal(request: HttpRequest) -> Principal:
    return request.principal  # (set by admin_required)


@admin_required
def trigger_list(request: HttpRequest) -> HttpResponse:
    rows = visible_triggers(_principal(request))
    return render_page(request, "web/config/trigger_list.html", {"triggers": rows})


@never_cache
@admin_required
def trigger_create(request: HttpRequest) -> HttpResponse:
    return _form(request, None)


@admin_required
def trigger_edit(request: HttpRequest, pk: int) -> HttpResponse:
    return _form(request, trigger_get(tenant=request.tenant, trigger_id=pk))


def _form(request: HttpRequest, trigger: Trigger | None) -> HttpResponse:
    tenant = request.tenant
    initial = {"run_as": request.user} if trigger is None else None
    form = TriggerForm(request.POST or None, tenant=tenant, trigger=trigger, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            saved = trigger_save(
                tenant=tenant, by=_principal(request), trigger=trigger, changes=form.changes()
            )
        except (ValidationError, SaveConflict) as error:
            if isinstance(error, ValidationError) and hasattr(error, "error_dict"):
                error = _on_form_fields(error)
            add_service_errors(form, error)
        else:
            messages.success(request, f"Saved trigger “{saved.trigger.name}”.")
            if saved.secret:  # shown on this answer only
                return _detail(request, saved.trigger, secret=saved.secret)
            return redirect("config:trigger", tenant_slug=tenant.slug, pk=saved.trigger.pk)
    return render_form(request, "web/config/trigger_form.html", {"form": form, "trigger": trigger})


def _on_form_fields(error: ValidationError) -> ValidationError:
    """The service names `agent`/`crew`/`workflow`; the form has one `target` field for all."""
    fields = {"agent": "target", "crew": "target", "workflow": "target"}
    return ValidationError(
        {fields.get(name, name): texts for name, texts in error.message_dict.items()}
    )


@admin_required
def trigger_detail(request: HttpRequest, pk: int) -> HttpResponse:
    return _detail(request, trigger_get(tenant=request.tenant, trigger_id=pk))


def _detail(request: HttpRequest, trigger: Trigger, *, secret: str | None = None):
    runs = selectors.runs_with_targets(trigger_runs(_principal(request), trigger), limit=HISTORY)
    context = {
        "trigger": trigger,
        "runs": runs,
        "secret": secret,
        "hook_url": request.build_absolute_uri(hook_path(trigger)),
    }
    return render_page(request, "web/config/trigger_detail.html", context)


@admin_required
@require_POST
def trigger_enabled(request: HttpRequest, pk: int) -> HttpResponse:
    trigger = trigger_get(tenant=request.tenant, trigger_id=pk)
    enabled = request.POST.get("enabled") == "on"
    try:
        trigger_save(
            tenant=request.tenant, by=_principal(request), trigger=trigger,
            changes={"enabled": enabled},
        )  # fmt: skip
    except ValidationError as refused:  # e.g. its member may no longer use the agent
        messages.error(request, " ".join(refused.messages))
    else:
        messages.success(request, f"{'Enabled' if enabled else 'Disabled'} “{trigger.name}”.")
    return redirect("config:trigger", tenant_slug=request.tenant.slug, pk=trigger.pk)


@never_cache
@admin_required
@require_POST
def trigger_rotate(request: HttpRequest, pk: int) -> HttpResponse:
    trigger = trigger_get(tenant=request.tenant, trigger_id=pk)
    try:
        secret = trigger_rotate_secret(
            tenant=request.tenant, by=_principal(request), trigger=trigger
        )
    except ValidationError as refused:
        messages.error(request, " ".join(refused.messages))
        return redirect("config:trigger", tenant_slug=request.tenant.slug, pk=trigger.pk)
    return _detail(request, trigger, secret=secret)


@admin_required
def trigger_remove(request: HttpRequest, pk: int) -> HttpResponse:
    trigger = trigger_get(tenant=request.tenant, trigger_id=pk)
    return confirm_delete(
        request, trigger, what="trigger", cancel="config:triggers",
        delete=lambda: trigger_delete(tenant=request.tenant, by=request.principal, trigger=trigger),
    )  # fmt: skip
