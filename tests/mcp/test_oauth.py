"""OAuth 2.1 for /mcp, as an MCP client does it against a live server: discovery from the
401, dynamic client registration, a signed-in member's consent (picking the tenant), the
code exchanged with PKCE, the MCP SDK client calling as that member, refresh, and every
refusal."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import secrets
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata
from mcp.shared.exceptions import MCPError

from agents.models import Run
from tenancy import services as tenancy
from tenancy.models import IdentityProvider, OAuthToken
from tenancy.sign_on import oauth
from tests.factories import PASSWORD
from tests.fakes.provider_server import TextReply
from tests.mcp.test_server import call, text_of, with_session

pytestmark = pytest.mark.django_db(transaction=True)

REDIRECT = "http://127.0.0.1:8765/callback"


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def signed_in(base: str, username: str) -> httpx2.Client:
    browser = httpx2.Client(base_url=base, timeout=20)
    page = browser.get("/login/").text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    done = browser.post(
        "/login/",
        data={"csrfmiddlewaretoken": token, "username": username, "password": PASSWORD},
        headers={"Referer": f"{base}/login/"},
    )
    assert done.status_code == 302, done.text[:500]
    return browser


def consent(browser: httpx2.Client, params: dict[str, str], tenant: str, decision="allow"):
    page = browser.get(f"/oauth/authorize?{urlencode(params)}")
    assert page.status_code == 200, page.text[:500]
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    return browser.post(
        "/oauth/authorize",
        data={**params, "csrfmiddlewaretoken": token, "tenant": tenant, "decision": decision},
        headers={"Referer": str(page.url)},
    )


@pytest.fixture
def base(mcp_server) -> str:
    return mcp_server.removesuffix("/mcp")


def test_a_member_signs_an_mcp_client_in_and_it_acts_as_them(
    base, mcp_server, trio, agent, provider_server, celery_worker_process
):
    # Discovery, as the spec has clients do it: the 401 names the resource metadata, which
    # names the authorization server, whose metadata names its endpoints.
    challenge = httpx2.post(mcp_server, json={}).headers["www-authenticate"]
    resource_url = re.search(r'resource_metadata="([^"]+)"', challenge).group(1)
    resource = httpx2.get(resource_url).json()
    (issuer,) = resource["authorization_servers"]
    server = httpx2.get(f"{issuer.rstrip('/')}/.well-known/oauth-authorization-server").json()
    assert server["code_challenge_methods_supported"] == ["S256"]

    registered = httpx2.post(
        server["registration_endpoint"],
        json={"client_name": "Test client", "redirect_uris": [REDIRECT]},
    )
    assert registered.status_code == 201
    client_id = registered.json()["client_id"]

    verifier, challenge_value = pkce()
    params = {
        "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT,
        "code_challenge": challenge_value, "code_challenge_method": "S256", "state": "xyz",
    }  # fmt: skip
    browser = signed_in(base, "alice")
    wrong = consent(browser, params, "globex")  # not alice's tenant
    assert wrong.status_code == 400 and "Pick one of your tenants" in wrong.text
    answer = consent(browser, params, "acme")
    assert answer.status_code == 302
    back = urlsplit(answer.headers["location"])
    assert f"{back.scheme}://{back.netloc}{back.path}" == REDIRECT
    query = parse_qs(back.query)
    assert query["state"] == ["xyz"]
    code = query["code"][0]

    exchange = {"grant_type": "authorization_code", "code": code, "client_id": client_id,
                "redirect_uri": REDIRECT}  # fmt: skip
    bad = httpx2.post(server["token_endpoint"], data={**exchange, "code_verifier": "x" * 43})
    assert bad.status_code == 400 and bad.json()["error"] == "invalid_grant"
    spent = httpx2.post(server["token_endpoint"], data={**exchange, "code_verifier": verifier})
    assert spent.json()["error"] == "invalid_grant"  # the failed exchange spent the code

    code = parse_qs(urlsplit(consent(browser, params, "acme").headers["location"]).query)
    exchange["code"] = code["code"][0]
    tokens = httpx2.post(server["token_endpoint"], data={**exchange, "code_verifier": verifier})
    assert tokens.status_code == 200, tokens.text
    access = tokens.json()["access_token"]
    again = httpx2.post(server["token_endpoint"], data={**exchange, "code_verifier": verifier})
    assert again.json()["error"] == "invalid_grant"  # a code is used once

    # The MCP SDK client, as alice in acme: her tools, her runs.
    async def names(client: ClientSession) -> list[str]:
        return [t.name for t in (await client.list_tools()).tools]

    assert "ask_assistant" in with_session(mcp_server, access, names)
    provider_server.script("openai", TextReply("Hello, Alice."))
    result = call(mcp_server, access, "ask_assistant", {"message": "hi"})
    assert not result.is_error, text_of(result)
    run = Run.objects.get(pk=result.structured_content["run_id"])
    assert run.initiated_by_user == trio.alice and run.initiated_by_api_key is None
    assert run.conversation.owner_user == trio.alice

    # Refresh rotates: the new access token works, the old refresh token does not.
    refreshed = httpx2.post(
        server["token_endpoint"],
        data={"grant_type": "refresh_token", "refresh_token": tokens.json()["refresh_token"],
              "client_id": client_id},
    )  # fmt: skip
    assert refreshed.status_code == 200
    assert "ask_assistant" in with_session(mcp_server, refreshed.json()["access_token"], names)
    replay = httpx2.post(
        server["token_endpoint"],
        data={"grant_type": "refresh_token", "refresh_token": tokens.json()["refresh_token"],
              "client_id": client_id},
    )  # fmt: skip
    assert replay.json()["error"] == "invalid_grant"
    rejected = httpx2.post(mcp_server, json={}, headers={"Authorization": f"Bearer {access}"})
    assert rejected.status_code == 401  # the old access token went with its refresh token
    assert "invalid_token" in rejected.headers["www-authenticate"]
    assert "invalid, revoked or expired" in rejected.json()["error_description"]
    missing = httpx2.post(mcp_server, json={})  # no token at all: the SDK's own words
    assert missing.json()["error_description"] == "Authentication required"


def tokens_for(base: str, browser: httpx2.Client, tenant: str) -> dict:
    """Register a client, have `browser`'s member allow it in `tenant`, exchange the code."""
    client_id = httpx2.post(
        f"{base}/oauth/register", json={"client_name": "c", "redirect_uris": [REDIRECT]}
    ).json()["client_id"]
    verifier, challenge = pkce()
    params = {"response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT,
              "code_challenge": challenge, "code_challenge_method": "S256"}  # fmt: skip
    answer = consent(browser, params, tenant)
    assert answer.status_code == 302, answer.text[:300]
    code = parse_qs(urlsplit(answer.headers["location"]).query)["code"][0]
    exchange = {"grant_type": "authorization_code", "code": code, "client_id": client_id,
                "redirect_uri": REDIRECT, "code_verifier": verifier}  # fmt: skip
    tokens = httpx2.post(f"{base}/oauth/token", data=exchange)
    assert tokens.status_code == 200, tokens.text
    return {**tokens.json(), "client_id": client_id}


