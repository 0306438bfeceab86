"""Cost on the run page, the usage page and its CSV, and the Prices pages: figures on a
known data set, roles, other tenants."""

from __future__ import annotations

import csv
import io
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from agents.models import Run
from agents.usage_report import cost_lines
from providers.models import ModelPrice
from providers.pricing import price_for
from tenancy.models import Role
from tenancy.services import api_key_create
from tests.factories import add_member, login, make_agent, make_user

pytestmark = pytest.mark.django_db


def make_run(tenant, *, agent=None, user=None, key=None, cost="0", days_ago=0, **fields) -> Run:
    run = Run.objects.create(
        tenant=tenant, agent=agent, initiated_by_user=user, initiated_by_api_key=key,
        status="succeeded", correlation_id=uuid.uuid4().hex, cost_usd=Decimal(cost),
        total_cost_usd=Decimal(cost), **fields,
    )  # fmt: skip
    if days_ago:
        Run.objects.filter(pk=run.pk).update(created_at=run.created_at - timedelta(days=days_ago))
    return run


@pytest.fixture
def spent(trio):
    """acme: alice's two runs of Assistant (today, 2 days ago), bob's run of Writer, a run
    of a key; globex: one costly run."""
    assistant, writer = make_agent(trio.acme, "assistant"), make_agent(trio.acme, "writer")
    key, _ = api_key_create(tenant=trio.acme, name="=ci-key", scopes=["run"])
    make_run(trio.acme, agent=assistant, user=trio.alice, cost="0.25", input_tokens=100,
             output_tokens=10)  # fmt: skip
    make_run(trio.acme, agent=assistant, user=trio.alice, cost="0.5", days_ago=2,
             input_tokens=200, output_tokens=20)  # fmt: skip
    make_run(trio.acme, agent=writer, user=trio.bob, cost="0.125", input_tokens=50)
    make_run(trio.acme, agent=writer, key=key, cost="1.000001", input_tokens=1)
    make_run(trio.globex, agent=make_agent(trio.globex, "theirs"), user=trio.charlie, cost="99")
    return {"assistant": assistant, "writer": writer, "key": key}


def test_cost_lines_per_agent_member_key_and_day(trio, spent):
    runs = Run.objects.filter(tenant=trio.acme)
    agents = cost_lines(runs, "agent")
    assert [(x.label, x.runs, x.cost_usd) for x in agents] == [
        ("Writer", 2, Decimal("1.125001")),
        ("Assistant", 2, Decimal("0.75")),
    ]
    assert agents[1].input_tokens == 300 and agents[1].key == f"agent:{spent['assistant'].pk}"
    members = {x.label: x.cost_usd for x in cost_lines(runs, "member")}
    assert members == {
        "alice": Decimal("0.75"), "bob": Decimal("0.125"),
        "(no member: API keys)": Decimal("1.000001"),
    }  # fmt: skip
    keys = {x.label: x.runs for x in cost_lines(runs, "api_key")}
    assert keys == {"=ci-key": 1, "(no API key: signed-in members)": 3}
    days = cost_lines(runs, "day")
    today = timezone.localdate()
    assert [(x.key, x.cost_usd) for x in days] == [
        ((today - timedelta(days=2)).isoformat(), Decimal("0.5")),
        (today.isoformat(), Decimal("1.375001")),
    ]


def test_the_usage_page_shows_cost_per_agent_member_key_and_day(client, trio, spent):
    body = login(client, trio.alice).get("/t/acme/usage/?days=7").content.decode()
    assert '<dd id="total-cost">$1.88</dd>' in body  # 1.875001
    for table in ("agent", "member", "api_key", "day"):
        assert f'id="cost-{table}-table"' in body
    assert "$1.13" in body and "$0.75" in body and "$0.125" in body
    assert "$99" not in body  # globex's
    body = login(Client(), trio.bob).get("/t/acme/usage/?days=7").content.decode()
    assert '<dd id="total-cost">$0.125</dd>' in body  # a member: his own runs


