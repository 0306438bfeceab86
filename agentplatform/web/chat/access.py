"""Who may chat with what, and whose conversations a user may open.

Any member (role member or higher) may chat with any active agent or crew of the tenant,
unless django-guardian object permissions restrict it: an agent (crew) on which any user or
group holds `agents.use_agent` (`agents.use_crew`) is usable only by those holders and by
the tenant's admins and owners. Viewers read their conversations and start nothing.

A conversation is its owner's alone: another user's (or another tenant's) answers 404.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.http import Http404
from guardian.models import GroupObjectPermission, UserObjectPermission
from guardian.shortcuts import get_objects_for_user

from agentplatform.tenancy.access import get_for_tenant
from agentplatform.tenancy.models import Membership, Role
from agents.models import Agent, Conversation, Crew

USE_PERMISSIONS = {Agent: "use_agent", Crew: "use_crew"}


def may_send(membership: Membership) -> bool:
    """Members and above start chats and send; viewers read."""
    return membership.has_role(Role.MEMBER)


def usable(model: type[Agent] | type[Crew], user: AbstractBaseUser, membership: Membership):
    """The tenant's active agents (or crews) this user may chat with. Three queries at most:
    the candidates, the restricted ones, and the ones the user holds the permission on."""
    candidates = model.objects.filter(tenant=membership.tenant, active=True)
    if not may_send(membership):
        return candidates.none()
    if membership.has_role(Role.ADMIN):
        return candidates
    codename = USE_PERMISSIONS[model]
    restricted = _restricted_ids(model, codename, candidates)
    if not restricted:
        return candidates
    held = get_objects_for_user(
        user,
        f"agents.{codename}",
        klass=candidates.filter(pk__in=restricted),
        accept_global_perms=False,
    ).values_list("pk", flat=True)
    return candidates.exclude(pk__in=set(restricted) - set(held))


def may_use(target: Agent | Crew, user: AbstractBaseUser, membership: Membership) -> bool:
    return usable(type(target), user, membership).filter(pk=target.pk).exists()


def _restricted_ids(model, codename: str, candidates: models.QuerySet) -> set[int]:
    """Ids among `candidates` on which any user or group holds the permission."""
    content_type = ContentType.objects.get_for_model(model)
    ids = {str(pk) for pk in candidates.values_list("pk", flat=True)}
    found: set[int] = set()
    for permission_model in (UserObjectPermission, GroupObjectPermission):
        found.update(
            int(pk)
            for pk in permission_model.objects.filter(
                content_type=content_type, permission__codename=codename, object_pk__in=ids
            ).values_list("object_pk", flat=True)
        )
    return found


def own_conversations(user: AbstractBaseUser, membership: Membership):
    """The user's conversations in this tenant, most recently active first."""
    return Conversation.objects.filter(tenant=membership.tenant, owner_user=user).select_related(
        "agent", "crew"
    )


def conversation_for(
    user: AbstractBaseUser, membership: Membership, conversation_id
) -> Conversation:
    """The user's own conversation; 404 for anyone else's, in this tenant or another."""
    try:
        pk = int(conversation_id)
    except (TypeError, ValueError):
        raise Http404("No such conversation.") from None
    return get_for_tenant(own_conversations(user, membership), membership.tenant, pk=pk)
