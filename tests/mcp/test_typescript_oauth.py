"""The official MCP TypeScript client's own OAuth (`@modelcontextprotocol/sdk` from npm, its
`auth()` flow behind an `OAuthClientProvider`) against a live server: discovery from the
401, dynamic registration, PKCE, the exchange and refresh are the SDK's; the member's
consent is a signed-in browser session submitting the consent page as rendered, whose
redirect lands on the script's loopback redirect URI (tests/clients/node/mcp_oauth.mjs)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from django.utils import timezone
from guardian.shortcuts import assign_perm

from agents.models import Run
from tenancy.models import OAuthToken, Role
from tests.factories import add_member, make_agent, make_user
from tests.mcp.test_oauth import signed_in
from tests.mcp.test_typescript_client import CLIENTS, ts_call

pytestmark = pytest.mark.django_db(transaction=True)

HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


def ts_oauth(
    url: str,
    state: Path,
    calls: list[dict[str, Any]],
    on_authorize: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the script with its state file; `on_authorize(url)` plays the browser each time
    the SDK sends the user to sign in. Returns the script's final answer."""
    if shutil.which("node") is None or not (CLIENTS / "node_modules").is_dir():
        pytest.fail("the TypeScript client is not installed: run `make node-clients`")
    script = [str(CLIENTS / "mcp_oauth.mjs"), url, str(state), json.dumps(calls)]
    process = subprocess.Popen(["node", *script], stdout=subprocess.PIPE, text=True)
    answer: dict[str, Any] | None = None
    try:
        for line in process.stdout:  # the script times itself out after 60 s
            message = json.loads(line)
            if "authorize" in message:
                assert on_authorize is not None, "the client asked for a sign-in"
                on_authorize(message["authorize"])
            else:
                answer = message
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
    assert answer is not None and "error" not in answer, answer
    return answer


class Member:
    """A signed-in member's browser, handed the authorization URLs the SDK sends it to: it
    opens one, submits the consent form as rendered (picking `tenant`) and follows the
    redirect to the client's loopback URI. `seen` keeps the URLs."""

    def __init__(self, base: str, username: str, tenant: str) -> None:
        self.browser, self.tenant = signed_in(base, username), tenant
        self.seen: list[str] = []

    def __call__(self, authorization_url: str) -> None:
        self.seen.append(authorization_url)
        page = self.browser.get(authorization_url)
        assert page.status_code == 200, page.text[:500]
        form = {name: html.unescape(value) for name, value in HIDDEN.findall(page.text)}
        done = self.browser.post(
            "/oauth/authorize",
            data={**form, "tenant": self.tenant, "decision": "allow"},
            headers={"Referer": str(page.url)},
        )
        assert done.status_code == 302, done.text[:500]
        landed = httpx2.get(done.headers["location"], timeout=10)
        assert landed.status_code == 200, landed.text


def path_of(request: dict[str, Any]) -> str:
    return f"{request['method']} {urlsplit(request['url']).path} {request['status']}"


@pytest.fixture
def base(mcp_server) -> str:
    return mcp_server.removesuffix("/mcp")


@pytest.fixture
def payroll(trio):
    """acme's agent only carol (and admins) may use."""
    agent = make_agent(trio.acme, "payroll")
    carol = make_user("carol")
    add_member(trio.acme, carol, Role.MEMBER)
    assign_perm("agents.use_agent", carol, agent)
    return agent


