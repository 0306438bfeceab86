"""Strict readers for settings that come from the environment.

Every reader raises ImproperlyConfigured naming the variable and the bad value, so a
typo in a deployment fails at start-up instead of at the first request.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import ipaddress
import json
import os
import pwd
import re
from pathlib import Path
from urllib.parse import unquote

import environ
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return value.strip()


def env_bool(name: str, default: bool) -> bool:
    value = env_str(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true/false, 1/0, yes/no).")


def env_list(name: str, default: list[str]) -> list[str]:
    value = env_str(name)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_path(name: str, default: Path) -> Path:
    value = env_str(name)
    return (Path(value).expanduser() if value else default).resolve()


def data_dir(base_dir: Path) -> Path:
    """DATA_DIR: where the embedded services and the local secrets live (`.data` beside the
    code by default). Read by the settings, and by manage.py before them."""
    return env_path("DATA_DIR", base_dir / ".data")


def writable_directory(name: str, path: Path, *, holds: str, instead: str) -> Path:
    """`path`, created if missing; ImproperlyConfigured when it cannot be written. `holds`
    says what needs it there and `instead` what the operator may do rather than fix it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        writable = os.access(path, os.W_OK | os.X_OK)
        reason = "not writable"
    except OSError as exc:
        writable, reason = False, exc.strerror or type(exc).__name__
    if not writable:
        raise ImproperlyConfigured(
            f"{name}={str(path)!r} is not a writable directory ({reason}); it holds {holds}. "
            f"Make it writable, point {name} at one that is, or {instead}."
        )
    return path


def database_from_url(name: str, url: str) -> dict:
    """Django DATABASES entry for a postgres:// URL.

    A unix-socket directory may be given percent-encoded as the host
    (postgres://user@%2Fvar%2Frun%2Fpostgresql/db) or as ?host=/var/run/postgresql.
    """
    if not url.startswith(("postgres://", "postgresql://", "pgsql://")):
        raise ImproperlyConfigured(
            f"{name} must be a postgres:// URL (got {url.split(':')[0]}://…)."
        )
    try:
        config = environ.Env.db_url_config(url)
    except Exception as exc:  # environ raises bare ValueErrors for malformed URLs
        raise ImproperlyConfigured(f"{name} is not a valid database URL: {exc}") from exc
    options = config.setdefault("OPTIONS", {})
    if "host" in options:
        config["HOST"] = options.pop("host")
    config["HOST"] = unquote(config.get("HOST") or "")
    if not config.get("NAME"):
        raise ImproperlyConfigured(f"{name} names no database (postgres://user@host/<database>).")
    config["ENGINE"] = "django.db.backends.postgresql"
    return config


def sql_identifier(name: str, value: str) -> str:
    """A PostgreSQL role name we put into SQL unquoted: lowercase letters, digits, `_`."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", value):
        raise ImproperlyConfigured(
            f"{name}={value!r} is not a plain role name (lowercase letters, digits and _)."
        )
    return value


def derived_secret(secret_key: str, purpose: str) -> str:
    """A secret of its own for `purpose`, derived from SECRET_KEY (HMAC-SHA256, hex): every
    process given the same SECRET_KEY knows it, and it tells nothing about SECRET_KEY."""
    return hmac.new(secret_key.encode(), purpose.encode(), hashlib.sha256).hexdigest()


def redis_url(name: str, url: str) -> str:
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ImproperlyConfigured(f"{name} must be a redis://, rediss:// or unix:// URL.")
    return url


def celery_url(url: str, db: int) -> str:
    """The same Redis for Celery, which spells unix sockets redis+socket:// and wants a db."""
    if url.startswith("unix://"):
        return f"redis+socket://{url.removeprefix('unix://').split('?')[0]}?virtual_host={db}"
    return url


def fernet_keys(name: str, raw: str) -> list[str]:
    keys = [key.strip() for key in raw.split(",") if key.strip()]
    if not keys:
        raise ImproperlyConfigured(f"{name} is empty; give at least one Fernet key.")
    for index, key in enumerate(keys):
        try:
            Fernet(key)
        except (ValueError, TypeError) as exc:
            raise ImproperlyConfigured(
                f"{name}: key #{index + 1} is not a Fernet key (32 url-safe base64 bytes; "
                "make one with `python -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())'`)."
            ) from exc
    return keys


def egress_allowlist(name: str, entries: list[str]) -> list[str]:
    """Hosts or CIDR networks that outbound tenant HTTP may reach despite being private."""
    for entry in entries:
        if "/" in entry or entry.replace(".", "").isdigit() or ":" in entry:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError as exc:
                raise ImproperlyConfigured(f"{name}: {entry!r} is not a valid IP network.") from exc
        elif not all(part.isalnum() or "-" in part for part in entry.lstrip("*.").split(".")):
            raise ImproperlyConfigured(f"{name}: {entry!r} is neither a host name nor a network.")
    return entries


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = env_str(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer.") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={value!r} must be at least {minimum}.")
    return number


def env_optional_days(name: str) -> int | None:
    """A number of days, at least 1; unset or empty: None (forever)."""
    if env_str(name) is None:
        return None
    return env_int(name, 0, minimum=1)


def env_json_commands(name: str) -> dict[str, list[str]]:
    """A JSON object of names to commands (argv lists of strings), e.g. {"triage":
    ["/opt/triage/run", "--quiet"]}; {} when unset."""
    value = env_str(name)
    if value is None:
        return {}
    try:
        data = json.loads(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} is not valid JSON.") from None
    if not isinstance(data, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object of names to argv lists.")
    for key, argv in data.items():
        valid_name = re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,63}", key)
        if not valid_name or not isinstance(argv, list) or not argv:
            raise ImproperlyConfigured(f"{name}: {key!r} needs a name and a non-empty argv list.")
        if not all(isinstance(part, str) and part for part in argv):
            raise ImproperlyConfigured(f"{name}: {key!r}'s argv must be non-empty strings.")
    return data


