"""What the operator's single sign-on settings allow: the schemes of an identity provider's
addresses (SSO_REQUIRE_HTTPS) and the slugs the SSO_PROVIDERS setting takes. Pure checks
with no query and no model, so the IdentityProvider model's own validation can ask them
(tenancy/sign_on/sso.py reads the providers themselves)."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings


def url_schemes() -> tuple[str, ...]:
    """The schemes an identity provider's addresses may use: https, and http too when the
    operator turned SSO_REQUIRE_HTTPS off (a provider on a local network, tests)."""
    return ("https",) if settings.SSO_REQUIRE_HTTPS else ("https", "http")


def issuer_problem(issuer: str) -> str | None:
    """Why `issuer` cannot be a stored provider's issuer, or None: an https URL (http when
    allowed, url_schemes) with a host, and no credentials, query or fragment, since
    discovery appends its path to it."""
    try:
        parts = urlsplit(issuer)
        parts.port  # noqa: B018 (a bad port raises)
    except ValueError:
        return "Enter a valid URL."
    if parts.scheme not in url_schemes() or not parts.hostname:
        allowed = "an https" if url_schemes() == ("https",) else "an http(s)"
        return f"The issuer must be {allowed} URL."
    if parts.username or parts.password or parts.query or parts.fragment:
        return "The issuer is a plain URL: no user name, password, query or fragment."
    return None


def setting_slugs() -> set[str]:
    return {entry["slug"] for entry in settings.SSO_PROVIDERS}
