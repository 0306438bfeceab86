"""CORS for the OAuth endpoints a browser-based MCP client calls from its own page (the
protected-resource and authorization-server metadata, registration, the token endpoint):
they read no cookie (no session, no CSRF token; the code, PKCE verifier or refresh token
decides), so every origin may call them, without credentials. Nothing else in Django answers
CORS: not /oauth/authorize, which acts on the member's session, nor any page. /mcp allows
the origins its Origin check admits (agentplatform/mcp/asgi.py)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

ALLOWED_HEADERS = "Content-Type, MCP-Protocol-Version"  # what MCP clients send these
EXPOSED_HEADERS = "Retry-After"  # (registration's 429)
PREFLIGHT_MAX_AGE_S = 86400

View = Callable[..., HttpResponse]


def open_to_every_origin(*methods: str) -> Callable[[View], View]:
    """`Access-Control-Allow-Origin: *` on every answer of the view, and preflights (OPTIONS)
    answered here with `methods`, before the view's own method check."""
    allowed = ", ".join([*methods, "OPTIONS"])

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def open_view(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if request.method == "OPTIONS":
                response = HttpResponse(status=204)
                response["Allow"] = allowed
                response["Access-Control-Allow-Methods"] = allowed
                response["Access-Control-Allow-Headers"] = ALLOWED_HEADERS
                response["Access-Control-Max-Age"] = str(PREFLIGHT_MAX_AGE_S)
            else:
                response = view(request, *args, **kwargs)
            response["Access-Control-Allow-Origin"] = "*"
            response["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
            return response

        return open_view

    return decorate
