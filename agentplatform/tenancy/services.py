"""Writes for tenancy. Callers: management commands, the admin, the web UI and API."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, Group
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from agentplatform.tenancy import api_keys
from agentplatform.tenancy.models import ApiKey, Membership, Role, Scope, Tenant, TenantGroup


@dataclass(frozen=True)
class CreatedUser:
    user: AbstractUser
    password: str | None  # set only when this call created the user and chose the password


@transaction.atomic
def tenant_create(*, slug: str, name: str, owner: AbstractUser | None = None) -> Tenant:
    tenant = Tenant(slug=slug, name=name)
    tenant.full_clean()
    tenant.save()
    if owner is not None:
        membership_set(tenant=tenant, user=owner, role=Role.OWNER)
    return tenant


def user_get_or_create(
    *, username: str, email: str = "", password: str | None = None
) -> CreatedUser:
    """The user named `username`, created with `password` (or a generated one) if missing."""
    User = get_user_model()
    user = User.objects.filter(username=username).first()
    if user is not None:
        return CreatedUser(user=user, password=None)
    chosen = password or secrets.token_urlsafe(12)
    user = User.objects.create_user(username=username, email=email, password=chosen)
    return CreatedUser(user=user, password=chosen)


@transaction.atomic
def membership_set(*, tenant: Tenant, user: AbstractUser, role: str) -> Membership:
    """Add `user` to `tenant` with `role`, or change their role.

    Refuses to demote the last owner. Owners and admins get `is_staff` so the tenant
    admin (scoped to their tenants) opens for them.
    """
    if role not in Role.values:
        raise ValidationError({"role": f"Unknown role {role!r}."})
    membership = Membership.objects.select_for_update().filter(tenant=tenant, user=user).first()
    if membership and membership.role == Role.OWNER and role != Role.OWNER:
        _refuse_if_last_owner(membership)
    if membership is None:
        membership = Membership.objects.create(tenant=tenant, user=user, role=role)
    else:
        membership.role = role
        membership.save(update_fields=["role"])
    if role in (Role.OWNER, Role.ADMIN) and not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    return membership


@transaction.atomic
def membership_remove(*, membership: Membership) -> None:
    if membership.role == Role.OWNER:
        _refuse_if_last_owner(membership)
    membership.delete()


def _refuse_if_last_owner(membership: Membership) -> None:
    owners = Membership.objects.select_for_update().filter(
        tenant_id=membership.tenant_id, role=Role.OWNER
    )
    if owners.exclude(pk=membership.pk).count() == 0:
        raise ValidationError("A tenant must keep at least one owner.")


def api_key_create(
    *,
    tenant: Tenant,
    name: str,
    scopes: list[str],
    created_by: AbstractUser | None = None,
    role: str | None = None,
    expires_at: datetime | None = None,
    allowed_agents: list[str] | None = None,
    allowed_tools: list[str] | None = None,
) -> tuple[ApiKey, str]:
    """Create a key and return it with the full secret, which is never retrievable again.

    The key never acts beyond `role`: the role `created_by` has in the tenant now (one
    query), else the given `role` (a key making a key passes its own), else owner (the
    operator's commands)."""
    unknown = sorted(set(scopes) - set(Scope.values))
    if unknown:
        raise ValidationError({"scopes": f"Unknown scopes: {', '.join(unknown)}."})
    if not scopes:
        raise ValidationError({"scopes": "Give at least one scope."})
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": "Expiry must be in the future."})
    if created_by is not None:
        creator_role = (
            Membership.objects.filter(tenant=tenant, user=created_by)
            .values_list("role", flat=True)
            .first()
        )
        if creator_role is None and not created_by.is_superuser:
            raise ValidationError("Only the tenant's members can make its keys.")
        role = creator_role or Role.OWNER
    new = api_keys.generate()
    key = ApiKey(
        tenant=tenant,
        name=name,
        prefix=new.prefix,
        secret_hash=new.secret_hash,
        scopes=sorted(set(scopes)),
        created_by=created_by,
        role=role or Role.OWNER,
        expires_at=expires_at,
        allowed_agents=sorted(set(allowed_agents or [])),
        allowed_tools=sorted(set(allowed_tools or [])),
    )
    key.full_clean()
    key.save()
    return key, new.full_key


def api_key_revoke(*, key: ApiKey) -> ApiKey:
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key


# -- groups -------------------------------------------------------------------------------
def group_create(*, tenant: Tenant, name: str) -> TenantGroup:
    """A tenant group, backed by a Django auth Group named `<tenant id>:<name>`."""
    name = name.strip()
    if not name or len(name) > 100 or "\x00" in name:
        raise ValidationError({"name": "Give a name of 1-100 characters."})
    if TenantGroup.objects.filter(tenant=tenant, name=name).exists():
        raise ValidationError({"name": "A group of this name exists."})
    with transaction.atomic():
        group = Group.objects.create(name=f"{tenant.pk}:{name}")
        return TenantGroup.objects.create(tenant=tenant, name=name, group=group)


def group_delete(*, group: TenantGroup) -> None:
    """Delete the group (its auth Group, and so its members and object grants, go too)."""
    group.group.delete()


def group_member_set(*, group: TenantGroup, user: AbstractUser, member: bool) -> None:
    """Add (`member`) or remove a tenant member to or from the group."""
    if member:
        if not Membership.objects.filter(tenant_id=group.tenant_id, user=user).exists():
            raise ValidationError({"user": "Only the tenant's members can join its groups."})
        group.group.user_set.add(user)
    else:
        group.group.user_set.remove(user)
