"""/mcp's resource URL is the one the client used (agentplatform/mcp_resource.py): an MCP
client that reaches the server as http://127.0.0.1:PORT is told the resource is
http://127.0.0.1:PORT/mcp — by the protected-resource metadata, the 401's challenge and the
authorization server — for any host ALLOWED_HOSTS admits, unless MCP_RESOURCE_URL is set.
In process: the Django test client, and the ASGI router with Django behind it; the MCP SDK's
own OAuth client signs in through it as 127.0.0.1."""

from __future__ import annotations

import asyncio
import re
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from django.test import Client
from mcp import ClientSession
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata

from agentplatform.asgi_handler import StreamingASGIHandler
from agentplatform.mcp.asgi import McpRouter
from tenancy.sign_on import oauth
from tests.factories import login

pytestmark = pytest.mark.django_db(transaction=True)

LOOPBACK, LOCALHOST = "127.0.0.1:8123", "localhost:8123"
REDIRECT = "http://127.0.0.1:8765/callback"
METADATA = "/.well-known/oauth-protected-resource/mcp"


@pytest.mark.parametrize("host", [LOOPBACK, LOCALHOST, "[::1]:8123", "localhost"])
def test_the_metadata_names_the_url_the_client_used(host):
    resource = Client(HTTP_HOST=host).get(METADATA)
    assert resource.status_code == 200 and resource["Access-Control-Allow-Origin"] == "*"
    assert resource.json() == {
        "resource": f"http://{host}/mcp",
        "authorization_servers": [f"http://{host}"],
        "bearer_methods_supported": ["header"],
    }
    server = Client(HTTP_HOST=host).get("/.well-known/oauth-authorization-server").json()
    assert server["issuer"] == f"http://{host}"
    assert server["token_endpoint"] == f"http://{host}/oauth/token"


def test_a_host_django_does_not_allow_gets_its_400_and_no_metadata():
    for path in (METADATA, "/.well-known/oauth-authorization-server"):
        refused = Client(HTTP_HOST="evil.example").get(path)
        assert refused.status_code == 400 and b"evil.example/mcp" not in refused.content
    assert Client(HTTP_HOST=LOOPBACK).get(f"{METADATA}/other").status_code == 404


def test_mcp_resource_url_when_set_is_named_whatever_the_host(settings):
    settings.MCP_RESOURCE_URL = "https://agents.example/mcp"
    for host in (LOOPBACK, LOCALHOST):
        assert Client(HTTP_HOST=host).get(METADATA).json()["resource"] == settings.MCP_RESOURCE_URL
        server = Client(HTTP_HOST=host).get("/.well-known/oauth-authorization-server").json()
        assert server["issuer"] == "https://agents.example"
    settings.MCP_RESOURCE_URL = "https://agents.example/tools/mcp"  # (a proxy strips /tools)
    prefixed = Client(HTTP_HOST=LOOPBACK).get("/.well-known/oauth-protected-resource/tools/mcp")
    assert prefixed.json()["resource"] == settings.MCP_RESOURCE_URL
    assert Client(HTTP_HOST=LOOPBACK).get(METADATA).status_code == 404


def test_the_scheme_is_a_proxys_only_when_the_settings_trust_its_header(settings):
    forwarded = Client(HTTP_HOST=LOOPBACK, HTTP_X_FORWARDED_PROTO="https")
    assert forwarded.get(METADATA).json()["resource"] == f"http://{LOOPBACK}/mcp"
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert forwarded.get(METADATA).json()["resource"] == f"https://{LOOPBACK}/mcp"
    challenge = asyncio.run(challenges([(LOOPBACK, {"x-forwarded-proto": "https"})]))[0]
    assert f'resource_metadata="https://{LOOPBACK}{METADATA}"' in challenge


async def challenges(requests: list[tuple[str, dict[str, str]]]) -> list[str]:
    """The WWW-Authenticate of a tokenless POST /mcp per (host, headers), through the ASGI
    router in front of Django, in one lifespan."""
    router = McpRouter(StreamingASGIHandler())
    answers = []
    try:
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=router)) as http:
            for host, headers in requests:
                answer = await http.post(
                    f"http://{host}/mcp", json={}, headers={"host": host, **headers}
                )
                assert answer.status_code == 401, answer.text
                answers.append(answer.headers.get("www-authenticate", ""))
    finally:
        await stop(router)
    return answers


async def stop(router: McpRouter) -> None:
    messages = iter([{"type": "lifespan.shutdown"}])

    async def receive():
        return next(messages)

    async def send(message):
        pass

    await router({"type": "lifespan"}, receive, send)


