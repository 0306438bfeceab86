"""Crews in the tenant-scoped admin: members in order as an inline."""

from __future__ import annotations

from django.contrib import admin

from agents.grants_admin import UseGrantsAdmin
from agents.models import Crew, CrewMember
from agents.publishing_admin import GatedAdmin, GatedInline
from tenancy.scoped_admin import TenantScopedAdmin, TenantScopedInline


class CrewMemberInline(GatedInline, TenantScopedInline):
    model = CrewMember
    extra = 1
    fields = ["position", "agent"]
    ordering = ["position"]


@admin.register(Crew)
class CrewAdmin(GatedAdmin, UseGrantsAdmin, TenantScopedAdmin):
    list_display = ["name", "slug", "mode", "manager", "active", "grants_link"]
    list_filter = ["mode", "active"]
    search_fields = ["name", "slug"]
    inlines = [CrewMemberInline]
    fieldsets = [
        (None, {"fields": ["tenant", "slug", "name", "description", "mode", "manager", "active"]}),
        ("Limits", {"fields": ["max_delegations", "max_depth", "token_budget"]}),
        (
            "Long conversations",
            {"fields": ["compaction_threshold", "compaction_connection", "compaction_model"]},
        ),
    ]

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if self._implied_tenant(request) is not None and obj is None:
            first = dict(fieldsets[0][1])
            first["fields"] = [f for f in first["fields"] if f != "tenant"]
            return [(None, first), *fieldsets[1:]]
        return fieldsets