def test_the_sdk_signs_a_member_in_and_calls_with_their_permissions(
    base, mcp_server, trio, payroll, tmp_path
):
    bob = Member(base, "bob", "acme")
    calls = [
        {"name": "calculator", "arguments": {"expression": "6*7"}},
        {"name": "ask_payroll", "arguments": {"message": "raise"}},
    ]
    state = tmp_path / "client.json"
    answer = ts_oauth(mcp_server, state, calls, bob)
    assert answer["authorized"] is True

    # Discovery from the challenge, registration and the exchange: all the SDK's doing.
    challenge = httpx2.post(mcp_server, json={}).headers["www-authenticate"]
    resource_metadata = re.search(r'resource_metadata="([^"]+)"', challenge).group(1)
    requests = answer["requests"]
    assert [path_of(r) for r in requests[:8]] == [
        "POST /mcp 401",
        "GET /.well-known/oauth-protected-resource/mcp 200",
        "GET /.well-known/oauth-authorization-server 200",
        "POST /oauth/register 201",
        # finishAuth(code): discovery again (the provider caches none), then the exchange
        "GET /.well-known/oauth-protected-resource/mcp 200",
        "GET /.well-known/oauth-authorization-server 200",
        "POST /oauth/token 200",
        "POST /mcp 200",
    ]
    assert requests[1]["url"] == resource_metadata
    (authorization_url,) = bob.seen
    query = {k: v[0] for k, v in parse_qs(urlsplit(authorization_url).query).items()}
    assert authorization_url.startswith(f"{base}/oauth/authorize?")
    assert query["client_id"] == json.loads(state.read_text())["client"]["client_id"]
    assert query["code_challenge_method"] == "S256" and query["resource"] == mcp_server
    assert requests[3]["json"]["redirect_uris"] == [query["redirect_uri"]]
    exchange = requests[6]["form"]
    assert exchange["grant_type"] == "authorization_code"
    assert exchange["resource"] == mcp_server  # RFC 8707, as the MCP spec asks
    assert len(exchange["code_verifier"]) >= 43

    # Bob's tools in acme, with bob's rights: the restricted agent refuses him.
    assert {"calculator", "ask_payroll"} <= set(answer["tools"])
    calculated, refused = answer["results"]
    assert not calculated.get("isError"), calculated
    assert "42" in calculated["content"][0]["text"]
    run = Run.objects.get(tenant=trio.acme, tool_name="calculator")
    assert run.initiated_by_user == trio.bob and run.initiated_by_api_key is None
    assert refused["isError"] is True and "may not use" in refused["content"][0]["text"]
    assert not Run.objects.filter(agent=payroll).exists()


def test_a_viewer_lists_but_may_not_call(base, mcp_server, trio, tmp_path):
    add_member(trio.acme, make_user("dave"), Role.VIEWER)
    calls = [{"name": "calculator", "arguments": {"expression": "1+1"}}]
    answer = ts_oauth(mcp_server, tmp_path / "c.json", calls, Member(base, "dave", "acme"))
    assert "calculator" in answer["tools"]
    (result,) = answer["results"]
    assert result["isError"] is True
    assert "needs the member role" in result["content"][0]["text"]
    assert not Run.objects.filter(tenant=trio.acme).exists()


def test_an_expired_token_is_refused_saying_so_then_the_sdk_refreshes_it(
    base, mcp_server, trio, tmp_path
):
    state = tmp_path / "client.json"
    calls = [{"name": "calculator", "arguments": {"expression": "2+2"}}]
    ts_oauth(mcp_server, state, calls, Member(base, "alice", "acme"))
    first = json.loads(state.read_text())["tokens"]
    assert first["access_token"].startswith("mcpat_") and first["refresh_token"]

    # Sent as a plain bearer header (an auth provider would go and refresh it instead),
    # an expired or unknown token is a 401 whose message says why.
    OAuthToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    for token in (first["access_token"], "mcpat_not-a-token"):
        refused = ts_call(mcp_server, token, "calculator", {"expression": "1"})
        assert refused["code"] == 401, refused
        assert "invalid, revoked or expired" in refused["error"], refused

    # The same client again: the 401 sends the SDK to the token endpoint with its refresh
    # token; the rotated pair works, with no new sign-in.
    answer = ts_oauth(mcp_server, state, calls)
    assert answer["authorized"] is False and not answer["results"][0].get("isError")
    refresh = [r for r in answer["requests"] if urlsplit(r["url"]).path == "/oauth/token"]
    assert [r["form"]["grant_type"] for r in refresh] == ["refresh_token"]
    assert refresh[0]["form"]["refresh_token"] == first["refresh_token"]
    second = json.loads(state.read_text())["tokens"]
    assert second["access_token"] != first["access_token"]
    assert second["refresh_token"] != first["refresh_token"]

    # Signed out (every token revoked): the refresh is refused as invalid_grant, and the SDK
    # sends the member to sign in again, as the client it already registered.
    OAuthToken.objects.update(revoked_at=timezone.now())
    alice = Member(base, "alice", "acme")
    answer = ts_oauth(mcp_server, state, calls, alice)
    assert answer["authorized"] is True and len(alice.seen) == 1
    paths = [path_of(r) for r in answer["requests"]]
    assert "POST /oauth/token 400" in paths and "POST /oauth/token 200" in paths
    assert not any("/oauth/register" in p for p in paths)
    assert Run.objects.filter(tool_name="calculator", initiated_by_user=trio.alice).count() == 3
