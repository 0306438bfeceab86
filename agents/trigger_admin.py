"""Triggers in the tenant-scoped admin: their fields checked by the trigger rules before
saving, saved through `agents.triggers.trigger_save`; a new webhook's secret (and a rotated
one) shown once in the admin's message; the runs each started, linked."""

from __future__ import annotations

from copy import copy
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.urls import reverse
from django.utils.html import format_html

from agents.models import Trigger
from agents.triggers import trigger_check, trigger_rotate_secret, trigger_save
from tenancy.policy import Principal
from tenancy.scoped_admin import TenantScopedAdmin, TenantScopedForm

FIELDS = [
    "tenant", "name", "kind", "agent", "crew", "workflow", "cron", "timezone", "input_template",
    "run_as", "enabled",
]  # fmt: skip


class TriggerAdminForm(TenantScopedForm):
    request: Any = None  # set by TriggerAdmin.get_form

    class Meta:
        model = Trigger
        fields = FIELDS

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.errors:
            return cleaned
        candidate = copy(self.instance)
        for name in FIELDS:
            if name in cleaned:
                setattr(candidate, name, cleaned[name])
        tenant = candidate.tenant if candidate.tenant_id else None
        if tenant is None:
            return cleaned
        try:
            by = Principal.for_initiator(tenant, self.request.user)
            disabling = self.instance.pk and self.changed_data == ["enabled"]
            trigger_check(
                candidate, tenant=tenant, by=by, run_as=cleaned.get("run_as"),
                check_run_as=not (disabling and not cleaned.get("enabled")),
            )  # fmt: skip
        except ValidationError as refused:
            for field, texts in refused.message_dict.items():
                self.add_error(field if field in self.fields else None, texts)
        except (PermissionDenied, Http404):
            self.add_error(None, "You may not configure this workspace's triggers.")
        return cleaned


@admin.register(Trigger)
class TriggerAdmin(TenantScopedAdmin):
    form = TriggerAdminForm
    list_display = [
        "name", "kind", "agent", "crew", "workflow", "enabled", "next_fire_at", "last_fired_at",
        "last_error", "runs_link",
    ]  # fmt: skip
    list_filter = ["kind", "enabled"]
    search_fields = ["name"]
    readonly_fields = [
        "public_id", "next_fire_at", "last_fired_at", "last_error", "created_by", "runs_link",
    ]  # fmt: skip
    actions = ["rotate_secrets"]

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        return type(form.__name__, (form,), {"request": request})

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, "kind"] if obj is not None else fields  # a trigger keeps its kind

    def save_model(self, request, obj: Trigger, form, change: bool) -> None:
        """Through the service (its rules were checked by the form)."""
        by = Principal.for_initiator(obj.tenant, request.user)
        changes = {name: form.cleaned_data[name] for name in FIELDS[1:] if name in form.fields}
        existing = Trigger.objects.get(pk=obj.pk) if change else None
        saved = trigger_save(tenant=obj.tenant, by=by, trigger=existing, changes=changes)
        obj.pk, obj.public_id = saved.trigger.pk, saved.trigger.public_id
        if saved.secret:
            self.message_user(
                request,
                f"The signing secret of “{obj.name}” (shown only this once): {saved.secret}",
                messages.WARNING,
            )

    def delete_model(self, request, obj: Trigger) -> None:
        from agents.triggers import trigger_delete

        by = Principal.for_initiator(obj.tenant, request.user)
        trigger_delete(tenant=obj.tenant, by=by, trigger=obj)

    @admin.action(description="Rotate the signing secrets of the selected webhooks")
    def rotate_secrets(self, request, queryset) -> None:
        for trigger in queryset.filter(kind="webhook").select_related("tenant"):
            by = Principal.for_initiator(trigger.tenant, request.user)
            secret = trigger_rotate_secret(tenant=trigger.tenant, by=by, trigger=trigger)
            self.message_user(
                request,
                f"The new signing secret of “{trigger.name}” (shown only this once): {secret}",
                messages.WARNING,
            )

    @admin.display(description="Runs")
    def runs_link(self, obj: Trigger) -> str:
        if obj.pk is None:
            return "—"
        url = reverse("admin:agents_run_changelist") + f"?trigger__id__exact={obj.pk}"
        return format_html('<a href="{}">Its runs</a>', url)
