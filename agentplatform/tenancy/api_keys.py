"""API key format, hashing and lookup.

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
from django.utils import timezone

from agentplatform.tenancy.models import ApiKey

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
    """The active key matching `full_key`, or None (unknown, wrong, revoked, expired).

    One query; touches last_used_at at most once per API_KEY_LAST_USED_RESOLUTION_S.
    """
    prefix = parse_prefix(full_key)
    if prefix is None:
        return None
    key = ApiKey.objects.select_related("tenant").filter(prefix=prefix).first()
    if key is None or not hmac.compare_digest(key.secret_hash, hash_key(full_key)):
        return None
    if not key.is_usable:
        return None
    now = timezone.now()
    resolution = timedelta(seconds=settings.API_KEY_LAST_USED_RESOLUTION_S)
    if key.last_used_at is None or now - key.last_used_at > resolution:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
    return key
