"""The workspace navigation (agentplatform/web/navigation.py, templates/base.html): grouped,
shown by role, and never a link the role would get a 403 behind, nor a page it may open
left out."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

import pytest
from django.urls import reverse

from agentplatform.web.navigation import GROUPS
from tenancy.models import Role
from tests.factories import add_member, login, make_user


@dataclass
class NavLink:
    group: str
    text: str
    href: str
    current: bool


@dataclass
class Nav(HTMLParser):
    """The links of `<nav aria-label="Workspace">`, with the group (a menu's summary, or the
    link itself when its group has one link) each sits in."""

    links: list[NavLink] = field(default_factory=list)
    current_groups: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()
        self._depth = 0  # open elements inside the nav
        self._group = ""
        self._in_summary = False
        self._summary_current = False
        self._link: dict | None = None

    def handle_starttag(self, tag, attrs) -> None:
        attrs = dict(attrs)
        if self._depth == 0:
            if tag == "nav" and attrs.get("aria-label") == "Workspace":
                self._depth = 1
            return
        if tag not in ("br", "img", "input"):
            self._depth += 1
        if tag == "summary":
            self._in_summary, self._group = True, ""
            self._summary_current = "current" in (attrs.get("class") or "")
        elif tag == "details":
            self._group = ""
        elif tag == "a":
            self._link = {"href": attrs["href"], "current": attrs.get("aria-current") == "page"}
            self._text = ""

    def handle_endtag(self, tag) -> None:
        if self._depth == 0:
            return
        self._depth -= 1
        if tag == "summary":
            self._in_summary = False
            self._group = self._group.replace("(current section)", "").strip()
            if self._summary_current:
                self.current_groups.append(self._group)
        elif tag == "details":
            self._group = ""
        elif tag == "a" and self._link is not None:
            text = self._text.strip()
            self.links.append(NavLink(self._group or text, text, **self._link))
            self._link = None

    def handle_data(self, data) -> None:
        if self._in_summary:
            self._group += data
        elif self._link is not None:
            self._text += data


def nav_of(client, path: str = "/t/acme/") -> Nav:
    response = client.get(path)
    assert response.status_code == 200, path
    nav = Nav()
    nav.feed(response.content.decode())
    return nav


@pytest.fixture
def roles(trio):
    """acme's owner, admin, member and viewer."""
    admin, viewer = make_user("ada"), make_user("vic")
    add_member(trio.acme, admin, Role.ADMIN)
    add_member(trio.acme, viewer, Role.VIEWER)
    return {"owner": trio.alice, "admin": admin, "member": trio.bob, "viewer": viewer}


@pytest.mark.parametrize("role", ["owner", "admin", "member", "viewer"])
def test_each_role_sees_exactly_the_pages_it_may_open(client, roles, role):
    """Every link of the table is opened by the role: shown if and only if it answers 200."""
    login(client, roles[role])
    shown = {link.href for link in nav_of(client).links}
    for group in GROUPS:
        for link in group.links:
            url = reverse(link.route, kwargs={"tenant_slug": "acme"})
            status = client.get(url).status_code
            assert status in (200, 403), (url, status)
            assert (url in shown) == (status == 200), (role, url, status)


def test_groups_by_role(client, roles):
    expected = {
        "owner": ["Chat", "Activity", "Build", "Settings"],
        "admin": ["Chat", "Activity", "Build", "Settings"],
        "member": ["Chat", "Activity"],
        "viewer": ["Chat", "Activity"],
    }
    for role, groups in expected.items():
        login(client, roles[role])
        nav = nav_of(client)
        assert list(dict.fromkeys(link.group for link in nav.links)) == groups, role
        activity = [link.text for link in nav.links if link.group == "Activity"]
        if role in ("owner", "admin"):
            assert activity == ["Runs", "Approvals", "Usage", "Evaluations", "Audit log"]
        else:
            assert activity == ["Runs", "Approvals", "Usage", "Evaluations"], role


def test_the_current_page_and_its_group_are_marked(client, roles, agent):
    login(client, roles["owner"])
    nav = nav_of(client, f"/t/acme/agents/{agent.slug}/edit/")  # within Agents
    assert [link.text for link in nav.links if link.current] == ["Agents"]
    assert nav.current_groups == ["Build"]
    nav = nav_of(client, "/t/acme/chat/")
    assert [link.text for link in nav.links if link.current] == ["Chat"]
    assert nav.current_groups == []  # Chat is a link of its own, not a menu
    nav = nav_of(client, "/t/acme/")  # the home: no section is current
    assert [link.text for link in nav.links if link.current] == []


def test_the_menus_are_disclosures_and_the_bar_has_a_menu_button(client, roles):
    login(client, roles["owner"])
    body = client.get("/t/acme/").content.decode()
    assert '<nav class="sections" aria-label="Workspace">' in body
    assert body.count('<details class="nav-menu" data-menu>') == 3  # Activity, Build, Settings
    assert 'aria-controls="topbar-menus"' in body and 'id="topbar-menus"' in body


def test_pages_outside_a_workspace_have_no_workspace_navigation(client, trio):
    login(client, trio.bob)
    body = client.get(reverse("account")).content.decode()
    assert 'aria-label="Workspace"' not in body and 'aria-label="Account"' in body