def test_a_client_authorised_in_a_password_session_stops_where_passwords_are_off(
    base, mcp_server, trio
):
    """bob allowed two clients with his password, one in acme and one in globex. acme turns
    password sign-in off: the acme client's calls are refused with what to do, the globex
    one carries on, and so does a client authorised in a single sign-on session."""
    tenancy.membership_set(tenant=trio.globex, user=trio.bob, role="member")
    browser = signed_in(base, "bob")
    in_acme = tokens_for(base, browser, "acme")["access_token"]
    in_globex = tokens_for(base, browser, "globex")["access_token"]
    via_sso = tokens_for(base, browser, "acme")
    OAuthToken.objects.filter(access_hash=oauth._hash(via_sso["access_token"])).update(
        sign_in_method="sso:acme-idp"
    )  # as if bob had allowed it in a session of acme's provider
    IdentityProvider.objects.create(
        tenant=trio.acme, slug="acme-idp", name="Acme Login", issuer="https://login.acme.example",
        client_id="platform", default_role="member",
    )  # fmt: skip
    tenancy.tenant_sign_in_set(tenant=trio.acme, password_sign_in=False)

    async def names(client: ClientSession) -> list[str]:
        return [t.name for t in (await client.list_tools()).tools]

    message = (
        "Password sign-in is turned off for Acme. Sign in with your organisation's single "
        "sign-on instead. Then authorise this client again."
    )

    async def refusal(client: ClientSession) -> str | None:
        try:
            await client.list_tools()
        except MCPError as exc:  # a JSON-RPC error, raised here rather than in a task group
            return exc.message
        return None

    assert with_session(mcp_server, in_acme, refusal) == message
    result = call(mcp_server, in_acme, "calculator", {"expression": "1+1"})
    assert result.is_error and text_of(result) == message
    assert "calculator" in with_session(mcp_server, in_globex, names)
    assert "calculator" in with_session(mcp_server, via_sso["access_token"], names)
    # a refresh keeps how its grant signed in
    refreshed = httpx2.post(
        f"{base}/oauth/token",
        data={"grant_type": "refresh_token", "refresh_token": via_sso["refresh_token"],
              "client_id": via_sso["client_id"]},
    )  # fmt: skip
    assert refreshed.status_code == 200
    assert "calculator" in with_session(mcp_server, refreshed.json()["access_token"], names)


