"""The agents app's objects written: agents, crews and conversations saved and
deleted; who holds the use of an agent or crew. Every entry point calls these; runs are
started, decided and cancelled in `agents.runs`; reads are in agents/selectors.py.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import Http404
from guardian.models import UserObjectPermission
from guardian.shortcuts import assign_perm, remove_perm

from agents import access, publishing, skills
from agents.models import Agent, Conversation, Crew, crew_members_replacer
from agents.selectors import use_grants
from tenancy.models import ApiKey, Membership, Tenant, TenantGroup
from tenancy.policy import Principal
from tenancy.records.saving import delete_recorded, save_validated


# -- services ------------------------------------------------------------------------
def _check_tenant(instance: Any, tenant: Tenant, what: str) -> None:
    if instance.tenant_id != tenant.pk:
        raise Http404(f"No such {what}.")  # other tenants' objects: 404


def agent_save(
    *,
    tenant: Tenant,
    agent: Agent | None = None,
    changes: dict[str, Any],
    pins: list[skills.Pin] | None = None,
    graph_checked: bool = False,
    by: Principal | None = None,
) -> Agent:
    """Create (agent None) or change one of the tenant's agents through its full_clean,
    which compiles the tenant's whole configuration with it — unless `graph_checked`: the
    caller compiled the end state itself (`base.config_checks`); `pins` (None: unchanged)
    replace its skills' pins, in the same transaction. A change to an agent with a required
    evaluation is saved as a draft instead (agents/publishing.py): the live agent comes
    back, with `pending_draft` set. `by` (who acts; None: the platform itself, as seeds
    and an operator's commands) weakens that gate only with the right to override
    evaluations (`publishing.gate_check`: PermissionDenied otherwise)."""
    if agent is None:
        agent = Agent(tenant=tenant)
    else:
        _check_tenant(agent, tenant, "agent")
        if Agent.objects.filter(pk=agent.pk, required_evaluation__isnull=False).exists():
            return publishing.agent_propose(
                tenant=tenant, agent=agent, changes=changes, pins=pins,
                graph_checked=graph_checked, by=by,
            )  # fmt: skip
    agent.graph_checked = graph_checked
    with transaction.atomic():  # a refused pin leaves the agent as it was
        saved = save_validated(agent, changes)
        if pins is not None:
            skills.agent_skills_set(tenant=tenant, by=None, agent=saved, pins=pins)
        if saved.required_evaluation_id is not None:  # gated now: its pins by number
            publishing.pins_freeze(tenant, saved)
    saved.pending_draft = None
    return saved


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
    by: Principal | None = None,
) -> Crew:
    """Create or change a crew; a `members` list replaces its members in that order. The
    tenant's whole configuration is compiled with the crew and these members, unless
    `graph_checked` (see `agent_save`). A change to a crew with a required evaluation is
    saved as a draft instead, as an agent's (agents/publishing.py), and `by` weakens its
    gate only as an agent's."""
    if members is not None and any(agent.tenant_id != tenant.pk for agent in members):
        raise ValidationError({"members": "Choose this tenant's agents."})
    if crew is None:
        crew = Crew(tenant=tenant)
    else:
        _check_tenant(crew, tenant, "crew")
        if Crew.objects.filter(pk=crew.pk, required_evaluation__isnull=False).exists():
            return publishing.crew_propose(
                tenant=tenant, crew=crew, changes=changes, members=members,
                graph_checked=graph_checked, by=by,
            )  # fmt: skip
    crew.graph_checked = graph_checked
    crew.pending_members = members
    after = None if members is None else crew_members_replacer(tenant, members)
    saved = save_validated(crew, changes, after=after)
    saved.pending_draft = None
    return saved


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
    """Delete one of the tenant's conversations, its messages and its attachments (their
    stored files once the deletion commits: agents.conversations)."""
    _check_tenant(conversation, tenant, "conversation")
    conversation.delete()


# -- use grants ----------------------------------------------------------------------------
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
