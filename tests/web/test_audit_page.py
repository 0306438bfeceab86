"""The audit log page: owners and admins only, newest first, filters (bad ones are a 400),
each change shown as before/after, no secret and no other tenant's entry in the HTML."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from tenancy.models import AuditAction, AuditEntry, Role
from tenancy.records import audit
from tests.factories import add_member, login, make_user

URL = "/t/acme/audit/"
SECRET = "sk-page-secret-456"


def signed_in(client, username: str):
    return login(client, get_user_model().objects.get(username=username))


@pytest.fixture
def logged(trio):
    """A few acme entries (a secret change among them) and one of globex."""
    # Through the config page's own service: the secret never reaches the log.
    from agents.models import Agent
    from tenancy.records.saving import save_validated

    agent = save_validated(
        Agent(tenant=trio.acme), {"slug": "bot", "name": "Bot"}, actor=trio.alice
    )
    save_validated(agent, {"remote_token": SECRET, "name": "Bot 2"}, actor=trio.bob)
    audit.record(
        tenant=trio.globex,
        action=AuditAction.CONFIG_CHANGED,
        actor=trio.charlie,
        details={"name": "globex-only-entry"},
    )
    return agent


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("role", "status"),
    [(Role.OWNER, 200), (Role.ADMIN, 200), (Role.MEMBER, 403), (Role.VIEWER, 403)],
)
def test_owners_and_admins_see_it_members_and_viewers_do_not(client, trio, role, status):
    dana = make_user("dana")
    add_member(trio.acme, dana, role)
    assert signed_in(client, "dana").get(URL).status_code == status


@pytest.mark.django_db
def test_outsiders_get_404_and_anonymous_users_the_login_page(client, trio):
    response = client.get(URL)
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert signed_in(client, "charlie").get(URL).status_code == 404


@pytest.mark.django_db
def test_it_shows_the_changes_newest_first_and_no_secret(client, trio, logged):
    response = signed_in(client, "alice").get(URL)
    html = response.content.decode()
    assert response.status_code == 200
    assert "Bot 2" in html and "[set]" in html and "remote token" in html
    actions = [e.action for e in response.context["page"].object_list]
    assert actions.index("config.changed") < actions.index("config.created")  # newest first
    assert SECRET not in html
    assert "globex-only-entry" not in html
    nav = client.get("/t/acme/runs/").content.decode()
    assert 'href="/t/acme/audit/"' in nav  # linked for admins


@pytest.mark.django_db
def test_the_nav_does_not_link_it_for_members(client, trio):
    assert (
        'href="/t/acme/audit/"'
        not in signed_in(client, "bob").get("/t/acme/runs/").content.decode()
    )


@pytest.mark.django_db
def test_filters_by_action_actor_object_type_and_dates(client, trio, logged):
    client = signed_in(client, "alice")

    def shown(**params) -> set[str]:
        response = client.get(URL, params)
        assert response.status_code == 200, response.content
        return {e.action for e in response.context["page"].object_list}

    assert shown(action="config.created") == {"config.created"}
    assert shown(actor="BO") == {"config.changed"}  # bob changed it; part of the name
    assert shown(object_type="agents.agent") == {"config.created", "config.changed"}
    assert shown(object_type="tenancy.membership") == {"member.added"}
    today = timezone.now().date()
    assert "config.created" in shown(since=today.isoformat(), until=today.isoformat())
    assert shown(until=(today - timedelta(days=1)).isoformat()) == set()
    assert shown(since=(today + timedelta(days=1)).isoformat()) == set()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "params",
    [
        {"action": "config.exploded"},
        {"action": "config.created\x00"},
        {"actor": "al\x00ice"},
        {"object_type": "x" * 101},
        {"since": "yesterday"},
        {"since": "0001-01-01"},
        {"until": "9999-12-31"},
        {"since": "2025-02-01", "until": "2025-01-01"},
    ],
)
def test_a_bad_filter_is_a_400_with_the_reason(client, trio, params):
    response = signed_in(client, "alice").get(URL, params)
    assert response.status_code == 400
    nul = any("\x00" in value for value in params.values())  # refused before the page
    assert ("NUL character" if nul else 'role="alert"') in response.content.decode()


@pytest.mark.django_db
def test_htmx_gets_the_results_only_and_pages_are_paginated(client, trio):
    AuditEntry.objects.bulk_create(
        AuditEntry(tenant=trio.acme, action=AuditAction.CONFIG_CHANGED, actor_label=f"a{i}")
        for i in range(60)
    )
    client = signed_in(client, "alice")
    partial = client.get(URL, HTTP_HX_REQUEST="true")
    body = partial.content.decode()
    assert partial.status_code == 200 and "<html" not in body and 'id="audit-results"' in body
    assert "Page 1 of 2" in body
    second = client.get(URL, {"page": "2"})
    assert second.status_code == 200 and len(second.context["page"].object_list) == 13
    assert client.get(URL, {"page": "x"}).status_code == 200  # the first page
    assert client.get(URL, {"page": "x\x00"}).status_code == 400  # NUL: refused up front
