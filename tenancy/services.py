"""Writes for tenancy. Callers: management commands, the admin, the web UI and API."""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, AnonymousUser, Group
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone
from guardian.conf import settings as guardian_settings

from tenancy import api_keys, rls
from tenancy.models import (
    ADMIN_ROLES,
    ROLE_RANK,
    ApiKey,
    AuditAction,
    Invitation,
    InvitationStatus,
    Membership,
    Role,
    Scope,
    Tenant,
    TenantGroup,
)
from tenancy.policy import Principal
from tenancy.records import audit
from tenancy.sign_on.sso import SSOProvider, providers_serving, roles_from_groups

logger = logging.getLogger(__name__)


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


def tenant_policy_set(*, tenant: Tenant, require_confirmation_for_writes: bool) -> Tenant:
    """Change the tenant's configuration policy (recorded in its audit log)."""
    return _tenant_setting_set(
        tenant, "require_confirmation_for_writes", require_confirmation_for_writes
    )


NO_PROVIDER_FOR_TENANT = (
    "Add an identity provider for this tenant first (its own, or a platform-wide one with a "
    "group rule for it), or its members could not sign in at all."
)


SIGN_IN_WITH_SSO_FIRST = (
    "Sign in with single sign-on first, then turn password sign-in off: a session a password "
    "began cannot act in a tenant without passwords, so you would be locked out of it."
)


def check_password_sign_in_off(*, tenant: Tenant, password_session: bool = False) -> None:
    """ValidationError unless an enabled identity provider signs this tenant's members in,
    and the change comes from no `password_session` (sign_in.session_needs_password_sign_in):
    whoever turns passwords off has shown that single sign-on lets them in. API keys and the
    platform's superusers are never refused in the tenant afterwards, so they may."""
    if not providers_serving(tenant):
        raise ValidationError(NO_PROVIDER_FOR_TENANT, code="no_identity_provider")
    if password_session:
        raise ValidationError(SIGN_IN_WITH_SSO_FIRST, code="password_session")


def tenant_sign_in_set(
    *, tenant: Tenant, password_sign_in: bool, password_session: bool = False
) -> Tenant:
    """Turn password sign-in on or off for the tenant's members (recorded in its audit log).
    Off needs an identity provider for the tenant and a caller other than a password session
    (check_password_sign_in_off), checked under the tenant row's lock, which a provider's
    removal takes too (identity_providers.check_still_served): the two cannot both pass at
    once."""

    def check(locked: Tenant, before: bool) -> None:
        if before and not password_sign_in:
            check_password_sign_in_off(tenant=locked, password_session=password_session)

    return _tenant_setting_set(tenant, "password_sign_in", password_sign_in, check=check)


def tenant_time_zone_set(*, tenant: Tenant, time_zone: str) -> Tenant:
    """Set where the tenant's quota days and months begin (an IANA name, validated by the
    model: a ValidationError naming `time_zone`); recorded in its audit log. Limits apply it
    at their next call (agents.quotas rebuilds its rules on the tenant's save)."""
    return _tenant_setting_set(tenant, "time_zone", time_zone)


def _tenant_setting_set(
    tenant: Tenant, name: str, value: Any, *, check: Callable[[Tenant, Any], None] | None = None
) -> Tenant:
    """Set one of the tenant's own settings on its row, locked (a concurrent change of
    another setting is kept, never overwritten by a stale copy), `check`ed (the locked row,
    the value before), validated, saved alone and recorded in the audit log (the tenant
    row is not an audited model). `tenant` gets the stored value; a ValidationError leaves
    both unchanged."""
    with transaction.atomic():
        locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
        before = getattr(locked, name)
        if check is not None:
            check(locked, before)
        setattr(locked, name, value)
        locked.full_clean()
        locked.save(update_fields=[name])
        if before != getattr(locked, name):
            audit.record(
                tenant=locked,
                action=AuditAction.CONFIG_CHANGED,
                obj=locked,
                changes={name: [before, getattr(locked, name)]},
            )
    setattr(tenant, name, getattr(locked, name))
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


CANNOT_JOIN = "This account cannot be a member of a tenant."


