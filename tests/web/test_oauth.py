"""The OAuth endpoints MCP clients use (agentplatform/web/oauth.py), request by request:
what registration refuses and how, the resource a client names (RFC 8707), what is shown
rather than redirected, codes spent by their first exchange, and consent in a session a
password began. tests/mcp/test_oauth.py has whole flows against a live server."""

from __future__ import annotations

import base64
import hashlib
import json
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.test import Client

from base import rate_counters
from tenancy import services as tenancy
from tenancy.models import (
    IdentityProvider,
    IdentityProviderGroup,
    OAuthClient,
    OAuthGrant,
    OAuthToken,
    Role,
)
from tenancy.sign_in import SIGN_IN_METHOD
from tenancy.sign_on import oauth
from tests.factories import login

pytestmark = pytest.mark.django_db

ADDRESS = "192.0.2.7"  # the registration counter is per address


@pytest.fixture
def anyone() -> Client:
    rate_counters.reset(f"throttle:oauth-register:{ADDRESS}")
    return Client(REMOTE_ADDR=ADDRESS)


def register(client: Client, body: object, **headers):
    return client.post(
        "/oauth/register", json.dumps(body), content_type="application/json", **headers
    )


@pytest.mark.parametrize(
    ("body", "code", "words"),
    [
        ({"redirect_uris": ["https://evil.com; script-src x/cb"]}, "invalid_redirect_uri",
         "redirect_uris[0]: a redirect URI may hold only URI characters"),
        ({"redirect_uris": ["https://evil.com;script-src/cb"]}, "invalid_redirect_uri",
         "redirect_uris[0]: its host must be a DNS name"),
        ({"redirect_uris": ["https://ok.example/cb", "http://evil.example/cb"]},
         "invalid_redirect_uri", "redirect_uris[1]: plain http is allowed only on a loopback"),
        ({"redirect_uris": [{"uri": "https://ok.example/cb"}]}, "invalid_redirect_uri",
         "must be a string"),
        ({}, "invalid_redirect_uri", "Give 1 to 10"),
        ({"client_name": "\u0007bell", "redirect_uris": ["https://ok.example/cb"]},
         "invalid_client_metadata", "control characters"),
        ({"client_name": "\ud83d", "redirect_uris": ["https://ok.example/cb"]},
         "invalid_client_metadata", "control characters"),  # (the database would refuse it)
        ({"client_name": 7, "redirect_uris": ["https://ok.example/cb"]},
         "invalid_client_metadata", "must be a string"),
        ({"client_name": "x" * 20_000, "redirect_uris": ["https://ok.example/cb"]},
         "invalid_client_metadata", "at most 16384 bytes"),
        (["not", "an", "object"], "invalid_client_metadata", "JSON object"),
    ],
)  # fmt: skip
def test_registration_refuses_hostile_metadata_with_a_400_saying_why(anyone, body, code, words):
    refused = register(anyone, body)
    assert refused.status_code == 400, refused.content
    assert refused.json()["error"] == code
    assert words in refused.json()["error_description"]
    assert refused["Cache-Control"] == "no-store"
    assert not OAuthClient.objects.exists()


def test_registration_takes_a_client_without_a_name(anyone):
    registered = register(anyone, {"redirect_uris": ["http://[::1]:8080/cb"]})
    assert registered.status_code == 201
    assert registered.json()["client_name"] == ""
    assert OAuthClient.objects.get().redirect_uris == ["http://[::1]:8080/cb"]


# -- the resource (RFC 8707) ----------------------------------------------------------------
RESOURCE = "https://agents.example/mcp"
REDIRECT = "http://127.0.0.1:8765/callback"
VERIFIER = "v" * 43


@pytest.fixture
def served(settings) -> str:
    settings.MCP_RESOURCE_URL = RESOURCE  # what the protected-resource metadata names
    return RESOURCE


@pytest.fixture
def params(anyone) -> dict[str, str]:
    client_id = register(anyone, {"redirect_uris": [REDIRECT]}).json()["client_id"]
    digest = hashlib.sha256(VERIFIER.encode()).digest()
    return {
        "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT,
        "code_challenge": base64.urlsafe_b64encode(digest).rstrip(b"=").decode(),
        "code_challenge_method": "S256", "state": "s1",
    }  # fmt: skip


def answer(browser: Client, params: dict[str, str]) -> dict[str, list[str]]:
    """The member allows; the query the client's redirect URI receives."""
    page = browser.get(f"/oauth/authorize?{urlencode(params, doseq=True)}")
    assert page.status_code == 200, page.content[:300]
    done = browser.post("/oauth/authorize", {**params, "tenant": "acme", "decision": "allow"})
    assert done.status_code == 302 and done["Location"].startswith(REDIRECT + "?")
    return parse_qs(urlsplit(done["Location"]).query)


