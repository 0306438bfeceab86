"""The auth backend of the OpenID Connect callback: mozilla-django-oidc's code flow, with
the provider chosen per request (the callback view puts it on the request), the network
reached through the guarded egress (client.py), and the ID token checked in full:
signature against the provider's JWKS (asymmetric algorithms only), issuer, audience
(and the authorized party when there are several), expiry, and the nonce of this sign-in.

It answers only requests the callback view marked; a password sign-in passes it by.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import jwt
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings

from agentplatform.web.sso import client
from agentplatform.web.sso.client import SSOError
from tenancy import services
from tenancy.sign_on import sso

log = logging.getLogger(__name__)

# Signed by the provider's private key, checked with its published public one: never a
# shared-secret (HS*) or unsigned token.
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"]
LEEWAY_S = 60


def callback_settings(provider: sso.SSOProvider, attr: str, *default: Any) -> Any:
    """What mozilla-django-oidc reads from settings, answered for `provider`."""
    values = {
        "OIDC_RP_SCOPES": provider.scopes,
        "OIDC_USE_NONCE": True,
        "OIDC_USE_PKCE": True,
        "OIDC_PKCE_CODE_CHALLENGE_METHOD": "S256",
        "OIDC_AUTHENTICATION_CALLBACK_URL": "sso_callback",
        "OIDC_REDIRECT_FIELD_NAME": "next",
        "OIDC_STORE_ACCESS_TOKEN": False,
        "OIDC_STORE_ID_TOKEN": False,
    }
    if attr in values:
        return values[attr]
    return import_from_settings(attr, *default)


class SSOBackend(OIDCAuthenticationBackend):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The library reads one provider from settings here; ours is chosen per request.
        self.UserModel = get_user_model()
        self.provider: sso.SSOProvider | None = None

    def get_settings(self, attr: str, *default: Any) -> Any:
        return callback_settings(self.provider, attr, *default)

    def authenticate(self, request, **kwargs: Any):
        provider = getattr(request, "sso_provider", None)
        if request is None or provider is None:
            return None  # not the callback: a password sign-in, an API key
        self.provider = provider
        try:
            discovery = client.discover(provider.issuer)
            self.discovery = discovery
            self.OIDC_OP_TOKEN_ENDPOINT = discovery.token_endpoint
            self.OIDC_OP_USER_ENDPOINT = discovery.userinfo_endpoint
            self.OIDC_OP_JWKS_ENDPOINT = discovery.jwks_uri
            self.OIDC_RP_CLIENT_ID = provider.client_id
            self.OIDC_RP_CLIENT_SECRET = provider.client_secret
            self.OIDC_RP_SIGN_ALGO = "RS256"
            self.OIDC_RP_IDP_SIGN_KEY = None
            return super().authenticate(request, **kwargs)
        except SSOError as error:
            request.sso_failure = str(error)
            return None

    # -- the exchanges, through the guarded egress --------------------------------------------
    def get_token(self, payload: dict[str, str]) -> dict:
        form = {k: v for k, v in payload.items() if k not in ("client_id", "client_secret")}
        answer = client.token(
            self.OIDC_OP_TOKEN_ENDPOINT,
            form,
            client_id=self.provider.client_id,
            client_secret=self.provider.client_secret,
        )
        if not isinstance(answer.get("id_token"), str):
            raise SSOError("The identity provider sent no ID token.")
        return answer

    def get_userinfo(self, access_token: str, id_token: str, payload: dict) -> dict:
        """The ID token's claims, with the userinfo endpoint's added where the provider has
        one and it speaks of the same subject (the token's own claims win)."""
        claims = dict(payload)
        if self.discovery.userinfo_endpoint and isinstance(access_token, str):
            extra = client.userinfo(self.discovery.userinfo_endpoint, access_token)
            if extra.get("sub") == payload.get("sub"):
                claims = {**extra, **payload}
        return claims

    # -- the ID token --------------------------------------------------------------------------
    def verify_token(self, token: str, **kwargs: Any) -> dict:
        nonce = kwargs.get("nonce")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise SSOError("The identity provider's ID token is malformed.") from None
        algorithm = header.get("alg")
        if algorithm not in ALGORITHMS:
            raise SSOError("The ID token is not signed with an algorithm this platform accepts.")
        key = self._signing_key(header)
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=self.provider.client_id,
                issuer=self.discovery.issuer,
                leeway=LEEWAY_S,
                options={"require": ["iss", "aud", "sub", "exp", "iat"]},
            )
        except jwt.ExpiredSignatureError:
            raise SSOError("The ID token has expired; sign in again.") from None
        except jwt.InvalidIssuerError:
            raise SSOError("The ID token was issued by another identity provider.") from None
        except jwt.InvalidAudienceError:
            raise SSOError("The ID token was issued for another application.") from None
        except jwt.InvalidSignatureError:
            raise SSOError("The ID token's signature does not verify.") from None
        except jwt.PyJWTError:
            raise SSOError("The ID token is not valid.") from None
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != self.provider.client_id:
            raise SSOError("The ID token was issued for another application.")
        if not nonce or claims.get("nonce") != nonce:
            raise SSOError("The ID token does not belong to this sign-in (its nonce differs).")
        return claims

    def _signing_key(self, header: dict) -> Any:
        kid = header.get("kid")
        keys = client.jwks(self.OIDC_OP_JWKS_ENDPOINT)
        candidates = [
            key
            for key in keys
            if (kid is None or key.get("kid") == kid)
            and key.get("use", "sig") == "sig"
            and key.get("alg", header["alg"]) == header["alg"]
        ]
        if len(candidates) != 1:
            raise SSOError("The ID token is not signed by a key of this identity provider.")
        try:
            return jwt.PyJWK(json.loads(json.dumps(candidates[0])), header["alg"])
        except jwt.PyJWTError:
            raise SSOError("The identity provider's signing key is unusable.") from None

    # -- the user ----------------------------------------------------------------------------
    def get_or_create_user(self, access_token: str, id_token: str, payload: dict):
        claims = self.get_userinfo(access_token, id_token, payload)
        try:
            user = sso.user_for_identity(provider=self.provider, claims=claims)
        except ValidationError as error:
            raise SSOError(" ".join(error.messages)) from None
        if not user.is_active:
            raise SSOError("This account is disabled.")
        services.memberships_sync(
            user=user, provider=self.provider, groups=sso.groups_of(self.provider, claims)
        )
        user.signed_in_with_provider = self.provider.slug  # for the sign-in's audit entry
        return user