def test_the_401_challenge_names_the_metadata_of_the_url_the_client_used(settings):
    bad = {"authorization": "Bearer ap_nothing"}
    loopback, localhost, with_bad_token, foreign = asyncio.run(
        challenges([(LOOPBACK, {}), (LOCALHOST, {}), (LOOPBACK, bad), ("evil.example", {})])
    )
    assert f'resource_metadata="http://{LOOPBACK}{METADATA}"' in loopback
    assert f'resource_metadata="http://{LOCALHOST}{METADATA}"' in localhost
    assert f'resource_metadata="http://{LOOPBACK}{METADATA}"' in with_bad_token
    assert "invalid, revoked or expired" in with_bad_token
    assert foreign.startswith("Bearer ") and "resource_metadata" not in foreign  # never its own
    settings.MCP_RESOURCE_URL = "https://agents.example/mcp"
    (named,) = asyncio.run(challenges([(LOOPBACK, {})]))
    assert f'resource_metadata="https://agents.example{METADATA}"' in named


def test_a_token_is_issued_only_for_the_resource_the_client_reached(trio):
    """Reached as 127.0.0.1, the authorization server issues for http://127.0.0.1:8123/mcp,
    not for localhost's spelling (RFC 8707: another resource), nor for a host it does not
    serve."""
    anyone = Client(HTTP_HOST=LOOPBACK)
    client_id = oauth.register_client(name="c", redirect_uris=[REDIRECT]).client_id
    refresh = {"grant_type": "refresh_token", "refresh_token": "mcprt_x", "client_id": client_id}
    for resource, error in (
        (f"http://{LOOPBACK}/mcp", "invalid_grant"),  # (the resource passed; the token is bogus)
        (f"http://{LOCALHOST}/mcp", "invalid_target"),
        ("http://evil.example/mcp", "invalid_target"),
    ):
        refused = anyone.post("/oauth/token", {**refresh, "resource": resource})
        assert refused.status_code == 400 and refused.json()["error"] == error, resource
    params = {
        "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT,
        "code_challenge": "c" * 43, "code_challenge_method": "S256",
        "resource": f"http://{LOCALHOST}/mcp",
    }  # fmt: skip
    page = login(Client(HTTP_HOST=LOOPBACK), trio.alice).get("/oauth/authorize", params)
    assert page.status_code == 400 and f"resource=http://{LOOPBACK}/mcp" in page.content.decode()


def test_the_mcp_sdks_oauth_client_signs_in_through_127_0_0_1_and_calls(trio):
    """The SDK's OAuthClientProvider refuses metadata naming another resource than the URL
    it was given; reached as http://127.0.0.1:8123/mcp it discovers, registers, is
    authorised (a signed-in member's consent), exchanges and calls — and its token also
    works at localhost's spelling of this one server (docs/mcp.md)."""
    browser = login(Client(HTTP_HOST=LOOPBACK), trio.alice)
    landed: dict[str, str] = {}

    def approve(url: str) -> None:
        assert url.startswith(f"http://{LOOPBACK}/oauth/authorize?")
        params = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
        assert params["resource"] == f"http://{LOOPBACK}/mcp"
        assert browser.get("/oauth/authorize", params).status_code == 200
        answer = browser.post("/oauth/authorize", {**params, "tenant": "acme", "decision": "allow"})
        assert answer.status_code == 302, answer.content[:300]
        landed.update({k: v[0] for k, v in parse_qs(urlsplit(answer["Location"]).query).items()})

    async def redirect_handler(url: str) -> None:
        await asyncio.to_thread(approve, url)

    async def callback_handler() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=landed["code"], state=landed.get("state"))

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

    storage = Memory()
    provider = OAuthClientProvider(
        server_url=f"http://{LOOPBACK}/mcp",
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

    async def session(router: McpRouter, host: str, auth) -> list[str]:
        transport = httpx2.ASGITransport(app=router)
        async with (
            httpx2.AsyncClient(transport=transport, auth=auth, timeout=30) as http,
            streamable_http_client(f"http://{host}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            return [t.name for t in (await client.list_tools()).tools]

    async def both() -> tuple[list[str], list[str]]:
        router = McpRouter(StreamingASGIHandler())
        try:
            first = await session(router, LOOPBACK, provider)
            bearer = {"Authorization": f"Bearer {storage.tokens.access_token}"}
            other = await session(router, LOCALHOST, BearerAuth(bearer))
        finally:
            await stop(router)
        return first, other

    first, other = asyncio.run(both())
    assert "calculator" in first and other == first
    assert re.fullmatch(r"mcpat_\S+", storage.tokens.access_token)


class BearerAuth(httpx2.Auth):
    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers

    def auth_flow(self, request):
        request.headers.update(self.headers)
        yield request