BAD_RESOURCES = [
    "https://elsewhere.example/mcp",
    "https://agents.example/other",
    "https://agents.example:8443/mcp",
    "http://agents.example/mcp",
    "https://agents.example/mcp#x",
    "agents.example/mcp",
    ["https://agents.example/mcp", "https://elsewhere.example/mcp"],
]


@pytest.mark.parametrize("resource", BAD_RESOURCES)
def test_authorization_for_another_resource_is_a_page_of_ours_never_a_redirect(
    served, params, trio, resource
):
    """A registered client and URI, but another resource: nothing goes to the client's URI
    (anyone may register one), neither on the consent page's GET nor on its POST."""
    browser = login(Client(), trio.alice)
    asked = f"/oauth/authorize?{urlencode({**params, 'resource': resource}, doseq=True)}"
    refused = browser.get(asked)
    assert refused.status_code == 400 and "Location" not in refused
    assert refused["Content-Type"].startswith("text/html")
    page = refused.content.decode()
    assert f"This server issues tokens only for its MCP endpoint: resource={RESOURCE}." in page
    assert "invalid_target" in page and REDIRECT not in page
    posted = browser.post(
        "/oauth/authorize",
        {**params, "resource": resource, "tenant": "acme", "decision": "allow"},
    )
    assert posted.status_code == 400 and "Location" not in posted
    assert not OAuthGrant.objects.exists()


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"client_id": "nobody"}, "Unknown client_id"),
        ({"redirect_uri": "https://attacker.example/cb"}, "not one this client registered"),
        ({"response_type": "token"}, "response_type must be code"),
        ({"code_challenge_method": "plain"}, "PKCE is required"),
        ({"code_challenge": "short"}, "43 to 128 characters"),
    ],
)
def test_other_malformed_authorizations_are_a_page_of_ours(served, params, trio, change, words):
    browser = login(Client(), trio.alice)
    for resource in (RESOURCE, "https://elsewhere.example/mcp"):
        asked = {**params, **change, "resource": resource}
        refused = browser.get(f"/oauth/authorize?{urlencode(asked)}")
        assert refused.status_code == 400 and "Location" not in refused
        if resource == RESOURCE or "client" in words or "redirect" in words:
            assert words in refused.content.decode()
    assert not OAuthGrant.objects.exists()


def test_only_the_members_decision_goes_back_to_the_client(served, params, trio):
    browser = login(Client(), trio.alice)
    asked = {**params, "resource": RESOURCE}
    denied = browser.post("/oauth/authorize", {**asked, "tenant": "acme", "decision": "deny"})
    assert denied.status_code == 302 and denied["Location"].startswith(REDIRECT + "?")
    assert parse_qs(urlsplit(denied["Location"]).query) == {
        "state": ["s1"], "error": ["access_denied"]
    }  # fmt: skip
    assert not OAuthGrant.objects.exists()


@pytest.mark.parametrize(
    "resource",
    [
        [RESOURCE],
        ["HTTPS://Agents.Example:443/mcp/"],  # the same resource, spelled otherwise
        [RESOURCE, RESOURCE],
        [],  # none: a client from before the MCP spec asked for resource indicators
    ],
)
def test_a_code_and_tokens_are_issued_for_this_servers_resource(served, params, trio, resource):
    query = answer(login(Client(), trio.alice), {**params, "resource": resource})
    exchange = {"grant_type": "authorization_code", "code": query["code"][0],
                "client_id": params["client_id"], "redirect_uri": REDIRECT,
                "code_verifier": VERIFIER, "resource": resource}  # fmt: skip
    tokens = Client().post("/oauth/token", exchange)
    assert tokens.status_code == 200, tokens.content
    again = {"grant_type": "refresh_token", "refresh_token": tokens.json()["refresh_token"],
             "client_id": params["client_id"], "resource": resource}  # fmt: skip
    assert Client().post("/oauth/token", again).status_code == 200


def exchange_of(params: dict[str, str], code: str, **change) -> dict[str, str]:
    return {"grant_type": "authorization_code", "code": code, "client_id": params["client_id"],
            "redirect_uri": REDIRECT, "code_verifier": VERIFIER, **change}  # fmt: skip


