"""A stored secret stays with its destination.

Secrets are write-only: whoever may edit an object holding one (a provider's API key, an
HTTP tool's credential, a remote agent's token, an MCP server's auth header) need not know
it. Were the secret kept when the object's URL moved to another host, the next call (a
"test" button) would hand it to that host. So moving a secret's destination to another
scheme, host or port needs the secret entered again, or cleared, in the same change; a
new path on the same origin keeps it. Creating an object is unaffected.

The rule runs in the models' `clean()`, which every write passes: the services through
`save_validated` (REST, the configuration pages) and the admin's model forms.
"""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import urlsplit

from base.encryption import assigned_secrets, secret_assigned, set_assigned_secrets

_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_change(before: str, after: str) -> str | None:
    """Which of "scheme", "host" or "port" differs between two URLs; None: the same."""
    parts = zip(("scheme", "host", "port"), _origin(before), _origin(after), strict=True)
    for part, old, new in parts:
        if old != new:
            return part
    return None


def _origin(url: str) -> tuple[str, str, Any]:
    try:
        parts = urlsplit((url or "").strip())
    except ValueError:  # unparsable: only the very same text is the same place
        return (url, url, url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:  # not a port number: compare its text
        port = parts.netloc
    return (scheme, parts.hostname or "", port)


class SecretDestination:
    """Mixin for a model whose `secret_field` is sent to `destination_url()`.

    `destination_fields` are the columns `destination_url()` reads (loaded from the
    stored row to compare). Each model's `clean()` calls `secret_destination_errors()`.
    Put the mixin before `models.Model` in the bases.
    """

    secret_field: ClassVar[str]
    secret_label: ClassVar[str]
    destination_fields: ClassVar[tuple[str, ...]]

    def destination_url(self) -> str:
        raise NotImplementedError

    def secret_destination_errors(self) -> dict[str, str]:
        """{secret_field: message} when the destination moved but the stored secret was
        kept. Costs one query, only for a stored object that keeps a stored secret."""
        if secret_assigned(self, self.secret_field) or not getattr(self, self.secret_field):
            return {}
        after = self.destination_url()
        if not after:  # sent nowhere now (e.g. no longer an HTTP tool): nothing leaves
            return {}
        stored = type(self)._base_manager.only(*self.destination_fields).filter(pk=self.pk).first()
        changed = origin_change(stored.destination_url(), after) if stored else None
        if changed is None:
            return {}
        return {
            self.secret_field: f"The URL's {changed} changed: enter the {self.secret_label} "
            "again, or clear it."
        }

    def save(self, *args: Any, **kwargs: Any) -> None:
        super().save(*args, **kwargs)
        set_assigned_secrets(self, frozenset())  # what is stored now is the reference

    def refresh_from_db(self, using=None, fields=None, from_queryset=None) -> None:
        # Loading a (deferred) secret from the row is not entering it.
        before = assigned_secrets(self)
        super().refresh_from_db(using=using, fields=fields, from_queryset=from_queryset)
        set_assigned_secrets(self, frozenset() if fields is None else before - set(fields))

    def clean_fields(self, exclude=None) -> None:
        # Django sets every field to its own cleaned value: not entering a secret either.
        before = assigned_secrets(self)
        try:
            super().clean_fields(exclude=exclude)
        finally:
            set_assigned_secrets(self, before)
