"""The tenancy's reads that the faces list and show: API keys, members, invitations,
groups, the audit log. Services (services.py beside this) write; these only read. Each
takes the tenant and never returns another tenant's rows; one asked for by id answers 404.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Model, Q, QuerySet
from django.utils import timezone

from tenancy.access import filter_given, get_for_tenant
from tenancy.models import ApiKey, Invitation, Membership, Tenant, TenantGroup
from tenancy.records import history
from tenancy.records.audit_log import AuditFilterForm, audit_entries


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1  # matches nothing: a 404 like any unknown id


# -- API keys -------------------------------------------------------------------------------
def api_keys_of(*, tenant: Tenant, active: bool | None = None) -> QuerySet:
    """The tenant's API keys with who made them (and whether that maker still stands);
    only usable (`active`) or only revoked or expired ones when asked."""
    keys = (
        ApiKey.objects.filter(tenant=tenant)
        .select_related("created_by", "created_by_key")
        .with_creator_standing()
    )
    if active is not None:
        usable = Q(revoked_at__isnull=True) & (
            Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
        )
        keys = keys.filter(usable if active else ~usable)
    return keys


def api_key_get(*, tenant: Tenant, key_id: Any) -> ApiKey:
    return get_for_tenant(api_keys_of(tenant=tenant), tenant, pk=_int(key_id))


def api_key_of(*, tenant: Tenant, key_id: Any) -> ApiKey | None:
    """The tenant's key `key_id`, or None (a form's choice, not a path). One query."""
    return ApiKey.objects.filter(tenant=tenant, pk=_int(key_id)).first()


# -- members, invitations, groups -----------------------------------------------------------
def memberships_of(*, tenant: Tenant, role: str | None = None) -> QuerySet:
    """The tenant's memberships with their users; only those of `role` when given."""
    memberships = Membership.objects.filter(tenant=tenant).select_related("user")
    return filter_given(memberships, role=role)


def membership_get(*, tenant: Tenant, membership_id: Any) -> Membership:
    return get_for_tenant(memberships_of(tenant=tenant), tenant, pk=_int(membership_id))


def member_user(*, tenant: Tenant, username: str) -> AbstractBaseUser | None:
    """The member of the tenant called `username`, or None. One query."""
    users = get_user_model().objects.filter(username=username, memberships__tenant=tenant)
    return users.first()


def invitations_of(*, tenant: Tenant, open_only: bool = False) -> QuerySet:
    """The tenant's invitations with who invited; only those still open (not accepted,
    declined, revoked or expired) with `open_only`."""
    invitations = Invitation.objects.filter(tenant=tenant).select_related("invited_by")
    if open_only:
        invitations = invitations.filter(
            accepted_at=None, declined_at=None, revoked_at=None, expires_at__gt=timezone.now()
        )
    return invitations


def invitation_get(*, tenant: Tenant, invitation_id: Any) -> Invitation:
    return get_for_tenant(invitations_of(tenant=tenant), tenant, pk=_int(invitation_id))


def groups_of(*, tenant: Tenant, excluding: list[int] | None = None) -> QuerySet:
    """The tenant's groups (but those of ids `excluding`)."""
    groups = TenantGroup.objects.filter(tenant=tenant)
    return groups if not excluding else groups.exclude(pk__in=excluding)


def groups_with_members(*, tenant: Tenant) -> QuerySet:
    """The tenant's groups with their Django groups' users (two queries)."""
    return TenantGroup.objects.filter(tenant=tenant).prefetch_related("group__user_set")


def group_get(*, tenant: Tenant, group_id: Any) -> TenantGroup:
    """The tenant's group with its Django group; 404 otherwise."""
    return get_for_tenant(TenantGroup.objects.select_related("group"), tenant, pk=_int(group_id))


# -- audit log and configuration versions --------------------------------------------------
def audit_entries_matching(*, tenant: Tenant, form: AuditFilterForm) -> QuerySet:
    """The tenant's audit entries that a valid filter form picks, newest (highest id)
    first: the order the API's cursor pages follow."""
    return form.apply(audit_entries(tenant)).order_by("-id")


def versioned_object_get(*, tenant: Tenant, kind: str, field: str, value: Any) -> Model:
    """The tenant's object of a versioned kind (history.register) whose `field` is `value`;
    404 otherwise."""
    return get_for_tenant(history.kind_named(kind).model, tenant, **{field: value})


def tenant_rows(queryset: QuerySet, *, tenant: Tenant) -> QuerySet:
    """The rows of `queryset` that belong to `tenant`: the choices of a field that names
    one of the tenant's objects (another tenant's is "does not exist")."""
    return queryset.filter(tenant=tenant)


# -- tenants by slug ---------------------------------------------------------------------------
def tenant_slugs(*, ids: set[int]) -> dict[int, str]:
    """Each of these tenants' slug by id (the caller holds rls.owner: every tenant)."""
    return dict(Tenant.objects.filter(pk__in=ids).values_list("pk", "slug"))


def active_tenant_named(*, slug: str) -> Tenant | None:
    """The active tenant `slug`, or None (the caller holds rls.owner: before sign-in, a
    tenant is found by its public slug)."""
    return Tenant.objects.filter(slug=slug, active=True).first()


def value_taken(*, model: type[Model], tenant: Tenant, field: str, value: Any, but: Any) -> bool:
    """Whether another of the tenant's rows of `model` (not the one of pk `but`) has this
    value in `field`: a form's check of a per-tenant unique name. One query."""
    others = model._default_manager.filter(tenant=tenant, **{field: value})
    return others.exclude(pk=but).exists()


def latest_version_number(*, tenant: Tenant, instance: Model) -> int | None:
    """The number of the object's newest configuration version, or None. One query."""
    return history.versions(tenant, instance).values_list("number", flat=True).first()


def member_users(*, tenant: Tenant) -> QuerySet:
    """The users who are members of the tenant, by username: a form's choices."""
    return get_user_model().objects.filter(memberships__tenant=tenant).order_by("username")


def unrevoked_api_keys(*, tenant: Tenant) -> QuerySet:
    """The tenant's API keys not revoked: a form's choices."""
    return ApiKey.objects.filter(tenant=tenant, revoked_at=None)
