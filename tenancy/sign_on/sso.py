"""Single sign-on, the part without HTTP: which identity providers exist (the admin's and
the SSO_PROVIDERS setting's, read as one shape), who a signed-in person is (found by the
ID token's issuer and subject, created on first sign-in), what their groups make them (a
role per tenant, which `services.memberships_sync` sets on every sign-in), and whether a
password may still sign them in. The OpenID Connect exchange itself is
agentplatform/web/sso/ (docs/sso.md).

Password sign-in off is a tenant's rule about acting in it, never about the account: a
password still signs a person in, and their session (or an MCP client they authorised in
it) acts in every tenant of theirs that allows passwords; a tenant that turned them off
refuses it (`refuse_password_session`), so one tenant's admin cannot lock a shared member
out of the others.

Everything here runs before any tenant is chosen, so it reads as the RLS owner, keyed by
the provider's slug or the user.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AbstractUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection, transaction
from django.utils import timezone

from tenancy import rls
from tenancy.models import (
    ROLE_RANK,
    ExternalIdentity,
    IdentityProvider,
    Role,
    Tenant,
)

log = logging.getLogger(__name__)

PASSWORD_OFF = (
    "Password sign-in is turned off for {tenant}. Sign in with your organisation's "  # noqa: S105
    "single sign-on instead."
)


@dataclass(frozen=True)
class GroupRule:
    group: str
    tenant_id: int
    role: str


@dataclass(frozen=True)
class SSOProvider:
    """An identity provider as sign-in uses it, whichever place configured it."""

    slug: str
    name: str
    tenant_id: int | None  # None: platform-wide
    issuer: str
    client_id: str
    client_secret: str
    scopes: str
    groups_claim: str
    default_role: str  # a tenant's provider: the role when no rule matches ("": none)
    rules: tuple[GroupRule, ...]

    def __repr__(self) -> str:  # never the secret
        return f"SSOProvider({self.slug!r}, issuer={self.issuer!r})"


def _from_model(row: IdentityProvider) -> SSOProvider:
    rules = tuple(
        GroupRule(group=rule.group, tenant_id=rule.tenant_id, role=rule.role)
        for rule in row.rules.all()
        # a tenant's provider grants roles in that tenant only (the admin refuses others)
        if row.tenant_id is None or rule.tenant_id == row.tenant_id
    )
    return SSOProvider(
        slug=row.slug,
        name=row.name,
        tenant_id=row.tenant_id,
        issuer=row.issuer,
        client_id=row.client_id,
        client_secret=row.client_secret or "",
        scopes=row.scopes,
        groups_claim=row.groups_claim,
        default_role=row.default_role if row.tenant_id else "",
        rules=rules,
    )


def _from_setting(entry: dict[str, Any], tenant_ids: dict[str, int]) -> SSOProvider | None:
    tenant_id = None
    if entry.get("tenant"):
        tenant_id = tenant_ids.get(entry["tenant"])
        if tenant_id is None:
            log.warning(
                "SSO_PROVIDERS %s: no tenant %r; provider skipped", entry["slug"], entry["tenant"]
            )
            return None
    rules = []
    for rule in entry.get("groups", []):
        rule_tenant = tenant_ids.get(rule["tenant"])
        role = rule.get("role", Role.MEMBER)
        if rule_tenant is None or role not in Role.values:
            log.warning(
                "SSO_PROVIDERS %s: rule %r skipped (tenant or role unknown)", entry["slug"], rule
            )
            continue
        if tenant_id is None or rule_tenant == tenant_id:
            rules.append(GroupRule(group=rule["group"], tenant_id=rule_tenant, role=role))
    default_role = entry.get("default_role", "")
    return SSOProvider(
        slug=entry["slug"],
        name=entry["name"],
        tenant_id=tenant_id,
        issuer=entry["issuer"],
        client_id=entry["client_id"],
        client_secret=entry.get("client_secret", ""),
        scopes=entry.get("scopes", "openid email profile"),
        groups_claim=entry.get("groups_claim", "groups"),
        default_role=default_role if tenant_id and default_role in Role.values else "",
        rules=tuple(rules),
    )


def providers(*, tenant: Tenant | None = None, slug: str | None = None) -> list[SSOProvider]:
    """Enabled providers: the platform-wide ones plus `tenant`'s (with `slug`: that one,
    whoever owns it). The setting's win over a stored one of the same slug. A few queries."""
    with rls.owner():  # sign-in comes before any tenant: read by slug or tenant, as the owner
        rows = IdentityProvider.objects.filter(enabled=True).prefetch_related("rules")
        entries = list(settings.SSO_PROVIDERS)
        if slug is not None:
            rows = rows.filter(slug=slug)
            entries = [entry for entry in entries if entry["slug"] == slug]
        else:
            owned = [None] if tenant is None else [None, tenant.pk]
            rows = [row for row in rows if row.tenant_id in owned]
        named = {entry.get("tenant") for entry in entries} | {
            rule.get("tenant") for entry in entries for rule in entry.get("groups", [])
        }
        tenant_ids = dict(Tenant.objects.filter(slug__in=named - {None}).values_list("slug", "pk"))
        found = {row.slug: _from_model(row) for row in rows}
    for entry in entries:
        provider = _from_setting(entry, tenant_ids)
        if provider is None:
            found.pop(entry["slug"], None)
            continue
        if slug is None and provider.tenant_id not in (None, getattr(tenant, "pk", None)):
            continue
        found[provider.slug] = provider
    return sorted(found.values(), key=lambda provider: provider.name.casefold())


