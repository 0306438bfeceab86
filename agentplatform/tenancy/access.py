"""Selectors and checks that every tenant-owned read goes through.

Another tenant's object answers 404 (Http404), never 403, so ids of other tenants leak
nothing. A role that may read but not write gets PermissionDenied.
"""

from __future__ import annotations

from typing import TypeVar

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import Http404

from agentplatform.tenancy import rls
from agentplatform.tenancy.models import ADMIN_ROLES, Membership, Role, Tenant

M = TypeVar("M", bound=models.Model)


def membership_for(user: AbstractBaseUser | AnonymousUser, tenant_slug: str) -> Membership:
    """The user's membership in the active tenant `tenant_slug`; 404 when there is none."""
    if not user.is_authenticated:
        raise Http404("No such tenant.")
    with rls.owner():  # finds the tenant: keyed by the signed-in user, across tenants
        membership = (
            Membership.objects.select_related("tenant")
            .filter(user=user, tenant__slug=tenant_slug, tenant__active=True)
            .first()
        )
    if membership is None:
        raise Http404("No such tenant.")
    return membership


def tenants_for(user: AbstractBaseUser | AnonymousUser) -> list[Tenant]:
    """The active tenants `user` belongs to (the tenant picker). One query."""
    if not user.is_authenticated:
        return []
    with rls.owner():  # the user's memberships in every tenant: keyed by the user
        return list(Tenant.objects.filter(memberships__user=user, active=True).order_by("name"))


def administered_tenant_ids(user: AbstractBaseUser | AnonymousUser) -> set[int]:
    """Ids of active tenants where `user` is owner or admin. One query."""
    if not user.is_authenticated:
        return set()
    with rls.owner():  # the user's memberships in every tenant: keyed by the user
        return set(
            Membership.objects.filter(
                user=user, role__in=ADMIN_ROLES, tenant__active=True
            ).values_list("tenant_id", flat=True)
        )


def require_role(membership: Membership, role: str) -> None:
    if not membership.has_role(role):
        raise PermissionDenied(f"This needs the {Role(role).label.lower()} role or higher.")


def get_for_tenant(queryset: models.QuerySet[M] | type[M], tenant: Tenant, **lookup) -> M:
    """The tenant's object matching `lookup`; 404 for a missing or another tenant's one."""
    if isinstance(queryset, type):
        queryset = queryset._default_manager.all()
    obj = queryset.filter(tenant=tenant, **lookup).first()
    if obj is None:
        raise Http404(f"No such {queryset.model._meta.verbose_name}.")
    return obj


def get_for_write(
    queryset: models.QuerySet[M] | type[M],
    membership: Membership,
    *,
    role: str = Role.MEMBER,
    **lookup,
) -> M:
    """As get_for_tenant, then PermissionDenied unless the membership has `role`."""
    obj = get_for_tenant(queryset, membership.tenant, **lookup)
    require_role(membership, role)
    return obj
