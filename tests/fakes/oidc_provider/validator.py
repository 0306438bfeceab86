"""The claims the fake provider issues, and the test knobs that spoil one of them."""

from __future__ import annotations

import time

from oauth2_provider.oauth2_validators import OAuth2Validator


class Validator(OAuth2Validator):
    oidc_claim_scope = None  # every claim in the ID token and userinfo, groups included

    def get_additional_claims(self, request):
        user = request.user
        claims = {
            "email": user.email,
            "email_verified": True,
            "preferred_username": user.username,
            "groups": sorted(group.name for group in user.groups.all()),
        }
        knob = user.first_name
        if knob == "email-unverified":  # the address, and no word on whether it is theirs
            del claims["email_verified"]
        elif knob == "email-not-verified":
            claims["email_verified"] = False
        return claims

    def get_id_token_dictionary(self, token, token_handler, request):
        claims, expiration = super().get_id_token_dictionary(token, token_handler, request)
        knob = request.user.first_name
        if knob == "wrong-aud":
            claims["aud"] = "another-application"
        elif knob == "wrong-iss":
            claims["iss"] = "http://127.0.0.1:9/another-issuer"
        elif knob == "expired":
            claims["iat"] = int(time.time()) - 7200
            claims["exp"] = int(time.time()) - 3600
        elif knob == "bad-nonce":
            claims["nonce"] = "not-the-nonce-sent"
        return claims, expiration
