"""A Content-Security-Policy on every HTML page: scripts, styles and connections from our
own origin only, no inline script, no framing. Model output that slipped past the
sanitizer still could not run. The API docs pages (Swagger UI, ReDoc) bring inline
bootstrapping of their own and get a policy that allows it for them alone; the OAuth
consent page's form may also go to its client's redirect URI (policy_with_form_target)."""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import urlsplit

from django.http import HttpRequest, HttpResponse

POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
DOCS_POLICY = POLICY.replace("script-src 'self'", "script-src 'self' 'unsafe-inline'").replace(
    "style-src 'self'", "style-src 'self' 'unsafe-inline'"
)
DOCS_PATHS = ("/api/docs/", "/api/redoc/")
_HOST = re.compile(r"[a-z0-9-]+(?:\.[a-z0-9-]+)*")


def form_target_source(url: str) -> str | None:
    """Where a form on a page may send its data, or be redirected with it (Chromium holds
    redirects to form-action too): `url`'s scheme, host and port as a CSP source, or only
    its scheme for a host CSP cannot name (an IPv6 literal); None for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        return None
    if ":" in host:  # IPv6: CSP's host-source has no syntax for it
        return f"{parts.scheme}:"
    if not _HOST.fullmatch(host):
        return None
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def policy_with_form_target(source: str | None) -> str:
    """The policy, with forms also allowed to send to `source` (form_target_source)."""
    if source is None:
        return POLICY
    return POLICY.replace("form-action 'self'", f"form-action 'self' {source}")


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if "Content-Security-Policy" not in response and _is_html(response):
            docs = request.path.startswith(DOCS_PATHS)
            response["Content-Security-Policy"] = DOCS_POLICY if docs else POLICY
        return response


def _is_html(response: HttpResponse) -> bool:
    return response.get("Content-Type", "").startswith("text/html")