def command_account(name: str, default: str, *, needed: bool) -> str:
    """An account's name or uid; when `needed` and this process runs as root (so will
    switch to it), it must exist here."""
    value = env_str(name, default) or default
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", value):
        raise ImproperlyConfigured(f"{name}={value!r} is not an account name or uid.")
    if needed and os.geteuid() == 0:
        try:
            pwd.getpwuid(int(value)) if value.isdigit() else pwd.getpwnam(value)
        except KeyError:
            raise ImproperlyConfigured(f"{name}={value!r}: no such account here.") from None
    return value


_ROLES = ("owner", "admin", "member", "viewer")  # tenancy.models.Role, without importing models
_SSO_KEYS = {
    "slug": True,
    "name": True,
    "issuer": True,
    "client_id": True,
    "client_secret": False,
    "tenant": False,
    "scopes": False,
    "groups_claim": False,
    "default_role": False,
    "groups": False,
}


def env_json_sso_providers(name: str) -> list[dict]:
    """A JSON list of OpenID Connect providers (docs/sso.md), each an object with slug,
    name, issuer, client_id and optionally client_secret, tenant (a slug; absent:
    platform-wide), scopes, groups_claim, default_role and groups (a list of
    {"group", "tenant", "role"}); [] when unset. Tenants named are looked up at sign-in."""
    value = env_str(name)
    if value is None:
        return []
    try:
        data = json.loads(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} is not valid JSON.") from None
    if not isinstance(data, list):
        raise ImproperlyConfigured(f"{name} must be a JSON list of provider objects.")
    slugs: set[str] = set()
    for index, entry in enumerate(data):
        where = f"{name}[{index}]"
        if not isinstance(entry, dict):
            raise ImproperlyConfigured(f"{where} is not an object.")
        unknown = set(entry) - set(_SSO_KEYS)
        if unknown:
            raise ImproperlyConfigured(f"{where}: unknown keys {sorted(unknown)}.")
        for key, required in _SSO_KEYS.items():
            if required and not (isinstance(entry.get(key), str) and entry[key].strip()):
                raise ImproperlyConfigured(f"{where}: {key!r} is required (a string).")
        if not re.fullmatch(r"[a-z0-9](?:[a-z0-9-]{0,48}[a-z0-9])?", entry["slug"]):
            raise ImproperlyConfigured(f"{where}: slug {entry['slug']!r} is not a slug.")
        if entry["slug"] in slugs:
            raise ImproperlyConfigured(f"{where}: slug {entry['slug']!r} is used twice.")
        slugs.add(entry["slug"])
        if not entry["issuer"].startswith(("https://", "http://")):
            raise ImproperlyConfigured(f"{where}: issuer must be an http(s) URL.")
        groups = entry.get("groups", [])
        if not isinstance(groups, list) or not all(
            isinstance(rule, dict)
            and set(rule) <= {"group", "tenant", "role"}
            and all(isinstance(rule.get(key), str) for key in ("group", "tenant"))
            for rule in groups
        ):
            raise ImproperlyConfigured(
                f'{where}: groups must be a list of {{"group", "tenant", "role"}} objects.'
            )
        roles = [rule.get("role", "member") for rule in groups]
        if entry.get("default_role"):
            roles.append(entry["default_role"])
        for role in roles:
            if role not in _ROLES:
                raise ImproperlyConfigured(f"{where}: role {role!r} is not one of {_ROLES}.")
    return data


def attachments_storage(default_dir: Path) -> dict:
    """The chat attachments' storage (Django's STORAGES entry): an S3-compatible bucket when
    ATTACHMENT_S3_BUCKET is set (django-storages' S3 backend: the `s3` extra), else a
    private directory, ATTACHMENTS_DIR (default `default_dir`). The bucket's credentials
    come from ATTACHMENT_S3_ACCESS_KEY_ID / _SECRET_ACCESS_KEY, or boto3's own chain (an
    instance role, AWS_* variables) when unset. Objects stay private: downloads go through
    the platform, never a bucket URL."""
    bucket = env_str("ATTACHMENT_S3_BUCKET", "") or ""
    if not bucket:
        location = env_path("ATTACHMENTS_DIR", default_dir)
        return {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {
                "location": str(location),
                "directory_permissions_mode": 0o700,
                "file_permissions_mode": 0o600,
            },
        }
    if importlib.util.find_spec("storages") is None or importlib.util.find_spec("boto3") is None:
        raise ImproperlyConfigured(
            "ATTACHMENT_S3_BUCKET needs the s3 extra: pip install 'agentplatform[s3]'."
        )
    return {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": bucket,
            "endpoint_url": env_str("ATTACHMENT_S3_ENDPOINT_URL") or None,
            "region_name": env_str("ATTACHMENT_S3_REGION") or None,
            "access_key": env_str("ATTACHMENT_S3_ACCESS_KEY_ID") or None,
            "secret_key": env_str("ATTACHMENT_S3_SECRET_ACCESS_KEY") or None,
            "location": env_str("ATTACHMENT_S3_PREFIX", "attachments") or "",
            "default_acl": None,  # the bucket's own (private) policy
            "querystring_auth": True,  # a URL, if one were ever made, expires
            "file_overwrite": False,
        },
    }
