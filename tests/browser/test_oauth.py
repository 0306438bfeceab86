"""The OAuth consent page for /mcp in a real browser: a registered client's name, the
tenant picker, Allow sending a code back to the client's redirect URI (the code then
exchanged with PKCE for the tenant picked), Deny sending access_denied."""

from __future__ import annotations

from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
import pytest
from playwright.sync_api import expect

from tenancy.models import OAuthToken, Role
from tests.factories import add_member
from tests.mcp.test_oauth import pkce
from tests.tools.local_server import LocalServer, Reply

pytestmark = pytest.mark.django_db(transaction=True)

CLIENT_NAME = "Notes <b>desktop</b>"  # markup in a name must show as text


@pytest.fixture
def client_app():
    """The client's loopback listener for its redirect URI, as a native MCP client runs."""
    with LocalServer() as server:
        server.route("GET", "/callback", Reply(body=b"back at the client"))
        yield server


def test_a_member_allows_or_denies_an_mcp_client_on_the_consent_page(
    trio, tab, web_server, tmp_path, client_app
):
    redirect = f"{client_app.url}/callback"
    add_member(trio.globex, trio.alice, Role.MEMBER)  # two workspaces to pick from
    registered = httpx2.post(
        f"{web_server}/oauth/register",
        json={"client_name": CLIENT_NAME, "redirect_uris": [redirect]},
    )
    assert registered.status_code == 201, registered.text
    client_id = registered.json()["client_id"]
    verifier, challenge = pkce()
    params = {
        "response_type": "code", "client_id": client_id, "redirect_uri": redirect,
        "code_challenge": challenge, "code_challenge_method": "S256", "state": "st-1",
    }  # fmt: skip
    page = tab.page
    tab.login("alice")
    tab.goto(f"/oauth/authorize?{urlencode(params)}")
    expect(page.get_by_role("heading", level=1)).to_have_text(
        f"Allow “{CLIENT_NAME}” to act as you?"
    )
    assert page.locator("b").filter(has_text="desktop").count() == 0  # escaped
    picker = page.get_by_label("Workspace")
    assert picker.locator("option").all_inner_texts() == ["Acme (acme)", "Globex (globex)"]
    page.screenshot(path=tmp_path / "oauth_consent.png", full_page=True)
    page.set_viewport_size({"width": 390, "height": 800})
    page.screenshot(path=tmp_path / "oauth_consent_narrow.png", full_page=True)
    page.set_viewport_size({"width": 1280, "height": 800})

    picker.select_option("globex")
    page.get_by_role("button", name="Allow").click()
    page.wait_for_url(f"{redirect}?**")
    back = urlsplit(page.url)
    assert f"{back.scheme}://{back.netloc}{back.path}" == redirect
    query = parse_qs(back.query)
    assert query["state"] == ["st-1"] and "error" not in query
    tokens = httpx2.post(
        f"{web_server}/oauth/token",
        data={"grant_type": "authorization_code", "code": query["code"][0],
              "client_id": client_id, "redirect_uri": redirect, "code_verifier": verifier},
    )  # fmt: skip
    assert tokens.status_code == 200, tokens.text
    token = OAuthToken.objects.get()
    assert (token.user, token.tenant) == (trio.alice, trio.globex)  # the workspace picked

    tab.goto(f"/oauth/authorize?{urlencode({**params, 'state': 'st-2'})}")
    page.get_by_role("button", name="Deny").click()
    page.wait_for_url(lambda url: url.startswith(redirect) and "st-2" in url)
    denied = parse_qs(urlsplit(page.url).query)
    assert denied == {"state": ["st-2"], "error": ["access_denied"]}
    assert OAuthToken.objects.count() == 1
    tab.assert_clean()
