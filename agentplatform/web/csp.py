"""A Content-Security-Policy on every HTML page: scripts, styles and connections from our
own origin only, no inline script, no framing. Model output that slipped past the
sanitizer still could not run. The API docs pages (Swagger UI, ReDoc) bring inline
bootstrapping of their own and get a policy that allows it for them alone. A page whose form
is answered by a redirect to another origin (the OAuth consent) names that origin in its
own policy (`policy_allowing_forms_to`)."""

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
_HOST = re.compile(r"[a-z0-9-]+(\.[a-z0-9-]+)*")  # what a CSP host-source may name


def policy_allowing_forms_to(url: str) -> str:
    """POLICY, with forms also allowed to lead to `url`'s origin: a browser checks
    `form-action` on each redirect that follows a submission, so a form answered by a
    redirect elsewhere is blocked without it. A host CSP cannot name (an IPv6 literal such
    as a `[::1]` loopback) is allowed as `scheme://*:port`; anything but an http(s) URL with a
    valid host and port adds nothing (nothing of `url` but its origin reaches the header)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return POLICY
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        return POLICY
    if not _HOST.fullmatch(host):
        if ":" not in host:  # not an IPv6 literal either
            return POLICY
        host = "*"
    source = f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
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
