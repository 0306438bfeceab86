"""The Quotas page: admins list limits with what is used, add, change and delete them;
members are refused (403), outsiders get 404, anonymous visitors the sign-in page."""

from __future__ import annotations

import pytest
from django.test import Client

from agents import quotas
from agents.models import Quota
from tests.factories import login, make_agent

pytestmark = pytest.mark.django_db
URL = "/t/acme/quotas/"


def test_an_admin_adds_a_limit_and_sees_what_is_used(client: Client, trio):
    make_agent(trio.acme, "assistant")
    login(client, trio.alice)
    assert "No limits yet" in client.get(URL).content.decode()
    response = client.post(
        URL, {"scope": "member", "user": trio.bob.pk, "metric": "tokens", "period": "day",
              "limit": "1000", "active": "on"},
    )  # fmt: skip
    assert response.status_code == 302
    quota = Quota.objects.get()
    assert (quota.scope, quota.user, quota.limit) == ("member", trio.bob, 1000)
    quotas.reserve(quotas.Meter(trio.acme.pk, user_id=trio.bob.pk), tokens=250)
    page = client.get(URL).content.decode()
    assert "The daily limit of 1,000 tokens for member bob" in page
    assert "250 tokens" in page and "UTC" in page


def test_a_bad_limit_is_shown_beside_its_field(client: Client, trio):
    login(client, trio.alice)
    response = client.post(
        URL, {"scope": "agent", "metric": "tokens", "period": "day", "limit": "1.5"}
    )
    page = response.content.decode()
    assert response.status_code == 400
    assert "Choose the agent this limit is for." in page
    assert "A whole number of tokens." in page
    assert not Quota.objects.exists()


def test_an_admin_changes_and_deletes_a_limit(client: Client, trio):
    quota = Quota.objects.create(
        tenant=trio.acme, scope="tenant", metric="cost", period="month", limit=10
    )
    login(client, trio.alice)
    assert "The monthly limit of $10.00" in client.get(f"{URL}{quota.pk}/edit/").content.decode()
    client.post(
        f"{URL}{quota.pk}/edit/",
        {"scope": "tenant", "metric": "cost", "period": "month", "limit": "25.50"},
    )
    quota.refresh_from_db()
    assert quota.limit == 25.5 and not quota.active
    assert client.post(f"{URL}{quota.pk}/delete/").status_code == 302
    assert not Quota.objects.exists()


def test_members_outsiders_and_anonymous_are_kept_out(trio):
    theirs = Quota.objects.create(
        tenant=trio.globex, scope="tenant", metric="tokens", period="day", limit=1
    )
    assert login(Client(), trio.bob).get(URL).status_code == 403
    assert login(Client(), trio.bob).post(URL, {"scope": "tenant"}).status_code == 403
    assert login(Client(), trio.charlie).get(URL).status_code == 404
    assert Client().get(URL).status_code == 302  # to sign in
    alice = login(Client(), trio.alice)
    assert alice.get(f"{URL}{theirs.pk}/edit/").status_code == 404
    assert alice.post(f"{URL}{theirs.pk}/delete/").status_code == 404
    assert Quota.objects.filter(pk=theirs.pk).exists()


# -- the tenant-scoped admin ---------------------------------------------------------------------
def test_a_tenant_admin_sets_a_limit_in_the_admin_of_their_tenant_only(client: Client, trio):
    theirs = Quota.objects.create(
        tenant=trio.globex, scope="tenant", metric="tokens", period="day", limit=1
    )
    login(client, trio.alice)
    response = client.post(
        "/admin/agents/quota/add/",
        {"scope": "member", "user": trio.bob.pk, "metric": "cost", "period": "month",
         "limit": "12.5", "active": "on"},
    )  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:2000]
    quota = Quota.objects.get(tenant=trio.acme)
    assert (quota.user, quota.limit) == (trio.bob, 12.5)
    listing = client.get("/admin/agents/quota/").content.decode()
    assert "The monthly limit of $12.50 for member bob" in listing or "for member bob" in listing
    assert client.get(f"/admin/agents/quota/{theirs.pk}/change/").status_code == 404
    refused = client.post(  # a member of another tenant is not offered, nor accepted
        "/admin/agents/quota/add/",
        {"scope": "member", "user": trio.charlie.pk, "metric": "tokens", "period": "day",
         "limit": "5"},
    )  # fmt: skip
    assert refused.status_code == 200 and Quota.objects.filter(tenant=trio.acme).count() == 1
    assert login(Client(), trio.bob).get("/admin/agents/quota/").status_code in (302, 403)