def check_may_join(*, user: AbstractUser, added_by: AbstractUser | None = None) -> None:
    """Refuse accounts that must never become members: django-guardian's anonymous user
    (a real row, named settings.ANONYMOUS_USER_NAME), inactive accounts, and - when a
    non-superuser adds them - superusers, whose powers a tenant admin must not borrow.
    `added_by` None is the platform itself (commands, tenant creation, test factories).
    The message is the same for every reason."""
    refused = (
        user.get_username() == guardian_settings.ANONYMOUS_USER_NAME
        or not user.is_active
        or (user.is_superuser and added_by is not None and not added_by.is_superuser)
    )
    if refused:
        raise ValidationError(CANNOT_JOIN, code="cannot_join")


OWNERS_ONLY = "Only an owner can grant or take away the owner role."


def require_owner_for(by: Principal | None, *roles: str) -> None:
    """PermissionDenied unless `by` (None: the platform) may touch these roles: making,
    changing, removing or inviting an owner needs an owner's authority (an owner's
    session, or an admin-scope key made by an owner)."""
    if by is not None and Role.OWNER in roles and not by.is_owner:
        raise PermissionDenied(OWNERS_ONLY)


@transaction.atomic
def membership_set(
    *,
    tenant: Tenant,
    user: AbstractUser,
    role: str,
    added_by: AbstractUser | None = None,
    by: Principal | None = None,
) -> Membership:
    """Add `user` to `tenant` with `role`, or change their role, with `by`'s authority
    (`require_owner_for`; None: the platform).

    A new member must pass check_may_join. Refuses to demote the last owner. Owners and
    admins get `is_staff` so the tenant admin (scoped to their tenants) opens for them.
    """
    if role not in Role.values:
        raise ValidationError({"role": f"Unknown role {role!r}."})
    membership = Membership.objects.select_for_update().filter(tenant=tenant, user=user).first()
    require_owner_for(by, role, *([membership.role] if membership else []))
    if membership and membership.role == Role.OWNER and role != Role.OWNER:
        _refuse_if_last_owner(membership)
    previous = None if membership is None else audit.snapshot(membership)
    if membership is None:
        check_may_join(user=user, added_by=added_by)
        membership = Membership.objects.create(tenant=tenant, user=user, role=role)
    else:
        membership.role = role
        membership.save(update_fields=["role"])
    if role in (Role.OWNER, Role.ADMIN) and not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    audit.record_saved(membership, previous)
    return membership


@transaction.atomic
def membership_remove(*, membership: Membership, by: Principal | None = None) -> list[ApiKey]:
    """Remove a member with `by`'s authority (`require_owner_for`); the last owner stays.
    The keys they made in the tenant (directly or with their keys) are revoked with it, and
    the one `member.removed` entry names them. Returns those keys."""
    require_owner_for(by, membership.role)
    if membership.role == Role.OWNER:
        _refuse_if_last_owner(membership)
    revoked = api_keys.revoke_made_by(user_id=membership.user_id, tenant_id=membership.tenant_id)
    details = {"revoked_api_keys": [_key_named(key) for key in revoked]} if revoked else None
    audit.record_deleted(membership, details=details)
    membership.delete()
    return revoked


def _refuse_if_last_owner(membership: Membership) -> None:
    owners = Membership.objects.select_for_update().filter(
        tenant_id=membership.tenant_id, role=Role.OWNER
    )
    if owners.exclude(pk=membership.pk).count() == 0:
        raise ValidationError("A tenant must keep at least one owner.")


