"""A person connects their own account at an OAuth-protected MCP server in Chromium: from
"Your accounts" to the server's authorization page and back through the platform's
callback (redirects a browser follows across origins, under the pages' CSP), then
disconnects it. The server is the SDK's server auth on 127.0.0.1 (tests/fakes); the
platform is its own uvicorn process, allowed to reach loopback."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import Page
from tests.factories import make_mcp_connection
from tests.fakes.oauth_mcp_server import FakeOAuthMcpServer
from tests.live_server import start_asgi_server
from tools.models import McpOAuthToken

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def platform():
    server = start_asgi_server({"EGRESS_ALLOWLIST": "127.0.0.1/32"})
    try:
        yield server.base
    finally:
        server.stop()


def test_a_person_connects_and_disconnects_their_account(trio, browser, platform):
    with FakeOAuthMcpServer() as fake:
        fake.next_subject = "bob-at-crm"
        connection = make_mcp_connection(trio.acme, fake.url, "crm", auth_mode="oauth_user")
        context = browser.new_context()
        tab = Page(context.new_page(), platform)
        page = tab.page
        page.set_default_timeout(15_000)
        tab.login("bob")
        page.get_by_role("link", name="Your accounts").click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Your connected accounts")
        expect(page.get_by_text("Not connected")).to_be_visible()
        page.get_by_role("link", name="Connect crm").click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Connect your crm account")
        page.get_by_role("button", name="Connect crm").click()
        page.wait_for_url(f"{platform}/t/acme/mcp-accounts/")
        expect(page.get_by_role("status").first).to_contain_text("Your crm account is connected")
        token = McpOAuthToken.objects.get(connection=connection, user=trio.bob)
        assert token.access_token not in page.content()
        page.get_by_role("button", name="Disconnect crm").click()
        expect(page.get_by_text("Not connected")).to_be_visible()
        assert not McpOAuthToken.objects.filter(pk=token.pk).exists()
        assert fake.revoked
        tab.assert_clean()
        context.close()


def test_an_admin_connects_the_tenants_account_and_its_tools_arrive(trio, browser, platform):
    """The tenant-wide flavour: an admin connects one account for everyone from the MCP
    servers page; the list says so, Refresh lists the server's tools with that token, and
    Disconnect revokes it at the server."""
    with FakeOAuthMcpServer() as fake:
        connection = make_mcp_connection(trio.acme, fake.url, "crm", auth_mode="oauth_tenant")
        context = browser.new_context()
        tab = Page(context.new_page(), platform)
        page = tab.page
        page.set_default_timeout(15_000)
        tab.login("alice")
        tab.goto("/t/acme/mcp-connections/")
        expect(page.get_by_text("OAuth, the tenant's account: not connected")).to_be_visible()
        page.get_by_role("button", name="Connect account crm").click()
        page.wait_for_url(f"{platform}/t/acme/mcp-connections/")
        expect(page.get_by_text("OAuth, the tenant's account: connected")).to_be_visible()
        token = McpOAuthToken.objects.get(connection=connection, user=None)
        page.get_by_role("button", name="Refresh crm").click()
        expect(page.locator(f"#mcp-health-{connection.pk}")).to_contain_text("OK")
        tab.screenshot("mcp-connections-oauth")
        connection.refresh_from_db()
        assert connection.tool_count > 0  # listed with the tenant's token
        assert token.access_token not in page.content()
        page.get_by_role("button", name="Disconnect crm").click()
        expect(page.get_by_text("OAuth, the tenant's account: not connected")).to_be_visible()
        assert not McpOAuthToken.objects.filter(pk=token.pk).exists()
        assert fake.revoked
        tab.assert_clean()
        context.close()
