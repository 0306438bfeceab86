"""An MCP client's sign-in with the consent in a real browser: the TypeScript SDK's OAuth
client (tests/clients/node/mcp_oauth.mjs) sends the member to the authorization URL,
Chromium shows the consent page under its CSP, and the member's decision must reach the
client's redirect URI, another origin (a browser enforces `form-action` on the redirect
after a form; an HTTP client does not)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from agents.models import Run
from tests.mcp.test_typescript_oauth import ts_oauth

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_members_consent_in_the_browser_reaches_the_typescript_client(trio, tab, tmp_path):
    tab.login("bob")
    page = tab.page

    def consent(authorization_url: str) -> None:
        page.goto(authorization_url)
        expect(page.get_by_role("heading")).to_contain_text("TypeScript SDK test client")
        page.get_by_label("Workspace").select_option("acme")
        page.get_by_role("button", name="Allow").click()
        expect(page.get_by_text("Signed in: you can close this window.")).to_be_visible()

    calls = [{"name": "calculator", "arguments": {"expression": "6*7"}}]
    answer = ts_oauth(f"{tab.base}/mcp", tmp_path / "client.json", calls, consent)
    assert answer["authorized"] is True
    assert "42" in answer["results"][0]["content"][0]["text"]
    assert Run.objects.get(tool_name="calculator").initiated_by_user == trio.bob
    tab.assert_clean()  # no CSP violation on the way


CLIENT_PAGE = "http://localhost:5173/"  # a web app's origin; /mcp admits localhost:*
OTHER_PAGE = "http://app.example/"  # not in MCP_ALLOWED_ORIGINS

# What a browser-based MCP client (the TypeScript SDK in a page) fetches, step by step: the
# 401 and its challenge, both metadata documents, registration and the token endpoint; and
# the consent page, which it must not be able to read.
DISCOVER = """async (base) => {
  const out = {};
  const challenge = await fetch(base + "/mcp", {method: "POST",
    headers: {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
              "MCP-Protocol-Version": "2025-06-18"},
    body: JSON.stringify({jsonrpc: "2.0", id: 1, method: "initialize", params: {}})});
  out.status = challenge.status;
  const header = challenge.headers.get("WWW-Authenticate") || "";
  const metadataUrl = (header.match(/resource_metadata="([^"]+)"/) || [])[1];
  const version = {headers: {"MCP-Protocol-Version": "2025-06-18"}};
  const resource = await (await fetch(metadataUrl, version)).json();
  out.resource = resource.resource;
  const issuer = resource.authorization_servers[0].replace(/\\/$/, "");
  const asMetadata = issuer + "/.well-known/oauth-authorization-server";
  const server = await (await fetch(asMetadata, version)).json();
  const registered = await fetch(server.registration_endpoint, {method: "POST",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({client_name: "Web app", redirect_uris: [location.origin + "/cb"]})});
  out.registered = registered.status;
  const client = await registered.json();
  const token = await fetch(server.token_endpoint, {method: "POST",
    body: new URLSearchParams({grant_type: "authorization_code", code: "nope",
      client_id: client.client_id, redirect_uri: location.origin + "/cb",
      code_verifier: "v".repeat(43), resource: resource.resource})});
  out.token = [token.status, (await token.json()).error];
  try { await fetch(server.authorization_endpoint); out.authorize = "read"; }
  catch (e) { out.authorize = "blocked"; }
  return out;
}"""

CALL_MCP = """async (base) => {
  try {
    const r = await fetch(base + "/mcp", {method: "POST",
      headers: {"Content-Type": "application/json"}, body: "{}"});
    return r.status;
  } catch (e) { return "blocked"; }
}"""


def test_a_web_page_elsewhere_discovers_registers_and_exchanges_through_cors(tab):
    """Chromium enforcing CORS on what a browser-based MCP client fetches from its own
    origin; the pages are served by Playwright itself (page.route)."""
    page = tab.page
    # A page Playwright serves has no address, so Chromium counts it as public and asks
    # before it reaches the loopback server (Local Network Access): granted, as a user would.
    page.context.grant_permissions(["local-network-access"])
    page.route(
        lambda url: url.startswith((CLIENT_PAGE, OTHER_PAGE)),
        lambda route: route.fulfill(
            body="<!doctype html><title>app</title>", content_type="text/html"
        ),
    )
    page.goto(CLIENT_PAGE)
    seen = page.evaluate(DISCOVER, tab.base)
    assert seen == {
        "status": 401,
        "resource": f"{tab.base}/mcp",
        "registered": 201,
        "token": [400, "invalid_grant"],
        "authorize": "blocked",  # no CORS on the consent page
    }
    page.goto(OTHER_PAGE)
    assert page.evaluate(CALL_MCP, tab.base) == "blocked"  # /mcp admits only its origins
