from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import path, reverse
from django.utils.html import format_html

from providers.models import ModelAlias, ModelPrice, ProviderConnection
from providers.services import connection_test
from tenancy.scoped_admin import TenantScopedAdmin, TenantScopedForm


class ProviderConnectionForm(TenantScopedForm):
    base_url = forms.URLField(
        required=False, assume_scheme="https", help_text="Leave blank for the service's default."
    )
    clear_api_key = forms.BooleanField(label="Remove the stored API key", required=False)

    class Meta:
        model = ProviderConnection
        fields = [
            "tenant", "name", "kind", "preset", "base_url", "api_key", "extra_headers",
            "default_model", "allowed_models", "timeout_s", "max_retries", "is_default",
        ]  # fmt: skip

    def _post_clean(self) -> None:
        if self.cleaned_data.get("clear_api_key"):
            self.instance.api_key = None
        super()._post_clean()


@admin.register(ProviderConnection)
class ProviderConnectionAdmin(TenantScopedAdmin):
    form = ProviderConnectionForm
    list_display = [
        "name", "kind", "preset", "default_model", "is_default", "health_status",
        "last_checked_at", "test_link",
    ]  # fmt: skip
    list_filter = ["kind", "health_status"]
    search_fields = ["name", "default_model"]
    readonly_fields = ["key_set", "health_status", "health_message", "last_checked_at"]
    actions = ["test_connections"]

    @admin.display(description="API key stored", boolean=True)
    def key_set(self, obj: ProviderConnection) -> bool:
        return bool(obj.api_key)

    @admin.display(description="")
    def test_link(self, obj: ProviderConnection) -> str:
        url = reverse("admin:providers_test", args=[obj.pk])
        return format_html('<a href="{}">Test connection</a>', url)

    def get_urls(self):
        return [
            path(
                "<int:pk>/test/",
                self.admin_site.admin_view(self.test_view),
                name="providers_test",
            ),
            *super().get_urls(),
        ]

    def test_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """GET asks; POST (with CSRF) calls the provider and records its health: a link
        followed by a crawler or an <img> on another site must not do either."""
        connection = self.get_queryset(request).filter(pk=pk).first()
        if connection is None or not self.has_change_permission(request, connection):
            raise Http404("No such connection.")
        if request.method == "POST":
            self._test(request, connection)
            return HttpResponseRedirect(reverse("admin:providers_providerconnection_changelist"))
        context = {
            **self.admin_site.each_context(request),
            "title": f"Test {connection.name}",
            "opts": self.opts,
            "connection": connection,
        }
        return render(request, "admin/providers/test_connection.html", context)

    @admin.action(description="Test selected connections")
    def test_connections(self, request, queryset) -> None:
        for connection in queryset:
            self._test(request, connection)

    def _test(self, request, connection: ProviderConnection) -> None:
        ok, message = connection_test(connection)
        level = messages.SUCCESS if ok else messages.ERROR
        self.message_user(request, f"{connection.name}: {message}", level)


class ModelPriceForm(TenantScopedForm):
    class Meta:
        model = ModelPrice
        fields = [
            "tenant", "provider_kind", "model", "input_price", "output_price",
            "cached_input_price", "cache_write_price",
        ]  # fmt: skip


@admin.register(ModelPrice)
class ModelPriceAdmin(TenantScopedAdmin):
    """A tenant's own prices (US dollars per million tokens); the built-in table is in
    providers.pricing and on the Prices page."""

    form = ModelPriceForm
    list_display = [
        "model", "provider_kind", "input_price", "output_price", "cached_input_price",
        "cache_write_price", "updated_at",
    ]  # fmt: skip
    list_filter = ["provider_kind"]
    search_fields = ["model"]


class ModelAliasForm(TenantScopedForm):
    class Meta:
        model = ModelAlias
        fields = ["tenant", "name", "targets", "load_balancing"]
        widgets = {"targets": forms.Textarea(attrs={"rows": 6, "cols": 80})}


@admin.register(ModelAlias)
class ModelAliasAdmin(TenantScopedAdmin):
    """Gateway model aliases (`alias/<name>`): fallback and load sharing, docs/fallback.md."""

    form = ModelAliasForm
    list_display = ["__str__", "load_balancing", "updated_at"]
    search_fields = ["name"]
