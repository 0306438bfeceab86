"""Who may use an agent or a crew (use grants), and the tenant's groups.

An agent or crew that nobody holds a grant on is open to every member; once a member or a
group holds one, only they (and admins) may use it — in the chat, REST, `/v1` and MCP
alike (`agents.access`). Groups also decide approvals for agents whose approval authority
is "members of a group". Grants are configuration (owners and admins); groups are about
members (owners and admins)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from agentplatform.web.config.common import (
    PlainLabels,
    admin_required,
    members_admin_required,
    render_page,
)
from agents import selectors
from agents.models import Agent, Crew
from agents.selectors import use_grants
from agents.services import use_grant
from tenancy import selectors as tenancy_selectors
from tenancy.models import Membership, TenantGroup
from tenancy.services import group_create, group_delete, group_member_set

KINDS = {"agents": selectors.agent_configured, "crews": selectors.crew_configured}


class GroupForm(PlainLabels, forms.Form):
    name = forms.CharField(max_length=100, help_text="E.g. “Finance approvers”.")


def _members(tenant) -> list[Membership]:
    return list(tenancy_selectors.memberships_of(tenant=tenant))


def _member(request: HttpRequest, membership_id: str) -> Membership:
    return tenancy_selectors.membership_get(tenant=request.tenant, membership_id=membership_id)


def _group(request: HttpRequest, group_id) -> TenantGroup:
    return tenancy_selectors.group_get(tenant=request.tenant, group_id=group_id)


# -- groups ------------------------------------------------------------------------------
@members_admin_required
def group_list(request: HttpRequest) -> HttpResponse:
    """The groups with their members; POST creates one."""
    form = GroupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            group = group_create(tenant=request.tenant, name=form.cleaned_data["name"])
        except ValidationError as exc:
            form.add_error("name", " ".join(exc.messages))
        else:
            messages.success(request, f"Created the group “{group.name}”.")
            return redirect("config:groups", tenant_slug=request.tenant.slug)
    groups = tenancy_selectors.groups_with_members(tenant=request.tenant)
    context = {"groups": groups, "form": form, "members": _members(request.tenant)}
    return render_page(
        request, "web/config/group_list.html", context, status=400 if form.errors else 200
    )


@members_admin_required
@require_POST
def group_members(request: HttpRequest, pk: int) -> HttpResponse:
    """Add (`add=<membership id>`) or remove (`remove=<membership id>`) a member."""
    group = _group(request, pk)
    adding = "add" in request.POST
    membership = _member(request, request.POST.get("add") or request.POST.get("remove"))
    group_member_set(group=group, user=membership.user, member=adding)
    verb = "Added" if adding else "Removed"
    messages.success(request, f"{verb} {membership.user.get_username()} ({group.name}).")
    return redirect("config:groups", tenant_slug=request.tenant.slug)


@members_admin_required
@require_POST
def group_remove(request: HttpRequest, pk: int) -> HttpResponse:
    group = _group(request, pk)
    group_delete(group=group)
    messages.success(request, f"Deleted the group “{group.name}” and its grants.")
    return redirect("config:groups", tenant_slug=request.tenant.slug)


# -- use grants --------------------------------------------------------------------------
def _target(request: HttpRequest, kind: str, slug: str) -> Agent | Crew:
    configured = KINDS.get(kind)
    if configured is None or "\x00" in slug:
        raise Http404("No such agent or crew.")
    return configured(tenant=request.tenant, slug=slug)


@admin_required
def grants(request: HttpRequest, kind: str, slug: str) -> HttpResponse:
    """Who may use the agent or crew; POST grants or revokes (`grant`/`revoke` with
    `member=<membership id>` or `group=<group id>`)."""
    target = _target(request, kind, slug)
    if request.method == "POST":
        granted = request.POST.get("action") == "grant"
        try:
            if request.POST.get("group"):
                group = _group(request, request.POST["group"])
                use_grant(tenant=request.tenant, target=target, granted=granted, group=group)
            else:
                user = _member(request, request.POST.get("member")).user
                use_grant(tenant=request.tenant, target=target, granted=granted, user=user)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        else:
            messages.success(request, "Granted." if granted else "Revoked.")
        name = "config:agent_grants" if kind == "agents" else "config:crew_grants"
        return redirect(name, tenant_slug=request.tenant.slug, slug=slug)
    users, groups = use_grants(tenant=request.tenant, target=target)
    held = {user.pk for user in users}
    members = _members(request.tenant)
    context = {
        "target": target,
        "kind": kind,
        "what": "agent" if kind == "agents" else "crew",
        "holders": [m for m in members if m.user_id in held],
        "groups": groups,
        "other_members": [m for m in members if m.user_id not in held],
        "other_groups": tenancy_selectors.groups_of(
            tenant=request.tenant, excluding=[g.pk for g in groups]
        ),
    }
    return render_page(request, "web/config/grants.html", context)
