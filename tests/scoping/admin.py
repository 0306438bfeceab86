from django.contrib import admin

from tenancy.scoped_admin import TenantScopedAdmin, TenantScopedInline
from tests.scoping.models import Project, Ticket


class TicketInline(TenantScopedInline):
    model = Ticket
    fk_name = "project"
    extra = 1


@admin.register(Project)
class ProjectAdmin(TenantScopedAdmin):
    list_display = ["name"]
    list_filter = ["owner"]
    inlines = [TicketInline]


@admin.register(Ticket)
class TicketAdmin(TenantScopedAdmin):
    list_display = ["title"]
