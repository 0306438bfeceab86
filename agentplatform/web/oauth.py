"""The OAuth 2.1 authorization server MCP clients sign in through (tenancy/
oauth.py has the rules): its metadata (RFC 8414), dynamic client registration, the consent
page where a signed-in member picks the tenant the client may act in, and the token
endpoint. The MCP app's protected-resource metadata names this server. Browser-based
clients may call all but the consent page from any origin (agentplatform/web/cors.py)."""

from __future__ import annotations

import json
import math
from urllib.parse import urlencode, urlsplit

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from agentplatform import mcp_resource
from agentplatform.web import csp
from agentplatform.web.cors import open_to_every_origin
from base import rate_counters
from tenancy.access import tenants_for
from tenancy.models import Tenant
from tenancy.sign_in import session_needs_password_sign_in, session_sign_in_method
from tenancy.sign_on import oauth, sso

REGISTRATIONS_PER_HOUR = 30  # per client address: registration needs no account
MAX_REGISTRATION_BYTES = 16 * 1024  # ten long redirect URIs and a name fit many times over


def issuer(request: HttpRequest) -> str:
    """Where the MCP resource is served: the protected-resource metadata names it."""
    return mcp_resource.issuer(mcp_resource.for_request(request))


@open_to_every_origin("GET", "HEAD")
@require_http_methods(["GET", "HEAD"])
def resource_metadata(request: HttpRequest, resource_path: str) -> JsonResponse:
    """RFC 9728: /mcp's protected-resource metadata, naming the URL the client used (or
    MCP_RESOURCE_URL when set: agentplatform/mcp_resource.py) and this server as its
    authorization server; at the well-known prefix followed by the resource's path."""
    resource = mcp_resource.for_request(request)
    if mcp_resource.metadata_url(resource) != mcp_resource.issuer(resource) + request.path:
        raise Http404("No such resource.")
    return JsonResponse(
        {
            "resource": resource,
            "authorization_servers": [mcp_resource.issuer(resource)],  # (as its issuer reads)
            "bearer_methods_supported": ["header"],
        }
    )


@open_to_every_origin("GET", "HEAD")
@require_http_methods(["GET", "HEAD"])
def metadata(request: HttpRequest) -> JsonResponse:
    base = issuer(request)
    return JsonResponse(
        {
            "issuer": base,
            "authorization_endpoint": f"{base}/oauth/authorize",
            "token_endpoint": f"{base}/oauth/token",
            "registration_endpoint": f"{base}/oauth/register",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
            "scopes_supported": ["mcp"],
        }
    )


def _error(error: oauth.OAuthError, status: int = 400) -> JsonResponse:
    response = JsonResponse(
        {"error": error.code, "error_description": error.description}, status=status
    )
    response["Cache-Control"] = "no-store"
    return response


@csrf_exempt
@open_to_every_origin("POST")
@require_http_methods(["POST"])
def register(request: HttpRequest) -> JsonResponse:
    address = request.META.get("REMOTE_ADDR", "")
    (count,) = rate_counters.hits([(f"throttle:oauth-register:{address}", 3600)])
    if count.value > REGISTRATIONS_PER_HOUR:
        response = JsonResponse(
            {"error": "slow_down", "error_description": "Too many registrations."}, status=429
        )
        response["Retry-After"] = str(math.ceil(count.retry_after_s))
        return response
    if len(request.body) > MAX_REGISTRATION_BYTES:  # (Django bounds what it reads)
        too_big = f"The metadata must be at most {MAX_REGISTRATION_BYTES} bytes."
        return _error(oauth.OAuthError("invalid_client_metadata", too_big))
    try:
        body = json.loads(request.body or b"null")
    except (ValueError, RecursionError):
        body = None
    if not isinstance(body, dict):
        return _error(oauth.OAuthError("invalid_client_metadata", "Send a JSON object."))
    name = body.get("client_name")
    try:
        client = oauth.register_client(
            name="" if name is None else name, redirect_uris=body.get("redirect_uris")
        )
    except oauth.OAuthError as exc:
        return _error(exc)
    return JsonResponse(
        {
            "client_id": client.client_id,
            "client_id_issued_at": int(client.created_at.timestamp()),
            "client_name": client.name,
            "redirect_uris": client.redirect_uris,
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        },
        status=201,
    )


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def authorize(request: HttpRequest) -> HttpResponse:
    """Nothing goes back to the client until its id, its redirect URI (registered, exactly)
    and the `resource` are valid, nor while the request is otherwise malformed: those
    errors are a page of ours (400), since a redirect would send a signed-in member to a
    URI that anyone may have registered. Only the member's decision goes back to it."""
    source = request.GET if request.method == "GET" else request.POST
    try:
        client = oauth.client_for(source.get("client_id"), source.get("redirect_uri"))
        served = mcp_resource.for_request(request)
        oauth.check_resource(source.getlist("resource"), served=served)
        if source.get("response_type") != "code":
            raise oauth.OAuthError("unsupported_response_type", "response_type must be code.")
        challenge = oauth.check_challenge(
            source.get("code_challenge"), source.get("code_challenge_method")
        )
    except oauth.OAuthError as exc:
        return render(request, "web/oauth_error.html", {"error": exc}, status=400)
    redirect_uri, state = source["redirect_uri"], source.get("state", "")
    back: dict[str, str] = {"state": state} if state else {}
    tenants, password_off = _tenants_to_offer(request)
    context = {
        "client": client,
        "tenants": tenants,
        "password_off": password_off,
        "params": source.items(),
    }
    if request.method == "GET":
        return _consent_page(request, context, redirect_uri)
    if request.POST.get("decision") != "allow":
        back["error"] = "access_denied"
        return _back_to(redirect_uri, back)
    picked = request.POST.get("tenant")
    tenant = next((t for t in tenants if t.slug == picked), None)
    if tenant is None:
        refused = next((t for t in password_off if t.slug == picked), None)
        problem = (
            sso.PASSWORD_OFF.format(tenant=refused.name) if refused else "Pick one of your tenants."
        )
        return _consent_page(request, {**context, "problem": problem}, redirect_uri, status=400)
    try:
        back["code"] = _code(client, request, tenant, redirect_uri, challenge)
    except oauth.OAuthError as exc:  # no longer a member, since the page was shown
        back["error"] = exc.code
    return _back_to(redirect_uri, back)


