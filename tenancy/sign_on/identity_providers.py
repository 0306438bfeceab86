"""A tenant's own identity providers and their group rules, written by every face (REST,
the admin) through these services (docs/sso.md).

Who may: the roles that decide how members sign in (`Action.MANAGE_MEMBERS`: owners and
admins, admin-scope keys). A provider that gives the owner role — a rule or its default
role, before or after the change — is an owner's alone to change or delete: whoever sets
its issuer decides who becomes an owner. Only the tenant's own rows are reachable (another
tenant's provider and platform-wide ones answer 404; those are a superuser's, in the
admin, or the operator's SSO_PROVIDERS). Saves go through `save_validated`: the model's
checks, the audit log with the client secret masked; each group rule is a row audited the
same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.http import Http404

from tenancy import rls
from tenancy.models import (
    IdentityProvider,
    IdentityProviderGroup,
    Membership,
    Role,
    Tenant,
)
from tenancy.policy import Action, Principal
from tenancy.records.saving import delete_recorded, save_validated
from tenancy.services import require_owner_for
from tenancy.sign_on import sso

MAX_RULES = 200
SLUG_TAKEN = "Another identity provider already uses this slug."
SLUG_FIXED = (
    "A provider's slug cannot change (the memberships it made are marked with it); "
    "make another provider instead."
)
STILL_NEEDED = (
    "Password sign-in is off for this tenant and no other enabled identity provider serves "
    "it: its members could not sign in. Turn password sign-in on first."
)


@dataclass(frozen=True)
class RuleSpec:
    """A group rule as a tenant writes it: members of `group` get `role` in the tenant."""

    group: str
    role: str


def identity_provider_list(
    *, by: Principal, enabled: bool | None = None
) -> models.QuerySet[IdentityProvider]:
    """The tenant's own providers with their rules (two queries when iterated); only the
    enabled (or disabled) ones when `enabled` is given."""
    by.require(Action.MANAGE_MEMBERS)
    providers = IdentityProvider.objects.filter(tenant=by.tenant).prefetch_related("rules")
    return providers if enabled is None else providers.filter(enabled=enabled)


def identity_provider_get(*, by: Principal, provider_id: int) -> IdentityProvider:
    """One of the tenant's providers; 404 for another tenant's or a platform-wide one."""
    by.require(Action.MANAGE_MEMBERS)
    found = identity_provider_list(by=by).filter(pk=provider_id).first()
    if found is None:
        raise Http404("No such identity provider.")
    return found


def grants_owner(provider: IdentityProvider, rules: list[RuleSpec] | None = None) -> bool:
    """Whether the provider gives the owner role: its default role, or a rule (`rules`, else
    its stored ones: one query)."""
    if provider.default_role == Role.OWNER:
        return True
    if rules is not None:
        return any(rule.role == Role.OWNER for rule in rules)
    return provider.pk is not None and provider.rules.filter(role=Role.OWNER).exists()


def check_may_change(*, by: Principal, provider: IdentityProvider, owner_involved: bool) -> None:
    """PermissionDenied unless `by` may write this provider of its tenant (404 for another
    tenant's or a platform-wide one); `owner_involved`: it gives the owner role before or
    after the change, which needs an owner's authority."""
    by.require(Action.MANAGE_MEMBERS)
    if provider.tenant_id != by.tenant.pk:
        raise Http404("No such identity provider.")
    if owner_involved:
        require_owner_for(by, Role.OWNER)


def _check_slug_free(provider: IdentityProvider) -> None:
    """The slug is unique across tenants (it is in the public sign-in URL): looked up as
    the owner, since this tenant's scope cannot see another tenant's rows."""
    with rls.owner():
        taken = IdentityProvider.objects.filter(slug=provider.slug)
        if provider.pk is not None:
            taken = taken.exclude(pk=provider.pk)
        if taken.exists():
            raise ValidationError({"slug": SLUG_TAKEN})


def _check_rules(rules: list[RuleSpec]) -> None:
    if len(rules) > MAX_RULES:
        raise ValidationError({"rules": f"At most {MAX_RULES} group rules."})
    groups = [rule.group for rule in rules]
    if len(set(groups)) != len(groups):
        raise ValidationError({"rules": "Each group may have one rule."})
    for rule in rules:
        if rule.role not in Role.values:
            raise ValidationError({"rules": f"Unknown role {rule.role!r}."})
        if not rule.group.strip():
            raise ValidationError({"rules": "A rule needs a group."})


@transaction.atomic
def identity_provider_save(
    *,
    by: Principal,
    provider: IdentityProvider | None,
    changes: dict[str, Any],
    rules: list[RuleSpec] | None = None,
) -> IdentityProvider:
    """Create (`provider` None, or not saved yet) or change one of `by`'s tenant's providers;
    `rules` (None: keep them) replaces its group rules. `changes` are model fields
    ("client_secret": None clears it). Every write is audited, the secret masked."""
    target = provider if provider is not None else IdentityProvider()
    if target.pk is None:
        target.tenant = by.tenant
    stored = None
    if target.pk is not None:
        stored = IdentityProvider.objects.select_for_update().filter(pk=target.pk).first()
        if stored is None:
            raise Http404("No such identity provider.")
        check_may_change(by=by, provider=stored, owner_involved=False)  # 404 before all else
    for name, value in changes.items():
        setattr(target, name, value)
    if rules is not None:
        _check_rules(rules)
    if stored is not None and target.slug != stored.slug:
        raise ValidationError({"slug": SLUG_FIXED})
    before = stored is not None and grants_owner(stored)
    check_may_change(by=by, provider=target, owner_involved=before or grants_owner(target, rules))
    saved = save_validated(target, {}, before=_check_slug_free, actor=by.initiator)
    if rules is not None:
        _rules_set(saved, rules, actor=by.initiator)
    check_still_served(provider=saved)
    return saved


def _rules_set(provider: IdentityProvider, rules: list[RuleSpec], *, actor: Any) -> None:
    """Replace the provider's rules: unchanged ones stay, each added, changed or removed one
    is saved or deleted through the audited path."""
    current = {rule.group: rule for rule in IdentityProviderGroup.objects.filter(provider=provider)}
    wanted = {rule.group: rule.role for rule in rules}
    for group, row in current.items():
        if group not in wanted:
            delete_recorded(row, actor=actor)
    for group, role in wanted.items():
        row = current.get(group)
        if row is None:
            row = IdentityProviderGroup(provider=provider, tenant_id=provider.tenant_id)
            save_validated(row, {"group": group, "role": role}, actor=actor)
        elif row.role != role:
            save_validated(row, {"role": role}, actor=actor)
    getattr(provider, "_prefetched_objects_cache", {}).pop("rules", None)  # read them again


@transaction.atomic
def identity_provider_delete(*, by: Principal, provider: IdentityProvider) -> None:
    """Delete one of `by`'s tenant's providers with its rules (audited). Memberships it made
    stay, as ordinary ones: unmarked, so no later provider taking the slug removes them.
    Passwords turned off need another provider to stay serving the tenant."""
    check_may_change(by=by, provider=provider, owner_involved=grants_owner(provider))
    Membership.objects.filter(tenant_id=provider.tenant_id, sso_provider=provider.slug).update(
        sso_provider=""
    )
    for rule in provider.rules.all():
        delete_recorded(rule, actor=by.initiator)
    delete_recorded(provider, actor=by.initiator)
    check_still_served(provider=provider)


def check_still_served(*, provider: IdentityProvider) -> None:
    """In the writing transaction, after the write: ValidationError (which undoes it) when
    the provider's tenant has passwords off and no enabled provider serves it any more —
    its members could not sign in at all. The tenant row is locked for it, as turning
    passwords off locks it (tenancy.services.tenant_sign_in_set): of the two changes made
    at once, the later one checks what the earlier one committed. One query, a few more
    when passwords are off."""
    tenant = Tenant.objects.select_for_update().filter(pk=provider.tenant_id).first()
    if tenant is not None and not tenant.password_sign_in and not sso.providers_serving(tenant):
        raise ValidationError(STILL_NEEDED, code="still_needed")