def providers_serving(tenant: Tenant) -> list[SSOProvider]:
    """The enabled providers that sign this tenant's members in: its own, and platform-wide
    ones with a group rule for it."""
    return [
        provider
        for provider in providers(tenant=tenant)
        if provider.tenant_id == tenant.pk
        or any(rule.tenant_id == tenant.pk for rule in provider.rules)
    ]


def provider_named(slug: str) -> SSOProvider | None:
    matches = providers(slug=slug)
    return matches[0] if matches else None


# -- who signed in ---------------------------------------------------------------------------
_USERNAME_CHARS = re.compile(r"[^\w.@+-]")


def _username_for(provider: SSOProvider, claims: dict[str, Any]) -> str:
    """A free username from the claims: preferred_username, else email, else the subject;
    suffixed with the provider's slug (then a number) when taken."""
    User = get_user_model()
    raw = next(
        (str(claims[key]) for key in ("preferred_username", "email", "sub") if claims.get(key)),
        "user",
    )
    base = _USERNAME_CHARS.sub("-", raw)[:100] or "user"
    candidates = [base, f"{base}-{provider.slug}"]
    candidates += [f"{base}-{provider.slug}-{n}" for n in range(2, 50)]
    for candidate in candidates:
        if not User.objects.filter(username__iexact=candidate).exists():
            return candidate
    raise ValidationError("No free username for this person; ask the platform's operator.")


def _text_claim(claims: dict[str, Any], key: str, limit: int) -> str:
    value = claims.get(key)
    return value[:limit] if isinstance(value, str) else ""


def _claimed_true(value: object) -> bool | None:
    """A boolean claim: some providers send it as the string "true" or "false"."""
    if isinstance(value, str):
        value = {"true": True, "false": False}.get(value.lower())
    return value if isinstance(value, bool) else None


def trusted_email(provider: SSOProvider, claims: dict[str, Any]) -> str:
    """The claims' e-mail address, or "" when the platform may not rely on it. An address is
    what invitations and the admin find people by, so a tenant's own provider (whose issuer
    that tenant's admins choose: it could claim anyone's address) is believed only with
    `email_verified` true. A platform-wide one (the operator's) is believed unless it says
    false: some providers (Microsoft Entra ID) send no such claim."""
    verified = _claimed_true(claims.get("email_verified"))
    trusted = verified is True if provider.tenant_id is not None else verified is not False
    return _text_claim(claims, "email", 254) if trusted else ""


_FIRST_SIGN_IN_LOCK = 0x550_F125  # a PostgreSQL advisory lock key of this module's own


