"""The page shell in a real browser: login, navigation by role, CSP without violations."""

from __future__ import annotations

import pytest

from tests.factories import make_user

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_member_logs_in_and_sees_the_workspace_without_configuration_links(trio, tab):
    tab.login("bob")  # a member of acme
    tab.page.wait_for_url(f"{tab.base}/t/acme/")
    nav = tab.page.get_by_role("navigation", name="Workspace")
    assert nav.get_by_role("link", name="Chat").is_visible()
    assert nav.get_by_role("link", name="Agents").count() == 0
    response = tab.goto("/t/acme/agents/")
    assert response.status == 403
    assert tab.goto("/t/globex/").status == 404  # not a member: the tenant is not disclosed
    tab.assert_clean()


def test_an_owner_sees_configuration_and_the_page_has_a_strict_csp(trio, tab):
    response = None
    tab.login("alice")  # owner of acme
    response = tab.goto("/t/acme/")
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    nav = tab.page.get_by_role("navigation", name="Workspace")
    agents = nav.get_by_role("link", name="Agents")
    assert not agents.is_visible()  # in the Build menu, closed
    nav.get_by_text("Build").click()
    assert agents.is_visible()
    tab.assert_clean()


def test_the_tenant_switcher_lists_every_workspace(trio, tab):
    from tests.factories import add_member

    dora = make_user("dora")
    add_member(trio.acme, dora, "member")
    add_member(trio.globex, dora, "member")
    tab.login("dora")
    tab.page.get_by_text("Workspaces").click()
    tab.page.get_by_role("navigation", name="Account").get_by_role("link", name="Globex").click()
    tab.page.wait_for_url(f"{tab.base}/t/globex/")
    tab.assert_clean()
