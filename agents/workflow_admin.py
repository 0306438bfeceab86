"""Workflows in the tenant-scoped admin: edited through `agents.workflows.workflow_save`
(the document compiled at save, every problem shown under it at its path; audited and
versioned: the History button), deleted through `workflow_delete`; the runs of each,
linked. The document is edited as JSON, as on the Workflows page."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse
from django.utils.html import format_html

from agents import workflows
from agents.models import WorkflowDefinition
from tenancy.scoped_admin import TenantScopedAdmin, TenantScopedForm

FIELDS = ["tenant", "slug", "name", "description", "definition", "expose_as_tool", "enabled"]


class WorkflowAdminForm(TenantScopedForm):
    class Meta:
        model = WorkflowDefinition
        fields = FIELDS

    def clean(self) -> dict[str, Any]:
        """The document compiled against the tenant's tools and agents (as the service
        will), each problem at its path under the field."""
        cleaned = super().clean()
        tenant = self.instance.tenant if self.instance.tenant_id else cleaned.get("tenant")
        if tenant is None or "definition" in self.errors or "definition" not in cleaned:
            return cleaned
        try:
            workflows.workflow_compile(tenant=tenant, definition=cleaned["definition"])
        except workflows.WorkflowInvalid as invalid:
            self.add_error("definition", [f"{p.path}: {p.reason}" for p in invalid.problems])
        return cleaned

    def _post_clean(self) -> None:
        if "definition" not in self.errors:  # (else the whole-graph check says it again)
            super()._post_clean()


@admin.register(WorkflowDefinition)
class WorkflowAdmin(TenantScopedAdmin):
    form = WorkflowAdminForm
    list_display = ["name", "slug", "enabled", "expose_as_tool", "updated_at", "runs_link"]
    list_filter = ["enabled", "expose_as_tool"]
    search_fields = ["name", "slug"]
    readonly_fields = ["created_at", "updated_at", "runs_link"]

    def save_model(self, request, obj: WorkflowDefinition, form, change: bool) -> None:
        """Through the service: audited and versioned as every face's save."""
        if not self._may(request, obj):
            raise PermissionDenied
        changes = {name: form.cleaned_data[name] for name in FIELDS[1:] if name in form.fields}
        if change and "definition" not in form.changed_data:
            changes.pop("definition", None)  # unchanged: not compiled again
        existing = WorkflowDefinition.objects.get(pk=obj.pk) if change else None
        try:
            saved = workflows.workflow_save(
                tenant=obj.tenant, workflow=existing, changes=changes, actor=request.user
            )
        except workflows.WorkflowInvalid as invalid:  # changed since the form checked it
            raise ValidationError([f"{p.path}: {p.reason}" for p in invalid.problems]) from None
        obj.pk = saved.pk

    def delete_model(self, request, obj: WorkflowDefinition) -> None:
        if not self._may(request, obj):
            raise PermissionDenied
        workflows.workflow_delete(tenant=obj.tenant, workflow=obj, actor=request.user)

    def delete_queryset(self, request, queryset) -> None:
        for workflow in self.get_queryset(request).filter(pk__in=queryset.values("pk")):
            self.delete_model(request, workflow)

    @admin.display(description="Runs")
    def runs_link(self, obj: WorkflowDefinition) -> str:
        if obj.pk is None:
            return "—"
        url = reverse("admin:agents_run_changelist") + f"?workflow__id__exact={obj.pk}"
        return format_html('<a href="{}">Its runs</a>', url)