def read_csv(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_the_usage_csv_has_a_row_per_day_agent_member_and_key(client, trio, spent):
    response = login(client, trio.alice).get("/t/acme/usage/export.csv?days=7")
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = read_csv(response.content.decode())
    assert len(rows) == 4
    assert sum(Decimal(r["cost_usd"]) for r in rows) == Decimal("1.875001")
    keyed = next(r for r in rows if r["api_key"])
    assert keyed["api_key"] == "'=ci-key"  # no formula in a spreadsheet
    assert (keyed["subject"], keyed["member"], keyed["runs"]) == ("Writer", "", "1")
    rows = read_csv(login(Client(), trio.bob).get("/t/acme/usage/export.csv").content.decode())
    assert [(r["member"], r["cost_usd"]) for r in rows] == [("bob", "0.125000")]
    outsider = login(Client(), trio.charlie).get("/t/acme/usage/export.csv")
    assert outsider.status_code == 404


def test_the_run_page_shows_its_cost_and_a_crews_total(client, trio, spent):
    parent = make_run(trio.acme, user=trio.alice, cost="0.01", model="gpt-test")
    Run.objects.filter(pk=parent.pk).update(total_cost_usd=Decimal("0.035"))
    make_run(trio.acme, agent=spent["writer"], user=trio.alice, cost="0.025", parent=parent,
             child_key="delegate:1")  # fmt: skip
    body = login(client, trio.alice).get(f"/t/acme/runs/{parent.pk}/").content.decode()
    assert "<dt>Cost</dt>" in body and "$0.01 own" in body and "$0.035" in body
    assert "$0.025" in body  # the child's line
    runs = client.get("/t/acme/runs/").content.decode()
    assert "$0.035" in runs


# -- the Prices pages ----------------------------------------------------------------------
def test_admins_override_a_built_in_price_and_go_back_to_it(client, trio):
    login(client, trio.alice)
    page = client.get("/t/acme/prices/").content.decode()
    assert "gpt-4o-mini" in page and "claude-sonnet-4" in page and "Override" in page
    form = client.get("/t/acme/prices/new/?provider_kind=openai&model=gpt-4o").content.decode()
    assert 'value="2.5' in form  # starts from the built-in price
    data = {
        "provider_kind": "openai", "model": "gpt-4o", "input_price": "2",
        "output_price": "8", "cached_input_price": "1", "cache_write_price": "2",
    }  # fmt: skip
    assert client.post("/t/acme/prices/new/", data).status_code == 302
    assert price_for(trio.acme.pk, "openai", "gpt-4o-2024-08-06").input == Decimal(2)
    assert price_for(trio.globex.pk, "openai", "gpt-4o").input == Decimal("2.5")
    again = client.post("/t/acme/prices/new/", data)
    assert again.status_code == 400 and "have a price already" in again.content.decode()
    price = ModelPrice.objects.get(tenant=trio.acme)
    assert "yours" in client.get("/t/acme/prices/").content.decode()
    bad = client.post(f"/t/acme/prices/{price.pk}/edit/", {**data, "input_price": "-1",
                                                           "output_price": "20000"})  # fmt: skip
    text = bad.content.decode()
    assert bad.status_code == 400 and "cannot be negative" in text and "At most" in text
    price.refresh_from_db()
    assert price.input_price == 2  # unchanged
    assert client.post(f"/t/acme/prices/{price.pk}/delete/").status_code == 302
    assert price_for(trio.acme.pk, "openai", "gpt-4o").input == Decimal("2.5")


def test_members_cannot_edit_prices_and_outsiders_see_none(trio):
    price = ModelPrice.objects.create(
        tenant=trio.acme, provider_kind="openai", model="x", input_price=1, output_price=1,
        cached_input_price=1, cache_write_price=1,
    )  # fmt: skip
    bob = login(Client(), trio.bob)
    assert bob.get("/t/acme/prices/").status_code == 403
    assert bob.post(f"/t/acme/prices/{price.pk}/delete/").status_code == 403
    viewer = make_user("vera")
    add_member(trio.acme, viewer, Role.VIEWER)
    assert login(Client(), viewer).get("/t/acme/prices/new/").status_code == 403
    charlie = login(Client(), trio.charlie)  # globex's owner
    assert charlie.get("/t/acme/prices/").status_code == 404
    assert charlie.get(f"/t/globex/prices/{price.pk}/edit/").status_code == 404
    assert charlie.post(f"/t/globex/prices/{price.pk}/delete/").status_code == 404
    assert ModelPrice.objects.filter(pk=price.pk).exists()


def test_the_admin_edits_a_tenants_prices_only(client, trio):
    theirs = ModelPrice.objects.create(
        tenant=trio.globex, provider_kind="openai", model="x", input_price=1, output_price=1,
        cached_input_price=1, cache_write_price=1,
    )  # fmt: skip
    login(client, trio.alice)
    data = {
        "tenant": trio.acme.pk, "provider_kind": "openai", "model": "gpt-4o",
        "input_price": "3", "output_price": "9", "cached_input_price": "1",
        "cache_write_price": "3",
    }  # fmt: skip
    response = client.post("/admin/providers/modelprice/add/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert price_for(trio.acme.pk, "openai", "gpt-4o-x").input == 3
    bad = client.post(
        "/admin/providers/modelprice/add/", {**data, "model": "o1", "input_price": "-2"}
    )
    assert bad.status_code == 200 and "cannot be negative" in bad.content.decode()
    listing = client.get("/admin/providers/modelprice/").content.decode()
    assert "gpt-4o" in listing and ">x<" not in listing
    assert client.get(f"/admin/providers/modelprice/{theirs.pk}/change/").status_code in (302, 404)
