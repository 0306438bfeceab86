"""API key format, hashing and lookup; the keys a person made revoked with them.

A key reads `ap_<prefix>_<secret>`. The prefix (12 hex chars) is stored in clear and
indexed, so a lookup is one query by primary-key-like prefix; the whole key is stored
only as SHA-256 — keys are 256-bit random, so a slow password hash adds nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_delete, post_save, pre_delete
from django.dispatch import receiver
from django.utils import timezone

from base import versions
from tenancy import rls
from tenancy.models import ApiKey, AuditAction, Membership, Tenant
from tenancy.records import audit

KEY_MARK = "ap"


@dataclass(frozen=True)
class NewKey:
    prefix: str
    secret_hash: str
    full_key: str


def generate() -> NewKey:
    prefix = secrets.token_hex(6)
    full_key = f"{KEY_MARK}_{prefix}_{secrets.token_urlsafe(32)}"
    return NewKey(prefix=prefix, secret_hash=hash_key(full_key), full_key=full_key)


def hash_key(full_key: str) -> str:
    return hashlib.sha256(full_key.encode()).hexdigest()


def parse_prefix(full_key: str) -> str | None:
    parts = full_key.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_MARK or len(parts[1]) != 12 or not parts[2]:
        return None
    return parts[1]


def find_usable_key(full_key: str) -> ApiKey | None:
    """The active key matching `full_key`, or None (unknown, wrong, revoked, expired, or
    its creator gone: `ApiKey.effective_role`).

    No query when `verified_key` knows it; else one, which also reads the creator's current
    role. Touches last_used_at at most once per API_KEY_LAST_USED_RESOLUTION_S.
    """
    known = verified_key(full_key)
    if known is not None:
        return known
    prefix = parse_prefix(full_key)
    if prefix is None:
        return None
    version = keys_version()  # before the read: a change during it makes this entry stale
    with rls.owner():  # finds the tenant: keyed by the key's prefix, then its secret
        key = (
            ApiKey.objects.select_related("tenant")
            .with_creator_standing()
            .filter(prefix=prefix)
            .first()
        )
    if key is None or not hmac.compare_digest(key.secret_hash, hash_key(full_key)):
        return None
    if not key.is_usable:
        return None
    with rls.tenant_scope(key.tenant_id):
        _touch(key)
    _remember(full_key, key, version)
    return key


# -- keys verified before, per process --------------------------------------------------
# A key found usable is remembered, with its creator's role of that moment, under the keys
# version of that moment. Any change to a key, a tenant (revoking, expiry edits,
# deactivating), a membership (a role changed, a member removed) or an account
# (deactivated, superuser status, deleted) bumps the version in Redis, so every process
# checks the key again on its next request; expiry is checked on use.
_verified: dict[str, tuple[str, ApiKey]] = {}
MAX_REMEMBERED = 10_000


def verified_key(full_key: str) -> ApiKey | None:
    """The remembered key if it is still current and usable (one Redis read, no database:
    safe from async code), else None (look it up)."""
    entry = _verified.get(hash_key(full_key))
    if entry is None or entry[0] != keys_version():
        return None
    key = entry[1]
    if not key.is_usable or _needs_touch(key):
        return None
    return key


def keys_version() -> str:
    return versions.current(_VERSION_KEY)


def keys_changed() -> None:
    versions.bump(_VERSION_KEY)


def _remember(full_key: str, key: ApiKey, version: str) -> None:
    if len(_verified) >= MAX_REMEMBERED:
        _verified.clear()
    _verified[hash_key(full_key)] = (version, key)


def _needs_touch(key: ApiKey) -> bool:
    resolution = timedelta(seconds=settings.API_KEY_LAST_USED_RESOLUTION_S)
    return key.last_used_at is None or timezone.now() - key.last_used_at > resolution


def _touch(key: ApiKey) -> None:
    if _needs_touch(key):
        now = timezone.now()
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now


_VERSION_KEY = "ap:api-keys:version"


@receiver([post_save, post_delete], sender=ApiKey)
@receiver([post_save, post_delete], sender=Tenant)
@receiver([post_save, post_delete], sender=Membership)
def _key_or_tenant_changed(sender, instance, **kwargs) -> None:
    _changed()


# What a key's effective role reads of its creator's account.
_STANDING_FIELDS = frozenset({"is_active", "is_superuser"})


@receiver(post_save, sender=settings.AUTH_USER_MODEL)
def _account_saved(sender, instance, update_fields=None, **kwargs) -> None:
    # Not for saves of other fields only (a sign-in's last_login, is_staff).
    if update_fields is None or _STANDING_FIELDS & set(update_fields):
        _changed()


@receiver(pre_delete, sender=settings.AUTH_USER_MODEL)
def _account_deleted(sender, instance, **kwargs) -> None:
    """Revoke the account's keys, in every tenant, in the deletion's transaction, each
    recorded as `api_key.revoked` with the reason: SET_NULL on `created_by` would otherwise
    make them look like the operator's keys."""
    with rls.owner(), transaction.atomic():  # one person's keys across tenants, by the user
        for key in revoke_made_by(user_id=instance.pk):
            audit.record_api_key(
                key, AuditAction.API_KEY_REVOKED, reason="its creator's account was deleted"
            )


def revoke_made_by(*, user_id: int, tenant_id: int | None = None) -> list[ApiKey]:
    """Revoke the keys not yet revoked that `user_id` made (in `tenant_id`, else in every
    tenant), keys made with their keys included (those have them as `created_by` too); the
    caller records them in the audit log and scopes the query (across tenants: the owner).
    Two queries; every process refuses the keys from its next request (the keys version)."""
    keys = ApiKey.objects.select_for_update().filter(created_by_id=user_id, revoked_at=None)
    if tenant_id is not None:
        keys = keys.filter(tenant_id=tenant_id)
    revoked = list(keys.order_by("pk"))
    if revoked:
        now = timezone.now()
        ApiKey.objects.filter(pk__in=[key.pk for key in revoked]).update(revoked_at=now)
        for key in revoked:
            key.revoked_at = now
        keys_changed()
        transaction.on_commit(keys_changed)
    return revoked


def _changed() -> None:
    # Now (this process, this transaction) and after commit (other processes may have
    # re-read the old row meanwhile).
    keys_changed()
    transaction.on_commit(keys_changed)
