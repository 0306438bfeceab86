"""A Content-Security-Policy on every HTML page: scripts, styles and connections from our
own origin only, no inline script, no framing. Model output that slipped past the
sanitizer still could not run. The API docs pages (Swagger UI, ReDoc) bring inline
bootstrapping of their own and get a policy that allows it for them alone."""

from __future__ import annotations

from collections.abc import Callable

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
