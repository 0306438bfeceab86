from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path, reverse
from django.utils.html import format_html

from tenancy.admin_site import admin_tenant_ids
from tenancy.models import Tenant
from tenancy.request_budgets import user_budget_refusal
from tenancy.scoped_admin import TenantScopedAdmin, TenantScopedForm
from tools.loader import registry_for_tenant
from tools.mcp_connections import mcp_connection_refresh, mcp_connection_test
from tools.mcp_oauth import oauth_forget_if_moved
from tools.models import McpServerConnection, McpStatus, ToolDefinition
from tools.runtime.builtins import BUILTINS

_JSON = forms.Textarea(attrs={"rows": 8, "cols": 80, "class": "vLargeTextField"})


class ToolDefinitionForm(TenantScopedForm):
    clear_secret = forms.BooleanField(label="Remove the stored secret", required=False)

    class Meta:
        model = ToolDefinition
        fields = [
            "tenant", "name", "kind", "description", "input_schema", "output_schema", "config",
            "depends_on", "examples", "secret", "tags", "effect", "idempotent", "requires_approval",
            "timeout_s", "rate_limit_per_minute", "enabled",
        ]  # fmt: skip
        widgets = {
            "input_schema": _JSON, "output_schema": _JSON, "config": _JSON, "depends_on": _JSON,
            "examples": _JSON,
        }  # fmt: skip

    def _post_clean(self) -> None:
        # Before the model's clean(), which checks that auth has a secret.
        if self.cleaned_data.get("clear_secret"):
            self.instance.secret = None
        super()._post_clean()


@admin.register(ToolDefinition)
class ToolDefinitionAdmin(TenantScopedAdmin):
    form = ToolDefinitionForm
    list_display = [
        "name",
        "kind",
        "enabled",
        "effect",
        "requires_approval",
        "rate_limit_per_minute",
        "version",
        "test_link",
    ]
    list_filter = ["kind", "enabled", "effect"]
    search_fields = ["name", "description"]
    readonly_fields = ["version", "has_secret"]

    @admin.display(description="Secret stored")
    def has_secret(self, obj: ToolDefinition) -> bool:
        return bool(obj.secret)

    @admin.display(description="")
    def test_link(self, obj: ToolDefinition) -> str:
        url = reverse("admin:tools_test", args=[obj.tenant_id, obj.name])
        return format_html('<a href="{}">Test</a>', url)

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("builtins/", view(self.builtins_view), name="tools_builtins"),
            path("test/<int:tenant_id>/<str:name>/", view(self.test_view), name="tools_test"),
            *super().get_urls(),
        ]

    def changelist_view(self, request, extra_context=None):
        extra = {"builtins_url": reverse("admin:tools_builtins"), **(extra_context or {})}
        return super().changelist_view(request, extra)

    def _tenants(self, request):
        queryset = Tenant.objects.filter(active=True)
        if not request.user.is_superuser:
            queryset = queryset.filter(pk__in=admin_tenant_ids(request))
        return queryset

    def builtins_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise Http404
        context = {
            **self.admin_site.each_context(request),
            "title": "Built-in tools",
            "opts": self.opts,
            "tools": list(BUILTINS),
            "tenants": list(self._tenants(request)),
        }
        return render(request, "admin/tools/builtins.html", context)

    def test_view(self, request: HttpRequest, tenant_id: int, name: str) -> HttpResponse:
        tenant = self._tenants(request).filter(pk=tenant_id).first()
        if tenant is None or not self.has_view_permission(request):
            raise Http404("No such tenant.")
        registry = registry_for_tenant(tenant)
        if not registry.has(name):
            raise Http404("No such tool.")
        tool = registry.get(name)
        arguments_text = json.dumps(tool.examples[0] if tool.examples else {}, indent=2)
        result = problem = None
        status = 200
        if request.method == "POST":
            arguments_text = request.POST.get("arguments", "")
            try:
                arguments = json.loads(arguments_text or "{}")
            except ValueError as exc:
                problem = f"Arguments are not valid JSON: {exc}"
            else:
                if (refusal := user_budget_refusal(request.user, tenant)) is not None:
                    problem, status = refusal, 429
                else:
                    result = self.run_test(request, tenant, name, arguments)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Test {name}",
            "opts": self.opts,
            "tenant": tenant,
            "tool": tool,
            "schema": json.dumps(tool.input_schema, indent=2),
            "arguments_text": arguments_text,
            "problem": problem,
            "result": result,
            "result_json": json.dumps(result["result"], indent=2, default=str) if result else "",
        }
        return render(request, "admin/tools/test_tool.html", context, status=status)

    def run_test(
        self, request: HttpRequest, tenant: Tenant, name: str, arguments: Any
    ) -> dict[str, Any]:
        """Call the tool (POST only) and describe the outcome for the page: status, result,
        error, latency_ms, run_url, approval_url. A test is a tool run like any other —
        recorded, and held for a decision where the tool needs approval — and tool runs
        live in the agents app, which this app does not import: agents/admin.py registers
        the subclass that implements this."""
        raise NotImplementedError("agents.admin registers the ToolDefinition admin")