def test_refusals_before_any_code(base, trio):
    for body in (
        {"redirect_uris": ["http://evil.example/cb"]},  # plain http off loopback
        {"redirect_uris": []},
        {"redirect_uris": ["https://ok.example/cb#frag"]},
        ["not", "an", "object"],
    ):
        refused = httpx2.post(f"{base}/oauth/register", json=body)
        assert refused.status_code == 400 and refused.json()["error"].startswith("invalid_")
    client_id = httpx2.post(
        f"{base}/oauth/register", json={"client_name": "c", "redirect_uris": [REDIRECT]}
    ).json()["client_id"]
    browser = signed_in(base, "alice")
    _, challenge = pkce()
    good = {"response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT,
            "code_challenge": challenge, "code_challenge_method": "S256"}  # fmt: skip
    for change, words in (
        ({"redirect_uri": "https://attacker.example/cb"}, "not one this client registered"),
        ({"client_id": "nobody"}, "Unknown client_id"),
        ({"code_challenge_method": "plain"}, "PKCE is required"),
    ):
        page = browser.get(f"/oauth/authorize?{urlencode({**good, **change})}")
        assert page.status_code == 400 and words in page.text  # shown, never redirected
    denied = consent(browser, good, "acme", decision="deny")
    assert denied.status_code == 302 and "error=access_denied" in denied.headers["location"]
    anonymous = httpx2.get(f"{base}/oauth/authorize?{urlencode(good)}")
    assert anonymous.status_code == 302 and "/login/" in anonymous.headers["location"]
    unknown = httpx2.post(f"{base}/oauth/token", data={"grant_type": "password"})
    assert unknown.json()["error"] == "unsupported_grant_type"
    # The resource is the one the metadata names, on the port this server is on (RFC 8707).
    served = httpx2.get(f"{base}/.well-known/oauth-protected-resource/mcp").json()["resource"]
    refresh = {"grant_type": "refresh_token", "refresh_token": "mcprt_x", "client_id": client_id}
    for resource, error in (
        (served, "invalid_grant"),
        ("http://127.0.0.1:1/mcp", "invalid_target"),
    ):
        refused = httpx2.post(f"{base}/oauth/token", data={**refresh, "resource": resource})
        assert refused.status_code == 400 and refused.json()["error"] == error