def test_the_token_endpoint_refuses_another_resource_with_a_400(served, params, trio):
    query = answer(login(Client(), trio.alice), {**params, "resource": RESOURCE})
    exchange = exchange_of(params, query["code"][0])
    refused = Client().post("/oauth/token", {**exchange, "resource": "https://evil.example/"})
    assert refused.status_code == 400 and refused["Cache-Control"] == "no-store"
    assert refused.json() == {
        "error": "invalid_target",
        "error_description": f"This server issues tokens only for its MCP endpoint: "
        f"resource={RESOURCE}.",
    }
    spent = Client().post("/oauth/token", {**exchange, "resource": RESOURCE})
    assert spent.status_code == 400 and spent.json()["error"] == "invalid_grant"  # used up
    tokens = Client().post(
        "/oauth/token", exchange_of(params, answer(login(Client(), trio.alice), params)["code"][0])
    )
    assert tokens.status_code == 200
    refresh = {"grant_type": "refresh_token", "refresh_token": tokens.json()["refresh_token"],
               "client_id": params["client_id"]}  # fmt: skip
    wrong = Client().post("/oauth/token", {**refresh, "resource": "https://evil.example/mcp"})
    assert wrong.json()["error"] == "invalid_target"
    assert Client().post("/oauth/token", refresh).status_code == 200  # a refresh token is not


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"code_verifier": "w" * 43}, "invalid_grant"),
        ({"code_verifier": "short"}, "invalid_grant"),
        ({"code_verifier": ""}, "invalid_request"),
        ({"redirect_uri": "http://127.0.0.1:8765/other"}, "invalid_grant"),
        ({"client_id": "another-client"}, "invalid_grant"),
        ({"resource": "https://evil.example/mcp"}, "invalid_target"),
    ],
)
def test_a_code_is_spent_by_its_first_exchange_whatever_the_outcome(
    served, params, trio, change, error
):
    """OAuth 2.1 §4.1.3: the first exchange spends the code, failed or not; the right
    verifier, URI and client after a failed try get `invalid_grant` and no token."""
    code = answer(login(Client(), trio.alice), params)["code"][0]
    failed = Client().post("/oauth/token", exchange_of(params, code, **change))
    assert failed.status_code == 400 and failed.json()["error"] == error
    assert OAuthGrant.objects.get().used_at is not None
    again = Client().post("/oauth/token", exchange_of(params, code))
    assert again.status_code == 400
    assert again.json() == {
        "error": "invalid_grant", "error_description": "The code is unknown, used or expired."
    }  # fmt: skip
    assert not OAuthToken.objects.exists()


def test_an_unknown_or_missing_code_is_refused(served, params, trio):
    unknown = Client().post("/oauth/token", exchange_of(params, "made-up"))
    assert unknown.status_code == 400 and unknown.json()["error"] == "invalid_grant"
    missing = Client().post("/oauth/token", exchange_of(params, ""))
    assert missing.status_code == 400 and missing.json()["error"] == "invalid_request"


# -- password sign-in off (docs/sso.md) -------------------------------------------------------
def passwords_off(trio) -> None:
    provider = IdentityProvider.objects.create(
        tenant=trio.acme, slug="acme-idp", name="Acme Login", issuer="https://login.acme.example",
        client_id="platform",
    )  # fmt: skip
    IdentityProviderGroup.objects.create(provider=provider, group="staff", tenant=trio.acme)
    tenancy.tenant_sign_in_set(tenant=trio.acme, password_sign_in=False)


def test_a_password_session_cannot_authorise_a_client_in_a_tenant_without_passwords(
    served, params, trio
):
    """bob (acme and globex) signed in with his password: the consent page offers globex
    only and says why not acme; picking acme anyway is refused there, with no code."""
    tenancy.membership_set(tenant=trio.globex, user=trio.bob, role=Role.MEMBER)
    passwords_off(trio)
    bob = login(Client(), trio.bob)
    page = bob.get(f"/oauth/authorize?{urlencode(params)}")
    assert page.status_code == 200
    text = page.content.decode()
    assert '<option value="globex">' in text and '<option value="acme">' not in text
    assert "Password sign-in is turned off for Acme" in text
    picked = bob.post("/oauth/authorize", {**params, "tenant": "acme", "decision": "allow"})
    assert picked.status_code == 400 and "Location" not in picked
    assert "Password sign-in is turned off for Acme. Sign in with" in picked.content.decode()
    assert not OAuthGrant.objects.exists()
    with pytest.raises(oauth.OAuthError, match="Password sign-in is turned off for Acme"):
        oauth.grant(client=OAuthClient.objects.get(), user=trio.bob, tenant=trio.acme,
                    redirect_uri=REDIRECT, code_challenge=params["code_challenge"],
                    sign_in_method="password")  # fmt: skip
    done = bob.post("/oauth/authorize", {**params, "tenant": "globex", "decision": "allow"})
    assert done.status_code == 302 and "code=" in done["Location"]
    assert OAuthGrant.objects.get().sign_in_method == "password"


def test_a_single_sign_on_session_authorises_a_client_in_a_tenant_without_passwords(
    served, params, trio
):
    passwords_off(trio)
    bob = Client()
    bob.force_login(trio.bob)
    session = bob.session
    session[SIGN_IN_METHOD] = "sso:acme-idp"
    session.save()
    query = answer(bob, params)
    tokens = Client().post("/oauth/token", exchange_of(params, query["code"][0]))
    assert tokens.status_code == 200
    assert OAuthToken.objects.get().sign_in_method == "sso:acme-idp"