class McpServerConnectionForm(TenantScopedForm):
    url = forms.URLField(
        max_length=500,
        assume_scheme="https",
        help_text="The server's streamable HTTP endpoint, e.g. https://host/mcp.",
    )
    clear_auth_header = forms.BooleanField(label="Remove the stored auth header", required=False)

    class Meta:
        model = McpServerConnection
        fields = [
            "tenant", "name", "url", "auth_header", "auth_mode", "oauth_scope",
            "oauth_client_id", "enabled", "tool_prefix", "allowed_tool_names",
            "context_resource_uri", "tool_examples", "timeout_s", "domains",
        ]  # fmt: skip
        widgets = {
            "allowed_tool_names": forms.Textarea(attrs={"rows": 3, "cols": 60}),
            "tool_examples": forms.Textarea(attrs={"rows": 6, "cols": 60}),
        }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["auth_mode"].required = False  # none (header, when one is given)

    def clean_auth_mode(self) -> str:
        return self.cleaned_data.get("auth_mode") or "none"

    def _post_clean(self) -> None:
        if self.cleaned_data.get("clear_auth_header"):
            self.instance.auth_header = None
        super()._post_clean()


@admin.register(McpServerConnection)
class McpServerConnectionAdmin(TenantScopedAdmin):
    """Context providers: remote MCP servers whose tools join the tenant's registry. The
    auth header is write-only; saving a connection refreshes it."""

    form = McpServerConnectionForm
    list_display = [
        "name", "url", "enabled", "domains", "status", "tool_count", "short_error",
        "last_refreshed_at", "test_link",
    ]  # fmt: skip
    list_filter = ["enabled", "status"]
    search_fields = ["name", "url"]
    readonly_fields = [
        "header_set", "status", "last_error", "last_refreshed_at", "remote_tools", "context_text",
    ]  # fmt: skip
    actions = ["refresh_connections"]

    @admin.display(description="Auth header stored", boolean=True)
    def header_set(self, obj: McpServerConnection) -> bool:
        return bool(obj.auth_header)

    @admin.display(description="Tools")
    def tool_count(self, obj: McpServerConnection) -> str:
        if obj.status == McpStatus.UNAVAILABLE:
            return "tools unavailable"
        return str(obj.tool_count)

    @admin.display(description="Last error")
    def short_error(self, obj: McpServerConnection) -> str:
        return obj.last_error if len(obj.last_error) <= 120 else obj.last_error[:117] + "…"

    @admin.display(description="Remote tools (last listing)")
    def remote_tools(self, obj: McpServerConnection) -> str:
        return ", ".join(str(t.get("name")) for t in obj.tools_cache or []) or "—"

    @admin.display(description="")
    def test_link(self, obj: McpServerConnection) -> str:
        url = reverse("admin:tools_mcp_test", args=[obj.pk])
        return format_html('<a href="{}">Test connection</a>', url)

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<int:pk>/test/", view(self.test_view), name="tools_mcp_test"),
            *super().get_urls(),
        ]

    def save_model(self, request, obj, form, change) -> None:
        with transaction.atomic():  # a new URL, mode or client ID: no token of before stays
            oauth_forget_if_moved(obj)
            super().save_model(request, obj, form, change)
        if obj.enabled:
            self._refresh(request, obj)

    def test_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        connection = self.get_queryset(request).filter(pk=pk).first()
        if connection is None or not self.has_view_permission(request, connection):
            raise Http404("No such connection.")
        # GET only shows the buttons: testing calls the server and refreshing writes, so
        # both wait for a POST (with CSRF), never a followed link.
        refreshed = tested = False
        ok, message, names = True, "", []
        if request.method == "POST" and request.POST.get("action") == "test":
            ok, message, names = mcp_connection_test(connection)
            tested = True
        elif request.method == "POST":
            if not self.has_change_permission(request, connection):
                raise Http404("No such connection.")
            connection = mcp_connection_refresh(connection)
            ok = connection.status == McpStatus.OK
            message = (
                f"Refreshed: {connection.tool_count} tools listed."
                if ok
                else f"MCP server {connection.name} is unavailable: {connection.last_error}"
            )
            names = [str(t.get("name")) for t in connection.tools_cache]
            refreshed = True
        imported = set(registry_for_tenant(connection.tenant_id).names())
        tools = [
            {"name": name, "registry_name": f"{connection.tool_prefix}__{name}"} for name in names
        ]
        for item in tools:
            item["imported"] = item["registry_name"] in imported
        context = {
            **self.admin_site.each_context(request),
            "title": f"Test {connection.name}",
            "opts": self.opts,
            "connection": connection,
            "ok": ok,
            "message": message,
            "tools": tools,
            "refreshed": refreshed,
            "tested": tested,
        }
        return render(request, "admin/tools/mcp_test.html", context)

    @admin.action(description="Refresh selected connections (list their tools again)")
    def refresh_connections(self, request, queryset) -> None:
        for connection in queryset:
            self._refresh(request, connection)

    def _refresh(self, request, connection: McpServerConnection) -> None:
        connection = mcp_connection_refresh(connection)
        if connection.status == McpStatus.OK:
            self.message_user(
                request,
                f"{connection.name}: {connection.tool_count} tools listed.",
                messages.SUCCESS,
            )
        else:
            self.message_user(
                request,
                f"{connection.name}: tools unavailable: {connection.last_error}",
                messages.ERROR,
            )
