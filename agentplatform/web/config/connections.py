"""Provider connections: list, create and edit (the API key is write-only), test, delete."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.postgres.forms import SimpleArrayField
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from agentplatform.web.config.common import (
    JsonTextarea,
    PlainLabels,
    PrettyJSONField,
    SecretField,
    StoredSecretForm,
    admin_required,
    confirm_delete,
    render_form,
    render_page,
    try_save,
    unique_in_tenant,
)
from providers import selectors
from providers.models import ProviderConnection
from providers.services import connection_delete, connection_save, connection_test


class ConnectionForm(StoredSecretForm, PlainLabels, forms.ModelForm):
    write_only_field = "api_key"

    api_key = SecretField(
        label="API key",
        help_text="Write-only: never shown again. Leave blank to keep the stored key.",
    )
    clear_api_key = forms.BooleanField(required=False, label="Remove the stored key")
    extra_headers = PrettyJSONField(
        required=False,
        widget=JsonTextarea({"rows": 3}),
        label="Extra headers",
        help_text='JSON object sent with every request, e.g. {"X-Team": "support"}. '
        "Not for credentials.",
    )
    base_url = forms.URLField(
        required=False,
        assume_scheme="https",
        label="Base URL",
        help_text="Leave blank for the service's default.",
    )
    allowed_models = SimpleArrayField(
        forms.CharField(max_length=200),
        required=False,
        help_text="Comma-separated. Empty: any model.",
    )

    class Meta:
        model = ProviderConnection
        fields = [
            "name", "kind", "preset", "base_url", "default_model", "allowed_models",
            "extra_headers", "timeout_s", "max_retries", "is_default",
        ]  # fmt: skip
        labels = {"timeout_s": "Timeout (seconds)", "is_default": "Default connection"}
        help_texts = {"is_default": "Agents without a connection of their own use this one."}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.has_stored_key = bool(self.instance.pk and self.instance.api_key)
        if not self.has_stored_key:
            del self.fields["clear_api_key"]

    def clean_extra_headers(self) -> Any:
        value = self.cleaned_data.get("extra_headers")
        return {} if value is None else value

    def clean_name(self) -> str:
        return unique_in_tenant(self, "name", "connection")


@admin_required
def connection_list(request: HttpRequest) -> HttpResponse:
    rows = selectors.connections_of(tenant=request.tenant)
    aliases = selectors.model_aliases_of(tenant=request.tenant)
    context = {"connections": rows, "aliases": aliases}
    return render_page(request, "web/config/connection_list.html", context)


@admin_required
def connection_create(request: HttpRequest) -> HttpResponse:
    return _connection_form(request, ProviderConnection(tenant=request.tenant))


@admin_required
def connection_edit(request: HttpRequest, pk: int) -> HttpResponse:
    return _connection_form(
        request, selectors.connection_get(tenant=request.tenant, connection_id=pk)
    )


def _connection_form(request: HttpRequest, connection: ProviderConnection) -> HttpResponse:
    tenant = request.tenant
    existing = connection.pk is not None
    form = ConnectionForm(request.POST or None, instance=connection)
    save = lambda: connection_save(  # noqa: E731
        tenant=tenant, connection=connection if existing else None, changes=form.changes()
    )
    if try_save(request, form, save, "connection"):
        return redirect("config:connections", tenant_slug=tenant.slug)
    context = {"form": form, "connection": connection if existing else None}
    return render_form(request, "web/config/connection_form.html", context)


@admin_required
@require_POST
def connection_check(request: HttpRequest, pk: int) -> HttpResponse:
    """Test the connection (a network call to the provider, bounded by its timeout) and
    show the outcome in its row (htmx) or on the list."""
    connection = selectors.connection_get(tenant=request.tenant, connection_id=pk)
    ok, message = connection_test(connection)
    connection.refresh_from_db()
    if not request.htmx:
        (messages.success if ok else messages.error)(request, f"{connection.name}: {message}")
        return redirect("config:connections", tenant_slug=request.tenant.slug)
    context = {"connection": connection, "ok": ok, "message": message}
    return render_page(request, "web/config/connection_list.html", context, partial="test-result")


@admin_required
def connection_remove(request: HttpRequest, pk: int) -> HttpResponse:
    connection = selectors.connection_get(tenant=request.tenant, connection_id=pk)
    return confirm_delete(
        request, connection, what="connection", cancel="config:connections",
        delete=lambda: connection_delete(tenant=request.tenant, connection=connection),
    )  # fmt: skip
