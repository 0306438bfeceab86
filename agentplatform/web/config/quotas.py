"""Quotas and budgets (docs/quotas.md): the tenant's limits with what is used of each this
period, a form to add one, change or delete it, and the tenant's time zone (where its days
and months begin). Owners and admins only; every write goes through the services
(agents.quotas, tenancy.services.tenant_time_zone_set: the API and the admin use the same)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from agentplatform.web.config.common import (
    PlainLabels,
    add_service_errors,
    admin_required,
    confirm_delete,
    render_page,
)
from agents import quotas
from agents.models import Agent, Quota, QuotaMetric, QuotaPeriod, QuotaScope
from agents.selectors import agents_by_slug
from tenancy.models import ApiKey, Tenant
from tenancy.selectors import member_users, unrevoked_api_keys
from tenancy.services import tenant_time_zone_set

LIST = "web/config/quota_list.html"
FORM = "web/config/quota_form.html"


class QuotaForm(PlainLabels, forms.Form):
    scope = forms.ChoiceField(choices=QuotaScope.choices, label="Applies to")
    user = forms.ModelChoiceField(
        queryset=get_user_model().objects.none(), required=False, label="Member",
        help_text="For a limit of one member.",
    )  # fmt: skip
    api_key = forms.ModelChoiceField(
        queryset=ApiKey.objects.none(), required=False, label="API key",
        help_text="For a limit of one API key.",
    )  # fmt: skip
    agent = forms.ModelChoiceField(
        queryset=Agent.objects.none(), required=False, label="Agent",
        help_text="For a limit of one agent.",
    )  # fmt: skip
    metric = forms.ChoiceField(choices=QuotaMetric.choices)
    period = forms.ChoiceField(
        choices=QuotaPeriod.choices,
        help_text="Calendar days and months, in the tenant's time zone.",
    )
    limit = forms.DecimalField(
        min_value=0, max_digits=18, decimal_places=6,
        help_text="Tokens (a whole number), or US dollars.",
    )  # fmt: skip
    active = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args: Any, tenant: Tenant, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["user"].queryset = member_users(tenant=tenant)
        self.fields["api_key"].queryset = unrevoked_api_keys(tenant=tenant)
        self.fields["agent"].queryset = agents_by_slug(tenant=tenant)


def _initial(quota: Quota) -> dict[str, Any]:
    return {
        "scope": quota.scope, "user": quota.user_id, "api_key": quota.api_key_id,
        "agent": quota.agent_id, "metric": quota.metric, "period": quota.period,
        "limit": quota.limit, "active": quota.active,
    }  # fmt: skip


class TimeZoneForm(PlainLabels, forms.Form):
    time_zone = forms.CharField(
        max_length=64,
        label="Time zone",
        help_text="An IANA name such as Europe/Lisbon, America/New_York or UTC: where the "
        "days and months of the limits begin.",
    )


def _rows(tenant: Tenant) -> list[dict[str, Any]]:
    return [
        {"quota": q, "used": quotas.used(q), "resets_at": quotas.resets_at(q)}
        for q in quotas.quota_list(tenant=tenant)
    ]


def _list(
    request: HttpRequest, form: QuotaForm, zone_form: TimeZoneForm | None = None
) -> HttpResponse:
    zone_form = zone_form or TimeZoneForm(initial={"time_zone": request.tenant.time_zone})
    context = {"rows": _rows(request.tenant), "form": form, "zone_form": zone_form}
    failed = form.errors or zone_form.errors
    return render_page(request, LIST, context, status=400 if failed else 200)


def _save(request: HttpRequest, form: QuotaForm, quota: Quota | None) -> Quota | None:
    if not form.is_valid():
        return None
    try:
        saved = quotas.quota_save(
            tenant=request.tenant, quota=quota, changes=dict(form.cleaned_data),
            actor=request.user,
        )  # fmt: skip
    except ValidationError as error:
        add_service_errors(form, error)
        return None
    messages.success(request, f"Saved {saved.label}.")
    return saved


@admin_required
def quota_list(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        form = QuotaForm(request.POST, tenant=request.tenant)
        if _save(request, form, None) is not None:
            return redirect("config:quotas", tenant_slug=request.tenant.slug)
        return _list(request, form)
    return _list(request, QuotaForm(tenant=request.tenant))


@admin_required
def quota_time_zone(request: HttpRequest) -> HttpResponse:
    """POST: set the tenant's time zone (a GET shows the quotas page)."""
    if request.method != "POST":
        return redirect("config:quotas", tenant_slug=request.tenant.slug)
    form = TimeZoneForm(request.POST)
    if form.is_valid():
        try:
            tenant_time_zone_set(tenant=request.tenant, time_zone=form.cleaned_data["time_zone"])
        except ValidationError as error:
            add_service_errors(form, error)
        else:
            messages.success(request, f"Time zone set to {request.tenant.time_zone}.")
            return redirect("config:quotas", tenant_slug=request.tenant.slug)
    return _list(request, QuotaForm(tenant=request.tenant), form)


@admin_required
def quota_edit(request: HttpRequest, pk: int) -> HttpResponse:
    quota = quotas.quota_get(tenant=request.tenant, quota_id=pk)
    if request.method == "POST":
        form = QuotaForm(request.POST, tenant=request.tenant)
        if _save(request, form, quota) is not None:
            return redirect("config:quotas", tenant_slug=request.tenant.slug)
    else:
        form = QuotaForm(initial=_initial(quota), tenant=request.tenant)
    context = {"quota": quota, "form": form}
    return render_page(request, FORM, context, status=400 if form.errors else 200)


@admin_required
def quota_remove(request: HttpRequest, pk: int) -> HttpResponse:
    quota = quotas.quota_get(tenant=request.tenant, quota_id=pk)
    quota.name = quota.label  # (what confirm_delete names)
    return confirm_delete(
        request, quota, what="quota", cancel="config:quotas",
        delete=lambda: quotas.quota_delete(tenant=request.tenant, quota=quota, actor=request.user),
    )  # fmt: skip
