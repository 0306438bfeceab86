"""Who may chat with what, and whose conversations a user may open.

Who may start what is the access policy's (`agents.access`): any member may chat with any
active agent or crew, unless use grants restrict it to their grantees (and admins); a crew
needs the use of its members too. Viewers read their conversations and start nothing.

A conversation is its owner's alone: another user's (or another tenant's) answers 404.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser

from agents import access as agent_access
from agents import selectors
from agents.models import Agent, Conversation, Crew
from tenancy.models import Membership, Role
from tenancy.policy import Principal


def may_send(membership: Membership) -> bool:
    """Members and above start chats and send; viewers read."""
    return membership.has_role(Role.MEMBER)


def usable(model: type[Agent] | type[Crew], principal: Principal):
    """The active agents (or crews) the user may chat with (`agents.access.usable`)."""
    return agent_access.usable(model, principal)


def may_use(target: Agent | Crew, principal: Principal) -> bool:
    return agent_access.may_start(principal, target)


def conversation_for(
    user: AbstractBaseUser, membership: Membership, conversation_id
) -> Conversation:
    """The user's own conversation; 404 for anyone else's, in this tenant or another."""
    return selectors.conversation_of(
        tenant=membership.tenant, owner=user, conversation_id=conversation_id
    )