def memberships_sync(*, user: AbstractUser, provider: SSOProvider, groups: set[str]) -> None:
    """Make the user's memberships follow their groups (the roles single sign-on's
    `roles_from_groups` gives): add the missing ones (marked as this provider's), change
    roles that differ, and remove the ones this provider made that the groups no longer
    give (never one made otherwise). A change the tenancy rules refuse (the last owner) is
    logged and left as it is. Audited like any membership change."""
    wanted = roles_from_groups(provider, groups)
    if provider.tenant_id is not None:  # (its rules are its tenant's: kept so, defensively)
        wanted = {t: role for t, role in wanted.items() if t == provider.tenant_id}
    with rls.owner():  # one person's memberships across tenants, keyed by the user
        tenants = Tenant.objects.in_bulk(list(wanted))
        current = {m.tenant_id: m for m in Membership.objects.filter(user=user)}
        for tenant_id, role in wanted.items():
            membership = current.get(tenant_id)
            if membership is not None and membership.role == role:
                continue
            try:
                with rls.tenant_scope(tenant_id):  # the audit entry is the tenant's
                    made = membership_set(tenant=tenants[tenant_id], user=user, role=role)
            except (ValidationError, PermissionDenied) as error:
                logger.warning(
                    "SSO %s: role of %s in tenant %s kept: %s",
                    provider.slug,
                    user.pk,
                    tenant_id,
                    error,
                )
                continue
            if membership is None:
                Membership.objects.filter(pk=made.pk).update(sso_provider=provider.slug)
        for tenant_id, membership in current.items():
            if tenant_id in wanted or membership.sso_provider != provider.slug:
                continue
            if provider.tenant_id is not None and tenant_id != provider.tenant_id:
                continue  # a tenant's own provider never touches another tenant's members
            try:
                with rls.tenant_scope(tenant_id):
                    membership_remove(membership=membership)
            except (ValidationError, PermissionDenied) as error:
                logger.warning(
                    "SSO %s: membership %s kept: %s", provider.slug, membership.pk, error
                )


def member_named(tenant: Tenant, username: str, *, at_most: str) -> AbstractUser | None:
    """The tenant's active member with this username whose role is not above `at_most`
    (a key acting for members never acts as someone who outranks it), if any. One query."""
    membership = (
        Membership.objects.filter(tenant=tenant, user__username=username, user__is_active=True)
        .select_related("user")
        .first()
    )
    if membership is None or ROLE_RANK[Role(membership.role)] > ROLE_RANK[Role(at_most)]:
        return None
    return membership.user


@transaction.atomic
def api_key_create(
    *,
    tenant: Tenant,
    name: str,
    scopes: list[str],
    created_by: AbstractUser | None = None,
    made_by_key: ApiKey | None = None,
    role: str | None = None,
    expires_at: datetime | None = None,
    allowed_agents: list[str] | None = None,
    allowed_tools: list[str] | None = None,
    acts_for_members: bool = False,
) -> tuple[ApiKey, str]:
    """Create a key and return it with the full secret, which is never retrievable again.

    The key never acts beyond `role`: the effective role of `made_by_key` (a key making a
    key: `created_by` is then the maker's, the person at the root of the chain, whose
    current role caps both and whose removal revokes both), else the role `created_by`
    has in the tenant now (one query), else the given `role`, else owner (the operator's
    commands). A key made by a key is never freer than it: its limits are within the
    maker's (none given: the maker's) and it expires no later."""
    unknown = sorted(set(scopes) - set(Scope.values))
    if unknown:
        raise ValidationError({"scopes": f"Unknown scopes: {', '.join(unknown)}."})
    if not scopes:
        raise ValidationError({"scopes": "Give at least one scope."})
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": "Expiry must be in the future."})
    if made_by_key is not None:
        role = made_by_key.effective_role
        if role is None or made_by_key.tenant_id != tenant.pk:
            raise ValidationError("The key making it cannot make this tenant's keys.")
        created_by = made_by_key.created_by
        allowed_agents = _within(made_by_key.allowed_agents, allowed_agents, "allowed_agents")
        allowed_tools = _within(made_by_key.allowed_tools, allowed_tools, "allowed_tools")
        if acts_for_members and not made_by_key.acts_for_members:
            raise ValidationError({"acts_for_members": "The key making it does not."})
        if made_by_key.expires_at is not None:
            if expires_at is not None and expires_at > made_by_key.expires_at:
                raise ValidationError({"expires_at": "No later than the key making it."})
            expires_at = expires_at or made_by_key.expires_at
    elif created_by is not None:
        creator_role = (
            Membership.objects.filter(tenant=tenant, user=created_by)
            .values_list("role", flat=True)
            .first()
        )
        if creator_role is None and not created_by.is_superuser:
            raise ValidationError("Only the tenant's members can make its keys.")
        role = creator_role or Role.OWNER
    if acts_for_members and (role or Role.OWNER) not in ADMIN_ROLES:
        raise ValidationError(
            {"acts_for_members": "Only an owner's or admin's key may act for members."}
        )
    new = api_keys.generate()
    key = ApiKey(
        tenant=tenant,
        name=name,
        prefix=new.prefix,
        secret_hash=new.secret_hash,
        scopes=sorted(set(scopes)),
        created_by=created_by,
        created_by_key=made_by_key,
        role=role or Role.OWNER,
        expires_at=expires_at,
        allowed_agents=sorted(set(allowed_agents or [])),
        allowed_tools=sorted(set(allowed_tools or [])),
        acts_for_members=acts_for_members,
    )
    key.full_clean()
    key.save()
    if created_by is not None:
        key.read_creator_standing()  # now, so the key may be judged from async code too
    audit.record_api_key(key, AuditAction.API_KEY_CREATED, actor=made_by_key or created_by)
    return key, new.full_key


