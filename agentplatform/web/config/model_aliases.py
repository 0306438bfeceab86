"""Model aliases (gateway fallback and load sharing, `alias/<name>` on /v1): listed on the
connections page; create, edit, delete. docs/fallback.md."""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from agentplatform.web.config.common import (
    PlainLabels,
    admin_required,
    confirm_delete,
    render_form,
    try_save,
    unique_in_tenant,
)
from agents.fallback_forms import FallbacksField
from providers import selectors
from providers.models import ModelAlias
from providers.services import model_alias_delete, model_alias_save
from tenancy.models import Tenant


class ModelAliasForm(PlainLabels, forms.ModelForm):
    targets = FallbacksField(
        required=True,
        label="Connections and models",
        help_text="One connection/model per line, tried in order on a retryable failure "
        "(rate limit, 5xx, timeout, unreachable); just the connection: its default model. "
        "With load balancing, the lines serving the first line's model share its load.",
    )

    class Meta:
        model = ModelAlias
        fields = ["name", "targets", "load_balancing"]
        help_texts = {"name": "Called on /v1 as alias/<name>: lowercase letters, digits, _ . -"}

    def __init__(self, *args: Any, tenant: Tenant, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["targets"].connection_names = selectors.connection_names(tenant=tenant)

    def clean_name(self) -> str:
        return unique_in_tenant(self, "name", "model alias")

    def changes(self) -> dict[str, Any]:
        return {name: self.cleaned_data[name] for name in self.Meta.fields}


@admin_required
def alias_create(request: HttpRequest) -> HttpResponse:
    return _alias_form(request, ModelAlias(tenant=request.tenant))


@admin_required
def alias_edit(request: HttpRequest, pk: int) -> HttpResponse:
    return _alias_form(request, selectors.model_alias_get(tenant=request.tenant, alias_id=pk))


def _alias_form(request: HttpRequest, alias: ModelAlias) -> HttpResponse:
    tenant = request.tenant
    existing = alias.pk is not None
    form = ModelAliasForm(request.POST or None, instance=alias, tenant=tenant)
    save = lambda: model_alias_save(  # noqa: E731
        tenant=tenant, alias=alias if existing else None, changes=form.changes()
    )
    if try_save(request, form, save, "model alias"):
        return redirect("config:connections", tenant_slug=tenant.slug)
    context = {"form": form, "alias": alias if existing else None}
    return render_form(request, "web/config/model_alias_form.html", context)


@admin_required
def alias_remove(request: HttpRequest, pk: int) -> HttpResponse:
    alias = selectors.model_alias_get(tenant=request.tenant, alias_id=pk)
    return confirm_delete(
        request, alias, what="model alias", cancel="config:connections",
        delete=lambda: model_alias_delete(tenant=request.tenant, alias=alias),
    )  # fmt: skip
