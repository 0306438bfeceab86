"""Selectors and checks that every tenant-owned read goes through.

Another tenant's object answers 404 (Http404), never 403, so ids of other tenants leak
nothing. A role that may read but not write gets PermissionDenied. A session a password
began acts only in tenants that allow password sign-in (sso.PasswordSignInOff, a 403
saying to use single sign-on): every face asks `membership_to_act` or, in the admin,
`administered_tenant_ids`.
"""

from __future__ import annotations

from typing import TypeVar

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import Http404

from tenancy import rls
from tenancy.models import ADMIN_ROLES, Membership, Role, Tenant
from tenancy.sign_on.sso import refuse_password_session

M = TypeVar("M", bound=models.Model)


def membership_for(user: AbstractBaseUser | AnonymousUser, tenant_slug: str) -> Membership:
    """The user's membership in the active tenant `tenant_slug`; 404 when there is none.
    To act in the tenant, ask `membership_to_act`; this alone is for leaving it."""
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


def membership_to_act(
    user: AbstractBaseUser | AnonymousUser, tenant_slug: str, *, password_session: bool
) -> Membership:
    """The membership a session acts with in `tenant_slug`: 404 as `membership_for`, and
    sso.PasswordSignInOff when `password_session` (sign_in.session_needs_password_sign_in)
    and the tenant turned password sign-in off. One query."""
    membership = membership_for(user, tenant_slug)
    if password_session:
        refuse_password_session(membership.tenant)
    return membership


def tenants_for(user: AbstractBaseUser | AnonymousUser) -> list[Tenant]:
    """The active tenants `user` belongs to (the tenant picker). One query."""
    if not user.is_authenticated:
        return []
    with rls.owner():  # the user's memberships in every tenant: keyed by the user
        return list(Tenant.objects.filter(memberships__user=user, active=True).order_by("name"))


def memberships_of(user: AbstractBaseUser) -> list[Membership]:
    """The user's memberships of active tenants, with their tenants, by tenant name (their
    own account page). One query."""
    with rls.owner():  # the user's memberships in every tenant: keyed by the user
        return list(
            Membership.objects.filter(user=user, tenant__active=True)
            .select_related("tenant")
            .order_by("tenant__name")
        )


def administered_tenant_ids(
    user: AbstractBaseUser | AnonymousUser, *, password_session: bool = False
) -> set[int]:
    """Ids of active tenants where `user` is owner or admin; for a `password_session`, only
    those that allow password sign-in. One query."""
    if not user.is_authenticated:
        return set()
    with rls.owner():  # the user's memberships in every tenant: keyed by the user
        memberships = Membership.objects.filter(
            user=user, role__in=ADMIN_ROLES, tenant__active=True
        )
        if password_session:
            memberships = memberships.filter(tenant__password_sign_in=True)
        return set(memberships.values_list("tenant_id", flat=True))


def administered_tenant_refusing_password(user: AbstractBaseUser) -> Tenant | None:
    """When `user` administers active tenants and every one turned password sign-in off, the
    first of them by name (a password then opens no tenant in the admin); else None. One
    query."""
    with rls.owner():  # the user's memberships in every tenant: keyed by the user
        administered = list(
            Tenant.objects.filter(
                memberships__user=user, memberships__role__in=ADMIN_ROLES, active=True
            ).order_by("name")
        )
    if not administered or any(tenant.password_sign_in for tenant in administered):
        return None
    return administered[0]


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


def filter_given(queryset: models.QuerySet[M], **lookups) -> models.QuerySet[M]:
    """`queryset` filtered by each of `lookups` whose value is given: a list's optional
    filters, where None means any (a falsy value such as False or "" still filters)."""
    return queryset.filter(**{name: value for name, value in lookups.items() if value is not None})


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