@transaction.atomic
def user_for_identity(*, provider: SSOProvider, claims: dict[str, Any]) -> AbstractUser:
    """The user behind these verified claims (`iss` and `sub` required), created with no
    usable password on first sign-in; name and e-mail refreshed from the claims (the
    e-mail only when `trusted_email` gives it: an untrusted one is never stored)."""
    User = get_user_model()
    issuer, subject = str(claims["iss"]), str(claims["sub"])
    identity = (
        ExternalIdentity.objects.select_for_update()
        .select_related("user")
        .filter(issuer=issuer, subject=subject)
        .first()
    )
    email = trusted_email(provider, claims)
    if identity is None:
        # First sign-ins wait for each other (until this transaction ends), so two at once
        # neither make the same person twice nor take one free username twice.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_FIRST_SIGN_IN_LOCK])
        identity = (
            ExternalIdentity.objects.select_related("user")
            .filter(issuer=issuer, subject=subject)
            .first()
        )
    if identity is None:
        # (an address this platform may not rely on names no account: not even its username)
        named = claims if email else {k: v for k, v in claims.items() if k != "email"}
        user = User(username=_username_for(provider, named), email=email)
        user.set_unusable_password()
        user.first_name = _text_claim(claims, "given_name", 150)
        user.last_name = _text_claim(claims, "family_name", 150)
        user.save()
        identity = ExternalIdentity.objects.create(
            user=user, provider=provider.slug, issuer=issuer, subject=subject
        )
    user = identity.user
    if email and user.email != email:
        user.email = email
        user.save(update_fields=["email"])
    identity.last_sign_in_at = timezone.now()
    identity.save(update_fields=["last_sign_in_at"])
    return user


def groups_of(provider: SSOProvider, claims: dict[str, Any]) -> set[str]:
    """The groups claim as a set of names (a list, or one string); empty when absent."""
    if not provider.groups_claim:
        return set()
    value = claims.get(provider.groups_claim)
    if isinstance(value, str):
        return {value}
    if isinstance(value, list):
        return {str(item) for item in value if isinstance(item, str | int)}
    return set()


def roles_from_groups(provider: SSOProvider, groups: set[str]) -> dict[int, str]:
    """Tenant id -> the highest role the groups give (the default role when none match)."""
    wanted: dict[int, str] = {}
    for rule in provider.rules:
        if rule.group in groups:
            current = wanted.get(rule.tenant_id)
            if current is None or ROLE_RANK[Role(rule.role)] > ROLE_RANK[Role(current)]:
                wanted[rule.tenant_id] = rule.role
    if (
        provider.tenant_id is not None
        and provider.default_role
        and provider.tenant_id not in wanted
    ):
        wanted[provider.tenant_id] = provider.default_role
    return wanted


# -- passwords turned off -----------------------------------------------------------------
PASSWORD_METHOD = "password"  # noqa: S105 (a name, not a password)


class PasswordSignInOff(PermissionDenied):
    """A session a password began (or an MCP client authorised in one) asked to act in a
    tenant that turned password sign-in off. Its text says to use single sign-on."""

    def __init__(self, tenant: Tenant) -> None:
        super().__init__(PASSWORD_OFF.format(tenant=tenant.name))
        self.tenant = tenant


def needs_password_sign_in(*, user: AbstractBaseUser, method: str | None) -> bool:
    """Whether a session signed in by `method` ("password", "sso:<provider slug>"; None or
    "" when not recorded), or an OAuth grant made in one, may act only in tenants that allow
    password sign-in. A method not recorded counts as a password unless the user has no
    usable password (an account single sign-on made). A platform superuser's never does:
    the operator's way back in. No query."""
    if user.is_superuser:
        return False
    if method:
        return method == PASSWORD_METHOD
    return user.has_usable_password()


def refuse_password_session(tenant: Tenant) -> None:
    """PasswordSignInOff when `tenant` turned password sign-in off: ask it for a session or
    grant that `needs_password_sign_in`, before it acts in the tenant."""
    if not tenant.password_sign_in:
        raise PasswordSignInOff(tenant)
