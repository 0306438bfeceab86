"""The operator's side of an owner's erasure request: superusers see every request and
confirm one with the action, which erases the tenant (lifecycle.erasure)."""

from __future__ import annotations

from django.contrib import admin, messages

from lifecycle.erasure import tenant_erase
from lifecycle.models import TenantErasureRequest


@admin.register(TenantErasureRequest)
class TenantErasureRequestAdmin(admin.ModelAdmin):
    list_display = ["tenant", "requested_by", "requested_at", "reason"]
    actions = ["erase_tenants"]

    def has_module_permission(self, request) -> bool:
        return request.user.is_superuser

    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.is_superuser

    def has_add_permission(self, request) -> bool:
        return False  # owners ask on their page

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # the owner withdraws; the erasure takes it along

    @admin.action(description="Confirm: erase these tenants and everything they hold")
    def erase_tenants(self, request, queryset) -> None:
        for pending in list(queryset.select_related("tenant")):
            name = pending.tenant.slug
            summary = tenant_erase(tenant=pending.tenant)
            rows = sum(summary.rows.values())
            self.message_user(
                request, f"Erased {name}: {rows} rows, {summary.files} files.", messages.SUCCESS
            )

    def get_actions(self, request):
        # the action needs no delete permission of its own: superusers only
        actions = super().get_actions(request)
        return actions if request.user.is_superuser else {}
