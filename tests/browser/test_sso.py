"""Single sign-on in Chromium: the sign-in page's "Sign in with Corp SSO" button, the real
provider's login form (django-oauth-toolkit, a second process on loopback), and back at
the platform signed in, inside the tenant the groups gave — on the production ASGI server,
whose sync views reach the provider through the guarded egress."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from tenancy.models import Membership, Role
from tests.browser.conftest import Page
from tests.fakes.oidc_provider.process import start_oidc_provider
from tests.live_server import reserved_port, start_asgi_server

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def sso_servers(django_db_setup, django_db_blocker):
    """The platform with a platform-wide provider in SSO_PROVIDERS, and that provider."""
    with reserved_port() as idp_port:  # held until the provider listens on it
        issuer = f"http://127.0.0.1:{idp_port}/o"
        providers = [
            {
                "slug": "corp",
                "name": "Corp SSO",
                "issuer": issuer,
                "client_id": "platform",
                "client_secret": "platform-secret",
                "groups": [{"group": "eng", "tenant": "acme", "role": "admin"}],
            }
        ]
        server = start_asgi_server(
            {
                "SSO_PROVIDERS": json.dumps(providers),
                "SSO_EGRESS_ALLOWLIST": "127.0.0.1/32",
                "SSO_REQUIRE_HTTPS": "false",
            }
        )
        try:
            idp = start_oidc_provider(idp_port, f"{server.base}/sso/callback/")
        except BaseException:
            server.stop()
            raise
    try:
        yield server.base, idp
    finally:
        idp.stop()
        server.stop()


def test_a_person_signs_in_with_their_identity_provider(trio, browser, sso_servers, tmp_path):
    base, idp = sso_servers
    idp.user("zoe", groups=["eng"])
    context = browser.new_context()
    tab = Page(context.new_page(), base)
    page = tab.page
    page.set_default_timeout(15_000)
    tab.goto("/login/")
    page.get_by_role("link", name="Sign in with Corp SSO").click()
    page.wait_for_url(lambda url: url.startswith(idp.base))
    page.locator("input[name=username]").fill("zoe")
    page.locator("input[name=password]").fill("zoezoe")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base}/t/acme/")
    expect(page.get_by_role("heading", level=1)).to_be_visible()
    page.screenshot(path=tmp_path / "signed_in_with_sso.png", full_page=True)
    user = get_user_model().objects.get(username="zoe")
    assert Membership.objects.get(user=user, tenant=trio.acme).role == Role.ADMIN
    tab.assert_clean()
    context.close()
