"""The agents app's objects read and written: agents, crews, conversations, runs, approvals
and facts found for a tenant; agents, crews, conversations and facts saved and deleted; who
holds the use of an agent or crew. Every entry point calls these; runs are started, decided
and cancelled in `agents.runs`.

Reads take the tenant and answer 404 (Http404) for another tenant's ids.
"""

from __future__ import annotations

import copy
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.http import Http404
from guardian.models import UserObjectPermission
from guardian.shortcuts import assign_perm, get_groups_with_perms, get_users_with_perms, remove_perm

from agentplatform.saving import delete_recorded, save_validated
from agentplatform.tenancy.access import get_for_tenant
from agentplatform.tenancy.models import ApiKey, Membership, Tenant, TenantGroup
from agentplatform.tenancy.policy import Principal
from agents import access
from agents.models import Agent, Approval, Conversation, Crew, CrewMember, Fact, Run
from tools.loader import invalidate_now_and_after_commit, per_version


# -- selectors -----------------------------------------------------------------------
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


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1  # matches nothing: a 404 like any unknown id


# -- services ------------------------------------------------------------------------
def _check_tenant(instance: Any, tenant: Tenant, what: str) -> None:
    if instance.tenant_id != tenant.pk:
        raise Http404(f"No such {what}.")  # other tenants' objects: 404


def agent_save(
    *,
    tenant: Tenant,
    agent: Agent | None = None,
    changes: dict[str, Any],
    graph_checked: bool = False,
) -> Agent:
    """Create (agent None) or change one of the tenant's agents through its full_clean,
    which compiles the tenant's whole configuration with it — unless `graph_checked`: the
    caller compiled the end state itself (`agentplatform.config_checks`)."""
    if agent is None:
        agent = Agent(tenant=tenant)
    else:
        _check_tenant(agent, tenant, "agent")
    agent.graph_checked = graph_checked
    return save_validated(agent, changes)


def agent_delete(*, tenant: Tenant, agent: Agent) -> None:
    """Delete one of the tenant's agents."""
    _check_tenant(agent, tenant, "agent")
    delete_recorded(agent)


def crew_save(
    *,
    tenant: Tenant,
    crew: Crew | None = None,
    changes: dict[str, Any],
    members: list[Agent] | None = None,
    graph_checked: bool = False,
) -> Crew:
    """Create or change a crew; a `members` list replaces its members in that order. The
    tenant's whole configuration is compiled with the crew and these members, unless
    `graph_checked` (see `agent_save`)."""
    if crew is None:
        crew = Crew(tenant=tenant)
    else:
        _check_tenant(crew, tenant, "crew")
    if members is not None and any(agent.tenant_id != tenant.pk for agent in members):
        raise ValidationError({"members": "Choose this tenant's agents."})
    crew.graph_checked = graph_checked
    crew.pending_members = members

    def replace_members(saved: Crew) -> None:
        CrewMember.objects.filter(crew=saved).delete()
        CrewMember.objects.bulk_create(
            CrewMember(tenant=tenant, crew=saved, agent=agent, position=position)
            for position, agent in enumerate(members)
        )

    return save_validated(crew, changes, after=None if members is None else replace_members)


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


def crew_delete(*, tenant: Tenant, crew: Crew) -> None:
    """Delete one of the tenant's crews (and its member rows)."""
    _check_tenant(crew, tenant, "crew")
    delete_recorded(crew)


def conversation_save(
    *,
    tenant: Tenant,
    conversation: Conversation | None = None,
    changes: dict[str, Any],
    owner_user: AbstractBaseUser | None = None,
    owner_api_key: ApiKey | None = None,
) -> Conversation:
    """Start a conversation owned by `owner_user` or `owner_api_key`, or change one."""
    if conversation is None:
        conversation = Conversation(
            tenant=tenant, owner_user=owner_user, owner_api_key=owner_api_key
        )
    else:
        _check_tenant(conversation, tenant, "conversation")
        if owner_user is not None or owner_api_key is not None:
            raise ValueError("A conversation keeps the owner it was started by.")
    for field in ("agent", "crew"):
        target = changes.get(field)
        if target is not None and target.tenant_id != tenant.pk:
            raise ValidationError({field: f"Choose one of this tenant's {field}s."})
        owner = conversation.owner_user or conversation.owner_api_key
        if target is not None and owner is not None:
            principal = Principal.for_initiator(tenant, owner)
            if not access.may_use(principal, target):
                raise PermissionDenied(f"You may not use this {field}.")
    return save_validated(conversation, changes)


