from __future__ import annotations

import json

from django import forms
from django.contrib import admin
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path, reverse
from django.utils.html import format_html

from agentplatform.tenancy.admin_site import admin_tenant_ids
from agentplatform.tenancy.models import Tenant
from agentplatform.tenancy.scoped_admin import TenantScopedAdmin, TenantScopedForm
from tools.loader import registry_for_tenant
from tools.models import ToolDefinition
from tools.runtime.builtins import BUILTINS
from tools.services import tool_execute

_JSON = forms.Textarea(attrs={"rows": 8, "cols": 80, "class": "vLargeTextField"})


class ToolDefinitionForm(TenantScopedForm):
    clear_secret = forms.BooleanField(label="Remove the stored secret", required=False)

    class Meta:
        model = ToolDefinition
        fields = [
            "tenant", "name", "kind", "description", "input_schema", "output_schema", "config",
            "secret", "tags", "effect", "idempotent", "requires_approval", "timeout_s", "enabled",
        ]  # fmt: skip
        widgets = {"input_schema": _JSON, "output_schema": _JSON, "config": _JSON}

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
        result = parse_error = None
        if request.method == "POST":
            arguments_text = request.POST.get("arguments", "")
            try:
                arguments = json.loads(arguments_text or "{}")
            except ValueError as exc:
                parse_error = f"Arguments are not valid JSON: {exc}"
            else:
                result = tool_execute(
                    tenant=tenant, name=name, arguments=arguments, user_id=request.user.pk
                )
        context = {
            **self.admin_site.each_context(request),
            "title": f"Test {name}",
            "opts": self.opts,
            "tenant": tenant,
            "tool": tool,
            "schema": json.dumps(tool.input_schema, indent=2),
            "arguments_text": arguments_text,
            "parse_error": parse_error,
            "result": result,
            "result_json": json.dumps(result.result, indent=2, default=str) if result else "",
        }
        return render(request, "admin/tools/test_tool.html", context)
