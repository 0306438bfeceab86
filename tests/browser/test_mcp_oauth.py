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