def conversation_delete(*, tenant: Tenant, conversation: Conversation) -> None:
    """Delete one of the tenant's conversations and its messages."""
    _check_tenant(conversation, tenant, "conversation")
    conversation.delete()


def fact_delete(*, tenant: Tenant, fact: Fact) -> None:
    """Forget one of the tenant's remembered facts."""
    _check_tenant(fact, tenant, "fact")
    fact.delete()


# -- use grants ----------------------------------------------------------------------------
def use_grants(*, tenant: Tenant, target: Agent | Crew) -> tuple[list, list[TenantGroup]]:
    """The users and the tenant groups holding the use of `target` (none: open to every
    member)."""
    _check_tenant(target, tenant, "agent or crew")
    codename = access.USE_PERMISSIONS[type(target)]
    users = get_users_with_perms(target, only_with_perms_in=[codename], with_group_users=False)
    groups = get_groups_with_perms(target, attach_perms=True)
    holding = [group for group, perms in groups.items() if codename in perms]
    tenant_groups = TenantGroup.objects.filter(tenant=tenant, group__in=holding)
    return sorted(users, key=lambda u: u.get_username()), list(tenant_groups)


def use_grant(
    *,
    tenant: Tenant,
    target: Agent | Crew,
    granted: bool,
    user: AbstractBaseUser | None = None,
    group: TenantGroup | None = None,
) -> None:
    """Grant (`granted`) or revoke the use of `target` to a member or a tenant group. Once
    anyone holds it, only holders (and admins) may use `target`."""
    _check_tenant(target, tenant, "agent or crew")
    if (user is None) == (group is None):
        raise ValidationError("Grant to one member or one group.")
    if group is not None:
        _check_tenant(group, tenant, "group")
    elif not Membership.objects.filter(tenant=tenant, user=user).exists():
        raise ValidationError({"user": "Only the tenant's members can be granted its agents."})
    holder = user if user is not None else group.group
    codename = f"agents.{access.USE_PERMISSIONS[type(target)]}"
    (assign_perm if granted else remove_perm)(codename, holder, target)


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


def use_grants_set(
    *, tenant: Tenant, target: Agent | Crew, holders: list[AbstractBaseUser | TenantGroup]
) -> None:
    """Grant the use of `target` to exactly `holders` (members and tenant groups): those
    missing are granted, the others revoked, each as `use_grant` does."""
    users, groups = use_grants(tenant=tenant, target=target)
    want_users = {h.pk: h for h in holders if not isinstance(h, TenantGroup)}
    want_groups = {h.pk: h for h in holders if isinstance(h, TenantGroup)}
    for user in users:
        if user.pk not in want_users:
            use_grant(tenant=tenant, target=target, granted=False, user=user)
    for group in groups:
        if group.pk not in want_groups:
            use_grant(tenant=tenant, target=target, granted=False, group=group)
    held_users, held_groups = {u.pk for u in users}, {g.pk for g in groups}
    for pk, user in want_users.items():
        if pk not in held_users:
            use_grant(tenant=tenant, target=target, granted=True, user=user)
    for pk, group in want_groups.items():
        if pk not in held_groups:
            use_grant(tenant=tenant, target=target, granted=True, group=group)


def member_grants_forget(*, membership: Membership) -> None:
    """A member leaves: their use grants on the tenant's agents and crews and their place
    in its groups go too (else an agent stays restricted to nobody visible, and a second
    invitation would silently bring them back)."""
    user_id, tenant_id = membership.user_id, membership.tenant_id
    for model, codename in access.USE_PERMISSIONS.items():
        pks = [
            str(pk) for pk in model.objects.filter(tenant_id=tenant_id).values_list("pk", flat=True)
        ]
        UserObjectPermission.objects.filter(
            user_id=user_id,
            permission__codename=codename,
            content_type=ContentType.objects.get_for_model(model),
            object_pk__in=pks,
        ).delete()
    groups = TenantGroup.objects.filter(tenant_id=tenant_id).values_list("group_id", flat=True)
    get_user_model().groups.through.objects.filter(
        user_id=user_id, group_id__in=list(groups)
    ).delete()
