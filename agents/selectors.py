"""The agents app's reads: agents, crews, conversations, runs, approvals and facts found
for a tenant, and what the faces list of them. Services (agents/services.py,
agents/runs) write; these only read. Every face (REST, /v1, MCP, web) asks here rather
than querying the ORM itself.

Each selector takes the tenant (or a Principal, whose tenant it is) and never returns
another tenant's rows; one asked for by id answers 404 (Http404), never 403.
"""

from __future__ import annotations

import copy
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.http import Http404
from guardian.shortcuts import get_groups_with_perms, get_users_with_perms

from agentplatform.tenancy.access import get_for_tenant
from agentplatform.tenancy.models import Membership, Tenant, TenantGroup
from agents import access
from agents.models import Agent, Approval, Conversation, Crew, CrewMember, Fact, Run
from tools.loader import invalidate_now_and_after_commit, per_version


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1  # matches nothing: a 404 like any unknown id


# -- one object by id or slug ----------------------------------------------------------
def run_get(*, tenant: Tenant, run_id: Any) -> Run:
    return get_for_tenant(Run.objects.select_related("agent"), tenant, pk=_int(run_id))


def conversation_get(*, tenant: Tenant, conversation_id: Any) -> Conversation:
    return get_for_tenant(Conversation, tenant, pk=_int(conversation_id))


def approval_get(*, tenant: Tenant, approval_id: Any) -> Approval:
    return get_for_tenant(Approval.objects.select_related("run"), tenant, pk=_int(approval_id))


def fact_get(*, tenant: Tenant, fact_id: Any) -> Fact:
    return get_for_tenant(Fact, tenant, pk=_int(fact_id))


def agent_get(*, tenant: Tenant, slug: str) -> Agent:
    return get_for_tenant(Agent, tenant, slug=slug, active=True)


def crew_get(*, tenant: Tenant, slug: str) -> Crew:
    return get_for_tenant(Crew, tenant, slug=slug, active=True)


def model_target(*, tenant: Tenant, slug: str) -> Agent | Crew:
    """What a model name means to the OpenAI-compatible face and MCP's `ask_*`: the active
    agent `slug`, else the active crew `slug`; Http404 if neither. A copy of what this
    process remembers per tenant configuration version (any agent, crew or connection
    change moves it): the lookup was 3 ms of a chat's first token (bench/api.py)."""

    found = per_version(_targets, tenant.pk, dict)
    target = found.get(slug)
    if target is None:  # (misses are not kept: any name may be asked for)
        agents = Agent.objects.filter(tenant=tenant, slug=slug, active=True)
        target = agents.select_related("provider_connection").first()
        target = target or Crew.objects.filter(tenant=tenant, slug=slug, active=True).first()
        if target is None:
            raise Http404(f"No active agent or crew {slug!r}.")
        found[slug] = target
    return copy.copy(target)  # (its own state: a caller may cache relations on it)


_targets: dict[int, tuple[str, dict[str, Agent | Crew]]] = {}


@receiver([post_save, post_delete], sender=Agent)
@receiver([post_save, post_delete], sender=Crew)
def _target_changed(sender, instance: Agent | Crew, **kwargs) -> None:
    invalidate_now_and_after_commit(instance.tenant_id)


def active_agents_and_crews(
    *, tenant_id: int, slugs: list[str] | None = None
) -> list[Agent | Crew]:
    """The tenant's active agents, then its active crews, each by slug; only `slugs` when
    given (a key limited to agents). Two queries."""
    agents = Agent.objects.filter(tenant_id=tenant_id, active=True).order_by("slug")
    crews = Crew.objects.filter(tenant_id=tenant_id, active=True).order_by("slug")
    if slugs is not None:
        agents, crews = agents.filter(slug__in=slugs), crews.filter(slug__in=slugs)
    return [*agents, *crews]


# -- crews and use grants (configuration versions) ---------------------------------------
def crew_member_slugs(crew: Crew) -> list[str]:
    """The crew's members in order, by slug (its versions keep them so). One query."""
    return list(CrewMember.objects.filter(crew=crew).values_list("agent__slug", flat=True))


def crew_members_named(tenant: Tenant, slugs: list[str]) -> list[Agent]:
    """The tenant's agents with these slugs, in this order; ValidationError naming those
    that no longer exist (restoring a crew's version)."""
    found = {a.slug: a for a in Agent.objects.filter(tenant=tenant, slug__in=slugs)}
    if missing := [slug for slug in slugs if slug not in found]:
        raise ValidationError(
            f"This version's members include agents that no longer exist: {', '.join(missing)}."
        )
    return [found[slug] for slug in slugs]


def use_grants(*, tenant: Tenant, target: Agent | Crew) -> tuple[list, list[TenantGroup]]:
    """The users and the tenant groups holding the use of `target` (none: open to every
    member)."""
    if target.tenant_id != tenant.pk:
        raise Http404("No such agent or crew.")  # other tenants' objects: 404
    codename = access.USE_PERMISSIONS[type(target)]
    users = get_users_with_perms(target, only_with_perms_in=[codename], with_group_users=False)
    groups = get_groups_with_perms(target, attach_perms=True)
    holding = [group for group, perms in groups.items() if codename in perms]
    tenant_groups = TenantGroup.objects.filter(tenant=tenant, group__in=holding)
    return sorted(users, key=lambda u: u.get_username()), list(tenant_groups)


def use_grant_holders(tenant: Tenant, lines: list[str]) -> list[AbstractBaseUser | TenantGroup]:
    """The members and groups a version's grant lines name ("user bob: use_agent", "group
    Finance: use_crew"; other permissions are not use grants and are left out), for
    restoring it; ValidationError naming those no longer there."""
    holders: list[AbstractBaseUser | TenantGroup] = []
    missing = []
    for line in lines:
        kind, _, rest = str(line).partition(" ")
        name, _, codename = rest.rpartition(": ")
        if codename not in access.USE_PERMISSIONS.values():
            continue
        if kind == "group":
            found = TenantGroup.objects.filter(tenant=tenant, name=name).first()
        else:
            membership = Membership.objects.filter(tenant=tenant, user__username=name).first()
            found = membership.user if membership else None
        if found is None:
            missing.append(f"{kind} {name}")
        else:
            holders.append(found)
    if missing:
        raise ValidationError(
            f"This version grants the use to members or groups no longer here: "
            f"{', '.join(missing)}."
        )
    return holders
