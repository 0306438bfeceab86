"""The Django admin and the publish gate (agents/publishing.py): a gated agent or crew
changes only as a draft, through its page, REST or the configuration document, where the
change is evaluated. Its admin form shows its fields read-only, but `active` (switching it
off must not wait), and a crew's members cannot be edited there. The gate itself
(`required_evaluation`, `pass_threshold`) is not among the admin's fields at all: the admin
saves models directly, past `publishing.gate_check` (only those who may override
evaluations weaken a gate); were it added, a gated one's would be read-only too."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.utils import flatten_fieldsets

from agents.publishing import DIRECT, GATE

EDITABLE = DIRECT - set(GATE)  # of a gated one's fields, in the admin


def gated(obj: Any) -> bool:
    return obj is not None and getattr(obj, "required_evaluation_id", None) is not None


class GatedAdmin:
    """For the Agent and Crew admins (before TenantScopedAdmin in the bases)."""

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if gated(obj):
            shown = flatten_fieldsets(self.get_fieldsets(request, obj))
            fields += [f for f in shown if f not in EDITABLE and f not in fields]
        return fields


class GatedInline:
    """A gated crew's members: read-only in the admin."""

    def has_add_permission(self, request, obj=None) -> bool:
        return not gated(obj) and super().has_add_permission(request, obj)

    def has_change_permission(self, request, obj=None) -> bool:
        return not gated(obj) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return not gated(obj) and super().has_delete_permission(request, obj)
