from django.contrib import admin

from agentplatform.tenancy.scoped_admin import TenantScopedAdmin
from tests.scoping.models import Project, Ticket


@admin.register(Project)
class ProjectAdmin(TenantScopedAdmin):
    list_display = ["name"]
    exclude = ["token"]


@admin.register(Ticket)
class TicketAdmin(TenantScopedAdmin):
    list_display = ["title"]