def _key_named(key: ApiKey) -> dict[str, Any]:
    return {"id": key.pk, "name": key.name, "prefix": key.prefix}


def _within(makers: list[str], asked: list[str] | None, field: str) -> list[str]:
    """A new key's limit given a maker's: the maker's if none is asked; refused if wider."""
    if not makers:
        return list(asked or [])
    if not asked:
        return list(makers)
    wider = sorted(set(asked) - set(makers))
    if wider:
        raise ValidationError(
            {field: f"Beyond the limits of the key making it: {', '.join(wider)}."}
        )
    return list(asked)


@transaction.atomic
def api_key_revoke(*, key: ApiKey) -> ApiKey:
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        audit.record_api_key(key, AuditAction.API_KEY_REVOKED)
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


# -- invitations ------------------------------------------------------------------------
# Adding someone is an offer they accept while signed in: the admin learns nothing about
# which accounts exist, and nobody is attached to a tenant without their say.
INVITATION_GONE = {
    InvitationStatus.ACCEPTED: "This invitation has been used already.",
    InvitationStatus.DECLINED: "This invitation was declined.",
    InvitationStatus.REVOKED: "This invitation was withdrawn by the tenant's admins.",
    InvitationStatus.EXPIRED: "This invitation has expired; ask for a new one.",
}
INVITATION_UNKNOWN = "This invitation link is not valid. Check it, or ask for a new one."
INVITATION_NOT_YOURS = (
    "This invitation is for another account. Sign in as the person it was sent to."
)


