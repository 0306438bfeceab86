"""Sign-in with an identity provider: `/sso/<slug>/` sends the browser to the provider
(mozilla-django-oidc's request view: state, nonce and a PKCE S256 challenge kept in the
session), `/sso/callback/` takes the code back and signs the person in through SSOBackend.
Every failure renders the sign-in page with one sentence of ours (never a library's or
the provider's text) and is recorded in the provider's tenant's audit log.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.views.generic import View
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from agentplatform.web.sso import client
from agentplatform.web.sso.backend import callback_settings
from agentplatform.web.sso.client import SSOError
from tenancy import rls
from tenancy.models import AuditAction
from tenancy.records import audit
from tenancy.sign_in import SignInForm
from tenancy.sign_on import sso

STATES = "sso_states"  # session: state -> the provider's slug
STATE_TTL_S = 10 * 60
FAILED = "Single sign-on did not complete. Try again, or ask your administrator."
EXPIRED = "This sign-in has expired or was already used. Start again."


def failure_page(
    request: HttpRequest, message: str, *, status: int, provider: sso.SSOProvider | None = None
) -> HttpResponse:
    """The sign-in page with `message`; the failure audited for a tenant's provider."""
    if provider is not None and provider.tenant_id is not None:
        with rls.tenant_scope(provider.tenant_id):
            audit.record(
                tenant=provider.tenant_id,
                action=AuditAction.SIGNIN_FAILED,
                actor=f"single sign-on with {provider.name} (not signed in)",
                request=request,
                details={"provider": provider.slug, "reason": message},
            )
    context = {
        "form": SignInForm(request),
        "sso_error": message,
        "sso_providers": sso.providers(),
        "next": "",
    }
    return TemplateResponse(request, "registration/login.html", context, status=status)


class SSOStartView(OIDCAuthenticationRequestView):
    def __init__(self, **kwargs: Any) -> None:
        View.__init__(self, **kwargs)  # the library reads one provider's settings here
        self.provider: sso.SSOProvider | None = None

    def get_settings(self, attr: str, *default: Any) -> Any:
        return callback_settings(self.provider, attr, *default)

    def get(self, request: HttpRequest, slug: str) -> HttpResponse:
        self.provider = sso.provider_named(slug)
        if self.provider is None:
            raise Http404("No such identity provider.")
        try:
            discovery = client.discover(self.provider.issuer)
        except SSOError as error:
            return failure_page(request, str(error), status=502, provider=self.provider)
        self.OIDC_OP_AUTH_ENDPOINT = discovery.authorization_endpoint
        self.OIDC_RP_CLIENT_ID = self.provider.client_id
        response = super().get(request)
        state = parse_qs(urlsplit(response["Location"]).query)["state"][0]
        known = request.session.get("oidc_states", {})
        states = {k: v for k, v in request.session.get(STATES, {}).items() if k in known}
        states[state] = slug
        request.session[STATES] = states
        return response


class SSOCallbackView(OIDCAuthenticationCallbackView):
    def get(self, request: HttpRequest) -> HttpResponse:
        state = request.GET.get("state", "")
        slug = request.session.get(STATES, {}).get(state)
        provider = sso.provider_named(slug) if slug else None
        entry = request.session.get("oidc_states", {}).get(state)
        if provider is None or not isinstance(entry, dict):
            return failure_page(request, EXPIRED, status=400)
        if time.time() - float(entry.get("added_on", 0)) > STATE_TTL_S:
            del request.session["oidc_states"][state]
            request.session.modified = True
            return failure_page(request, EXPIRED, status=400, provider=provider)
        request.sso_provider = provider
        self.provider = provider
        return super().get(request)

    def get_settings(self, attr: str, *default: Any) -> Any:
        return callback_settings(self.provider, attr, *default)

    def login_failure(self) -> HttpResponse:
        if self.request.GET.get("error"):
            message = "The identity provider did not sign you in."
        else:
            message = getattr(self.request, "sso_failure", None) or FAILED
        return failure_page(self.request, message, status=403, provider=self.provider)
