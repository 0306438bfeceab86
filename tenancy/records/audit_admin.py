"""The audit log in the Django admin: read-only, scoped like every tenant-owned model
(a tenant admin sees only the tenants they administer). Nobody adds, changes or deletes
entries here, superusers included."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html_join

from tenancy.models import AuditEntry
from tenancy.records.audit_log import diff_rows
from tenancy.scoped_admin import ReadOnlyAdmin, TenantScopedAdmin


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin, TenantScopedAdmin):
    list_display = ["at", "action", "actor_label", "object_type", "object_repr", "ip"]
    list_filter = ["action", "object_type"]
    search_fields = ["actor_label", "object_repr", "object_id"]
    date_hierarchy = "at"
    fields = [
        "tenant",
        "at",
        "action",
        "actor_label",
        "user",
        "api_key",
        "object_type",
        "object_id",
        "object_repr",
        "changes_table",
        "ip",
        "details",
    ]
    readonly_fields = fields
    list_select_related = ["tenant"]

    @admin.display(description="Changes (before → after)")
    def changes_table(self, obj: AuditEntry) -> str:
        return format_html_join("\n", "<div><b>{}</b>: {} → {}</div>", diff_rows(obj)) or "—"
