"""Credentials written where configuration is kept in the clear — a URL's user info or
query string, a fixed header or query value — instead of in a secret. Configuration is
exported, shown on pages and logged; secrets are encrypted, write-only and redacted. Every
face refuses these the same way: the models' `clean()` and the configuration compiler."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

_CREDENTIAL_WORDS = re.compile(
    r"(?:^|_)(?:api_?key|apikey|key|token|access_token|secret|client_secret|password|passwd|"
    r"pwd|auth|authorization|credentials?|signature|sig|cookie)(?:_|$)"
)


def credential_like(name: str) -> bool:
    """Whether a query parameter or header name looks like it carries a credential
    (`api_key`, `X-Auth-Token`, `accessToken`, `password`), not `author` or `keyword`."""
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()
    return bool(_CREDENTIAL_WORDS.search(re.sub(r"[^a-z0-9]+", "_", words)))


def url_credential_problem(url: str) -> str | None:
    """Why `url` carries a credential (user info, or a credential-like query parameter)."""
    try:
        parts = urlsplit(url)
        userinfo = parts.username or parts.password
    except ValueError:
        return None  # not a URL at all: the URL's own check says so
    if userinfo:
        return "credentials in the URL (user:password@): keep them in the secret instead"
    for name, _ in parse_qsl(parts.query, keep_blank_values=True):
        if credential_like(name):
            return (
                f"the URL's query parameter {name!r} looks like a credential: "
                "keep it in the secret instead"
            )
    return None


def credential_names(names: Iterable[str]) -> list[str]:
    """The names among `names` that look like credentials."""
    return [name for name in names if credential_like(name)]


REDACTED = "[redacted]"


def redacted_url(url: str) -> str:
    """`url` with user info and credential-like query values masked: for showing a row
    stored before these were refused, never for calling it."""
    try:
        parts = urlsplit(url)
        userinfo = parts.username or parts.password
    except ValueError:
        return url
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = [
        (name, REDACTED if credential_like(name) else value)
        for name, value in parse_qsl(parts.query, keep_blank_values=True)
    ]
    if not userinfo and all(value != REDACTED for _, value in query):
        return url
    return parts._replace(
        netloc=f"redacted@{netloc}" if userinfo else netloc,  # brackets would read as IPv6
        query="&".join(f"{name}={value}" for name, value in query),
    ).geturl()


def redacted_values(values: Any) -> Any:
    """A mapping of names (headers, query parameters) with credential-like ones masked."""
    if not isinstance(values, dict):
        return values
    return {name: REDACTED if credential_like(name) else value for name, value in values.items()}
