"""The workspace's navigation: its pages in four groups (Chat, Activity, Build, Settings),
each link shown only to those the page itself lets in.

A link names a route; who sees it is read from that route's view (the `policy_action`
that `tenant_member_required` puts on it), asked of the request's principal — the menu
and the page's 403 come from the same rule and cannot disagree
(tests/web/test_navigation.py walks every role through both).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

from django.urls import resolve, reverse

from tenancy.policy import Action, Principal


@dataclass(frozen=True)
class Link:
    label: str
    route: str  # a URL name taking only `tenant_slug`
    also: tuple[str, ...] = ()  # other path prefixes (under /t/<tenant>/) it is current on


@dataclass(frozen=True)
class Group:
    label: str
    links: tuple[Link, ...]


GROUPS: tuple[Group, ...] = (
    Group("Chat", (Link("Chat", "chat:index"),)),
    Group("Activity", (
        Link("Runs", "activity:runs"),
        Link("Approvals", "activity:approvals"),
        Link("Usage", "activity:usage"),
        Link("Evaluations", "activity:evaluations", also=("datasets/",)),
        Link("Audit log", "activity:audit"),
    )),
    Group("Build", (
        Link("Agents", "config:agents"),
        Link("Crews", "config:crews"),
        Link("Workflows", "config:workflows"),
        Link("Tools", "config:tools"),
        Link("Skills", "config:skills"),
        Link("Knowledge", "knowledge:index"),
        Link("Triggers", "config:triggers"),
        Link("Connections", "config:connections", also=("model-aliases/",)),
        Link("MCP servers", "config:mcp_connections"),
    )),
    Group("Settings", (
        Link("Members", "config:members"),
        Link("Groups", "config:groups"),
        Link("API keys", "config:api_keys"),
        Link("Quotas", "config:quotas"),
        Link("Prices", "config:prices"),
        Link("Retention", "config:retention"),
        Link("Document", "config:document"),
        Link("Export workspace", "tenant_export"),
        Link("Erase workspace", "tenant_erasure"),
    )),
)  # fmt: skip


@dataclass
class ShownLink:
    label: str
    url: str
    current: bool = False


@dataclass
class ShownGroup:
    label: str
    links: list[ShownLink] = field(default_factory=list)

    @property
    def current(self) -> bool:
        return any(link.current for link in self.links)


@cache
def route_action(route: str) -> Action:
    """The policy action the route's view asks (the same for every tenant)."""
    return resolve(reverse(route, kwargs={"tenant_slug": "t"})).func.policy_action


def groups_for(principal: Principal, path: str) -> list[ShownGroup]:
    """The groups with the links `principal` may open (groups left empty are left out);
    the link whose page `path` is (the longest match) is current. No query."""
    slug = principal.tenant.slug
    shown: list[ShownGroup] = []
    best: tuple[int, ShownLink] | None = None
    for group in GROUPS:
        visible = ShownGroup(group.label)
        for link in group.links:
            if not principal.may(route_action(link.route)):
                continue
            item = ShownLink(link.label, reverse(link.route, kwargs={"tenant_slug": slug}))
            visible.links.append(item)
            base = f"/t/{slug}/"
            for prefix in (item.url, *(base + extra for extra in link.also)):
                if path.startswith(prefix) and (best is None or len(prefix) > best[0]):
                    best = (len(prefix), item)
        if visible.links:
            shown.append(visible)
    if best is not None:
        best[1].current = True
    return shown