def _tenants_to_offer(request: HttpRequest) -> tuple[list[Tenant], list[Tenant]]:
    """The member's tenants this session may act in, and those it may not: a session a
    password began, in tenants that turned password sign-in off."""
    tenants = list(tenants_for(request.user))
    if not session_needs_password_sign_in(request):
        return tenants, []
    return (
        [t for t in tenants if t.password_sign_in],
        [t for t in tenants if not t.password_sign_in],
    )


def _back_to(redirect_uri: str, params: dict[str, str]) -> HttpResponse:
    """The answer to the client: its (registered) redirect URI with `params` added."""
    separator = "&" if urlsplit(redirect_uri).query else "?"
    response = HttpResponse(status=302)
    response["Location"] = f"{redirect_uri}{separator}{urlencode(params)}"
    return response


def _consent_page(
    request: HttpRequest, context: dict, redirect_uri: str, status: int = 200
) -> HttpResponse:
    """The consent form is answered by a redirect to the client's (registered) redirect URI,
    another origin: the page's CSP lets the form go there, or a browser blocks the redirect."""
    response = render(request, "web/oauth_consent.html", context, status=status)
    response["Content-Security-Policy"] = csp.policy_allowing_forms_to(redirect_uri)
    return response


def _code(client, request: HttpRequest, tenant: Tenant, redirect_uri: str, challenge: str):
    return oauth.grant(
        client=client,
        user=request.user,
        tenant=tenant,
        redirect_uri=redirect_uri,
        code_challenge=challenge,
        sign_in_method=session_sign_in_method(request),
    )


@csrf_exempt
@open_to_every_origin("POST")
@require_http_methods(["POST"])
def token(request: HttpRequest) -> JsonResponse:
    form = request.POST
    try:
        if form.get("grant_type") == "authorization_code":
            issued = oauth.exchange_code(
                code=form.get("code"),
                client_id=form.get("client_id"),
                redirect_uri=form.get("redirect_uri"),
                code_verifier=form.get("code_verifier"),
                resource=form.getlist("resource"),
                served=mcp_resource.for_request(request),
            )
        elif form.get("grant_type") == "refresh_token":
            oauth.check_resource(form.getlist("resource"), served=mcp_resource.for_request(request))
            issued = oauth.refresh(
                refresh_token=form.get("refresh_token"), client_id=form.get("client_id")
            )
        else:
            raise oauth.OAuthError(
                "unsupported_grant_type", "grant_type: authorization_code or refresh_token."
            )
    except oauth.OAuthError as exc:
        return _error(exc)
    response = JsonResponse(
        {
            "access_token": issued.access_token,
            "token_type": "Bearer",
            "expires_in": issued.expires_in,
            "refresh_token": issued.refresh_token,
            "scope": "mcp",
        }
    )
    response["Cache-Control"] = "no-store"
    return response
