"""Which remembered facts a principal may see (REST, the memory page): the rule of each
fact's scope.

- A person (a session) sees the facts about them (person scope, their own); an admin also
  the shared ones (agent and tenant scope) and the keys' (key scope). Another person's
  fact is never theirs to see, whoever they are: 404.
- An API key sees its own key-scope facts; one with the admin scope sees every fact of the
  tenant (to honour erasure requests), optionally one person's.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q, QuerySet

from agents.models import Fact, FactScope
from tenancy.access import get_for_tenant
from tenancy.models import Scope, Tenant
from tenancy.policy import Principal

SHARED = (FactScope.AGENT, FactScope.TENANT, FactScope.KEY)


def facts_visible(
    *, principal: Principal, user_id: int | None = None, scope: str | None = None
) -> QuerySet:
    """The facts `principal` may see, newest first, with their agent; `user_id`, `scope`:
    only those (either may match nothing)."""
    facts = Fact.objects.filter(tenant=principal.tenant).select_related("agent", "edited_by")
    if principal.api_key is None:
        mine = Q(scope=FactScope.PERSON, user=principal.user)
        facts = facts.filter(mine | Q(scope__in=SHARED) if principal.is_admin else mine)
    elif not principal.has_scope(Scope.ADMIN):
        facts = facts.filter(scope=FactScope.KEY, api_key=principal.api_key)
    if user_id is not None:
        facts = facts.filter(user_id=user_id)
    if scope is not None:
        facts = facts.filter(scope=scope)
    return facts.order_by("-id")


def fact_visible(*, principal: Principal, fact_id: Any) -> Fact:
    """One fact of `facts_visible`; 404 otherwise."""
    return get_for_tenant(facts_visible(principal=principal), principal.tenant, pk=_pk(fact_id))


def fact_about(*, tenant: Tenant, user: AbstractBaseUser, fact_id: Any) -> Fact:
    """One fact about `user` (person scope); 404 for any other, whoever asks."""
    return get_for_tenant(facts_about(tenant=tenant, user=user), tenant, pk=_pk(fact_id))


def facts_about(*, tenant: Tenant, user: AbstractBaseUser) -> QuerySet:
    """What agents remember about `user` in `tenant` (person scope), newest first."""
    return (
        Fact.objects.filter(tenant=tenant, scope=FactScope.PERSON, user=user)
        .select_related("agent", "edited_by")
        .order_by("-id")
    )


def _pk(value: Any) -> int:
    try:
        pk = int(value)
    except (TypeError, ValueError):
        return 0
    return pk if 0 < pk < 2**63 else 0  # 0 matches nothing: a 404 like any unknown id
