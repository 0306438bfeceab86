"""Configuration versions in the Django admin: read-only, scoped like every tenant-owned
model, reached from each versioned object's "History" button (TenantScopedAdmin), with an
action that restores one version through `history.restore` (the same service as the web
pages and REST)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.utils.html import format_html_join

from tenancy.models import ConfigVersion
from tenancy.records import history
from tenancy.records.audit_log import shown
from tenancy.records.saving import SaveConflict
from tenancy.scoped_admin import ReadOnlyAdmin, TenantScopedAdmin


@admin.register(ConfigVersion)
class ConfigVersionAdmin(ReadOnlyAdmin, TenantScopedAdmin):
    list_display = ["object_repr", "number", "object_type", "at", "actor_label", "restored_from"]
    list_filter = ["object_type"]
    search_fields = ["object_repr", "actor_label"]
    date_hierarchy = "at"
    fields = [
        "tenant",
        "object_type",
        "object_id",
        "object_repr",
        "number",
        "at",
        "actor_label",
        "user",
        "api_key",
        "restored_from",
        "changes_table",
        "snapshot_table",
    ]
    readonly_fields = fields
    list_select_related = ["tenant"]
    actions = ["restore_version"]

    @admin.display(description="Changes (before → after)")
    def changes_table(self, obj: ConfigVersion) -> str:
        rows = [(name, shown(a), shown(b)) for name, a, b in history.rows(obj, named=True)]
        return format_html_join("\n", "<div><b>{}</b>: {} → {}</div>", rows) or "—"

    @admin.display(description="Settings")
    def snapshot_table(self, obj: ConfigVersion) -> str:
        rows = [(name, shown(value)) for name, value in history.settings(obj)]
        return format_html_join("\n", "<div><b>{}</b>: {}</div>", rows) or "—"

    @admin.action(description="Restore the selected version (as a new version)")
    def restore_version(self, request, queryset) -> None:
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one version.", messages.ERROR)
            return
        version = queryset.get()
        kind = history.kind_of(version.object_type)
        obj = None
        if kind is not None:
            obj = kind.model._base_manager.filter(
                pk=version.object_id, tenant_id=version.tenant_id
            ).first()
        if obj is None:
            self.message_user(request, "Its object no longer exists.", messages.ERROR)
            return
        try:
            restored = history.restore(
                tenant=obj.tenant, instance=obj, number=version.number, actor=request.user
            )
        except (ValidationError, SaveConflict) as refused:
            texts = refused.messages if isinstance(refused, ValidationError) else [str(refused)]
            self.message_user(
                request, f"Version {version.number} cannot be restored: {' '.join(texts)}",
                messages.ERROR,
            )  # fmt: skip
            return
        if isinstance(restored, history.Proposed):
            self.message_user(request, history.proposed_text(restored, obj))
            return
        self.message_user(
            request, f"Restored version {version.number} of “{obj}” as version {restored.number}."
        )