class InvitationRefused(ValidationError):
    """An invitation that cannot be used (unknown, used, expired, someone else's): a
    message for the person holding the link."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message, code="invitation")
        self.status = status


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def invitation_create(
    *,
    tenant: Tenant,
    invitee: str,
    role: str,
    invited_by: AbstractUser | None,
    by: Principal | None = None,
) -> tuple[Invitation, str]:
    """An invitation for a username or e-mail address, and its token (never stored; only
    its hash is). The same outcome whether or not such an account exists. Inviting an
    owner needs `by` to be one (`require_owner_for`). Mails the link when an address is
    known, after the commit; a mail failure is logged, the invitation stands."""
    require_owner_for(by, role)
    invitee = invitee.strip()
    if role not in Role.values:
        raise ValidationError({"role": f"Unknown role {role!r}."})
    if not invitee:
        raise ValidationError({"invitee": "Give a username or an e-mail address."})
    if invitee.casefold() == guardian_settings.ANONYMOUS_USER_NAME.casefold():
        raise ValidationError({"invitee": CANNOT_JOIN})
    if "@" in invitee:
        try:
            validate_email(invitee)
        except ValidationError:
            raise ValidationError({"invitee": "This is not a valid e-mail address."}) from None
    token = secrets.token_urlsafe(32)
    invitation = Invitation(
        tenant=tenant,
        invitee=invitee,
        role=role,
        token_hash=_token_hash(token),
        invited_by=invited_by,
        expires_at=timezone.now() + timedelta(days=settings.INVITATION_TTL_DAYS),
    )
    invitation.full_clean()
    invitation.save()
    return invitation, token


def invitation_mail(*, invitation: Invitation, accept_url: str) -> None:
    """Send the link to the invitee's address: the one typed, or the account's for a
    username (the admin is not told either way). Runs after the transaction commits."""

    def send() -> None:
        address = invitation.invitee if "@" in invitation.invitee else None
        if address is None:
            user = get_user_model().objects.filter(username=invitation.invitee).first()
            address = user.email if user is not None and user.email else None
        if address is None:
            return
        try:
            send_mail(
                f"You are invited to {invitation.tenant.name}",
                f"You are invited to join {invitation.tenant.name} as "
                f"{Role(invitation.role).label}. Sign in and open {accept_url} to accept "
                f"or decline. The link expires on {invitation.expires_at:%Y-%m-%d %H:%M} UTC.",
                None,
                [address],
            )
        except Exception:  # the link was shown to the admin: a mail outage must not undo it
            logger.exception("Could not mail invitation %s", invitation.pk)

    transaction.on_commit(send)


def invitation_for_token(token: str, user: AbstractUser) -> Invitation:
    """The pending invitation behind `token`, addressed to `user`; InvitationRefused
    otherwise. One query."""
    with rls.owner():  # finds the tenant: keyed by the token's hash
        invitation = (
            Invitation.objects.select_related("tenant", "invited_by")
            .filter(token_hash=_token_hash(token or ""))
            .first()
        )
    if invitation is None or not invitation.tenant.active:
        raise InvitationRefused(INVITATION_UNKNOWN, status=404)
    if not _addressed_to(invitation, user):
        raise InvitationRefused(INVITATION_NOT_YOURS, status=403)
    if invitation.status != InvitationStatus.PENDING:
        raise InvitationRefused(INVITATION_GONE[invitation.status], status=410)
    return invitation


def _addressed_to(invitation: Invitation, user: AbstractUser) -> bool:
    invitee = invitation.invitee
    if "@" in invitee:
        return bool(user.email) and user.email.casefold() == invitee.casefold()
    return user.get_username() == invitee


@transaction.atomic
def invitation_accept(*, token: str, user: AbstractUser) -> Membership:
    """Make `user` a member as invited (an existing membership keeps its role). The
    joining rules apply with the inviter's authority; an owner invitation needs an
    inviter who is still an owner."""
    invitation = invitation_for_token(token, user)
    with rls.tenant_scope(invitation.tenant_id):
        return _invitation_accept(invitation, token, user)


def _invitation_accept(invitation: Invitation, token: str, user: AbstractUser) -> Membership:
    invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
    invitation_for_token(token, user)  # again, under the lock: two tabs accept once
    membership = Membership.objects.filter(tenant=invitation.tenant, user=user).first()
    if membership is None:
        inviter = invitation.invited_by
        if invitation.role == Role.OWNER and not (
            inviter is not None
            and Membership.objects.filter(
                tenant=invitation.tenant, user=inviter, role=Role.OWNER
            ).exists()
        ):
            raise InvitationRefused(
                "Only an owner's invitation can make an owner; ask for a new one.", status=403
            )
        membership = membership_set(
            tenant=invitation.tenant,
            user=user,
            role=invitation.role,
            added_by=inviter or AnonymousUser(),
        )
    invitation.accepted_at = timezone.now()
    invitation.accepted_by = user
    invitation.save(update_fields=["accepted_at", "accepted_by"])
    return membership


@transaction.atomic
def invitation_decline(*, token: str, user: AbstractUser) -> Invitation:
    invitation = invitation_for_token(token, user)
    with rls.tenant_scope(invitation.tenant_id):
        invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
        invitation_for_token(token, user)
        invitation.declined_at = timezone.now()
        invitation.save(update_fields=["declined_at"])
    return invitation


def invitation_revoke(*, invitation: Invitation, by: Principal | None = None) -> Invitation:
    """Withdraw a pending invitation (others are left as they are); an owner's invitation
    needs an owner's authority."""
    require_owner_for(by, invitation.role)
    if invitation.status == InvitationStatus.PENDING:
        invitation.revoked_at = timezone.now()
        invitation.save(update_fields=["revoked_at"])
    return invitation