def test_the_mcp_sdks_own_oauth_client_signs_in_and_calls(base, mcp_server, trio):
    """The SDK's OAuthClientProvider does discovery, registration, PKCE and the exchange;
    the browser part (the member's consent) is a signed-in session here."""

    class Memory:
        tokens = client_info = None

        async def get_tokens(self):
            return self.tokens

        async def set_tokens(self, tokens):
            self.tokens = tokens

        async def get_client_info(self):
            return self.client_info

        async def set_client_info(self, info):
            self.client_info = info

    browser = signed_in(base, "alice")
    landed: dict[str, str] = {}

    def approve(url: str) -> None:
        params = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
        answer = consent(browser, params, "acme")
        assert answer.status_code == 302, answer.text[:300]
        landed.update(
            {k: v[0] for k, v in parse_qs(urlsplit(answer.headers["location"]).query).items()}
        )

    async def redirect_handler(url: str) -> None:
        await asyncio.to_thread(approve, url)

    async def callback_handler() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=landed["code"], state=landed.get("state"))

    storage = Memory()
    provider = OAuthClientProvider(
        server_url=mcp_server,
        client_metadata=OAuthClientMetadata(
            client_name="SDK client",
            redirect_uris=[REDIRECT],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )

    async def session() -> list[str]:
        async with (
            httpx2.AsyncClient(auth=provider, timeout=30) as http,
            streamable_http_client(mcp_server, http_client=http) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            return [t.name for t in (await client.list_tools()).tools]

    names = asyncio.run(session())
    assert "calculator" in names
    assert storage.tokens.access_token.startswith("mcpat_")


def test_a_web_page_may_discover_and_call_from_an_origin_mcp_allows(base, mcp_server, trio):
    """CORS as a browser would ask it: the metadata, registration and token endpoints answer
    any origin (no credentials); /mcp answers the origins its Origin check admits
    (MCP_ALLOWED_ORIGINS, here localhost on any port) and shows them the 401's challenge."""
    page, evil = "http://localhost:5173", "https://evil.example"

    def preflight(url: str, origin: str, method: str, headers: str) -> httpx2.Response:
        return httpx2.options(
            url,
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": method,
                "Access-Control-Request-Headers": headers,
            },
        )

    metadata = f"{base}/.well-known/oauth-protected-resource/mcp"  # the MCP SDK's CORS
    for url, method, headers in (
        (metadata, "GET", "mcp-protocol-version"),
        (f"{base}/.well-known/oauth-authorization-server", "GET", "mcp-protocol-version"),
        (f"{base}/oauth/register", "POST", "content-type"),
        (f"{base}/oauth/token", "POST", "content-type"),
    ):
        for origin in (page, evil):
            answer = preflight(url, origin, method, headers)
            assert answer.status_code in (200, 204), (url, answer.text)
            assert answer.headers["access-control-allow-origin"] == "*", url
            assert "access-control-allow-credentials" not in answer.headers
    for origin in (page, evil):
        assert httpx2.get(metadata, headers={"Origin": origin}).headers[
            "access-control-allow-origin"
        ] == "*"  # fmt: skip

    asked = "authorization, content-type, mcp-protocol-version"
    allowed = preflight(mcp_server, page, "POST", asked)
    assert allowed.status_code == 200  # before (and without) the token check
    assert allowed.headers["access-control-allow-origin"] == page
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    assert "access-control-allow-credentials" not in allowed.headers
    challenged = httpx2.post(mcp_server, json={}, headers={"Origin": page})
    assert challenged.status_code == 401
    assert challenged.headers["access-control-allow-origin"] == page
    assert "WWW-Authenticate" in challenged.headers["access-control-expose-headers"]

    refused = preflight(mcp_server, evil, "POST", asked)
    assert refused.status_code == 400
    assert "access-control-allow-origin" not in refused.headers
    _, key = tenancy.api_key_create(tenant=trio.acme, name="k", scopes=["read"])
    headers = {"Authorization": f"Bearer {key}", "Origin": evil}
    forbidden = httpx2.post(mcp_server, json={}, headers=headers)
    assert forbidden.status_code == 403  # the Origin check (DNS-rebinding protection)
    assert "access-control-allow-origin" not in forbidden.headers

    authorize = preflight(f"{base}/oauth/authorize", page, "GET", "content-type")
    assert "access-control-allow-origin" not in authorize.headers  # it uses the session
