"""The OAuth consent page for /mcp in a real browser: a registered client's name, the
tenant picker, Allow sending a code back to the client's redirect URI (the code then
exchanged with PKCE for the tenant picked), Deny sending access_denied."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
import pytest
from playwright.sync_api import expect

from tenancy.models import OAuthToken, Role
from tests.factories import add_member
from tests.mcp.test_oauth import pkce

pytestmark = pytest.mark.django_db(transaction=True)

REDIRECT = "http://127.0.0.1:8765/callback"  # nothing listens: the browser's route answers
CLIENT_NAME = "Notes <b>desktop</b>"  # markup in a name must show as text


def test_a_member_allows_or_denies_an_mcp_client_on_the_consent_page(
    trio, tab, web_server, tmp_path
):
    add_member(trio.globex, trio.alice, Role.MEMBER)  # two workspaces to pick from
    registered = httpx2.post(
        f"{web_server}/oauth/register",
        json={"client_name": CLIENT_NAME, "redirect_uris": [REDIRECT]},
    )
    assert registered.status_code == 201, registered.text
    client_id = registered.json()["client_id"]
    verifier, challenge = pkce()
    params = {
        "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT,
        "code_challenge": challenge, "code_challenge_method": "S256", "state": "st-1",
    }  # fmt: skip
    landed: list[str] = []

    def callback(route) -> None:
        landed.append(route.request.url)
        route.fulfill(status=200, content_type="text/plain", body="back at the client")

    page = tab.page
    page.route(re.compile(r"^http://127\.0\.0\.1:8765/"), callback)
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
    page.wait_for_url(re.compile(r"^http://127\.0\.0\.1:8765/callback"))
    back = urlsplit(landed[-1])
    assert f"{back.scheme}://{back.netloc}{back.path}" == REDIRECT
    query = parse_qs(back.query)
    assert query["state"] == ["st-1"] and "error" not in query
    tokens = httpx2.post(
        f"{web_server}/oauth/token",
        data={"grant_type": "authorization_code", "code": query["code"][0],
              "client_id": client_id, "redirect_uri": REDIRECT, "code_verifier": verifier},
    )  # fmt: skip
    assert tokens.status_code == 200, tokens.text
    token = OAuthToken.objects.get()
    assert (token.user, token.tenant) == (trio.alice, trio.globex)  # the workspace picked

    tab.goto(f"/oauth/authorize?{urlencode({**params, 'state': 'st-2'})}")
    page.get_by_role("button", name="Deny").click()
    page.wait_for_url(re.compile(r"^http://127\.0\.0\.1:8765/callback"))
    denied = parse_qs(urlsplit(landed[-1]).query)
    assert denied == {"state": ["st-2"], "error": ["access_denied"]}
    assert OAuthToken.objects.count() == 1
    tab.assert_clean()
