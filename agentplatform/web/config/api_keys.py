"""API keys: list, create (the full key is shown once, on the response to the POST, and
stored nowhere but the hash), revoke."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from agentplatform.web.config.common import (
    PlainLabels,
    add_service_errors,
    keys_admin_required,
    render_page,
)
from agents.selectors import agent_and_crew_slugs
from tenancy.models import Scope, Tenant
from tenancy.selectors import api_key_get, api_keys_of
from tenancy.services import api_key_create, api_key_revoke
from tools.loader import registry_for_tenant

PAGE = "web/config/api_key_list.html"


class ApiKeyForm(PlainLabels, forms.Form):
    name = forms.CharField(max_length=100, help_text="Who or what uses it, e.g. “CRM sync”.")
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices, widget=forms.CheckboxSelectMultiple, initial=[Scope.READ]
    )
    expires_at = forms.DateTimeField(
        required=False,
        label="Expires",
        help_text="Optional. Empty: never expires.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )
    allowed_agents = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Only these agents and crews",
        help_text="Optional. None ticked: every agent and crew.",
    )
    allowed_tools = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Only these tools",
        help_text="Optional. None ticked: every tool.",
    )
    acts_for_members = forms.BooleanField(
        required=False,
        label="May act for members",
        help_text="A /v1 call whose “user” names a member runs as theirs: their runs, memory "
        "and agent grants (never a member above the key's role). Owners' and admins' keys only.",
    )

    def __init__(self, *args, tenant: Tenant, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        slugs = agent_and_crew_slugs(tenant=tenant)
        self.fields["allowed_agents"].choices = [(slug, slug) for slug in slugs]
        tools = sorted(registry_for_tenant(tenant).names())
        self.fields["allowed_tools"].choices = [(name, name) for name in tools]


def _page(request: HttpRequest, form: ApiKeyForm, **extra) -> HttpResponse:
    keys = api_keys_of(tenant=request.tenant)
    context = {"keys": keys, "form": form, **extra}
    return render_page(request, PAGE, context, status=400 if form.errors else 200)


@keys_admin_required
def api_key_list(request: HttpRequest) -> HttpResponse:
    return _page(request, ApiKeyForm(tenant=request.tenant))


@never_cache
@keys_admin_required
@require_POST
def api_key_new(request: HttpRequest) -> HttpResponse:
    form = ApiKeyForm(request.POST, tenant=request.tenant)
    if form.is_valid():
        try:
            key, full_key = api_key_create(
                tenant=request.tenant,
                name=form.cleaned_data["name"],
                scopes=form.cleaned_data["scopes"],
                created_by=request.user,
                expires_at=form.cleaned_data["expires_at"],
                allowed_agents=form.cleaned_data["allowed_agents"],
                allowed_tools=form.cleaned_data["allowed_tools"],
                acts_for_members=form.cleaned_data["acts_for_members"],
            )
        except ValidationError as error:
            add_service_errors(form, error)
        else:
            return _page(request, ApiKeyForm(tenant=request.tenant), created=key, full_key=full_key)
    return _page(request, form)


@keys_admin_required
@require_POST
def api_key_remove(request: HttpRequest, pk: int) -> HttpResponse:
    key = api_key_get(tenant=request.tenant, key_id=pk)
    api_key_revoke(key=key)
    messages.success(request, f"Revoked API key “{key.name}” ({key.prefix}…).")
    return redirect("config:api_keys", tenant_slug=request.tenant.slug)
