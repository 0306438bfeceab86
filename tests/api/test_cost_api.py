"""REST: model prices (/api/v1/prices), usage and cost (/api/v1/usage, its CSV export) and
the run resource's cost, per role and tenant."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

from django.test import Client

from providers.models import ModelPrice
from providers.pricing import price_for
from tests.api.test_resources import Api, as_key, assert_error
from tests.factories import login
from tests.web.test_cost_pages import make_run, spent  # noqa: F401 (a fixture)

PRICE = {
    "provider_kind": "anthropic", "model": "claude-sonnet-4", "input_price": "2.5",
    "output_price": "12", "cached_input_price": "0.25", "cache_write_price": "3",
}  # fmt: skip


def test_prices_crud_by_a_config_key(client, trio):
    api = as_key(client, trio.acme)
    created = api.post("/prices", PRICE)
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["input_price"] == "2.5000" and body["model"] == "claude-sonnet-4"
    pk = body["id"]
    assert price_for(trio.acme.pk, "anthropic", "claude-sonnet-4-5-2025").output == 12
    assert [p["id"] for p in api.get("/prices").json()["results"]] == [pk]
    assert api.get("/prices", {"provider_kind": "openai"}).json()["results"] == []
    changed = api.patch(f"/prices/{pk}", {"output_price": "13"})
    assert changed.status_code == 200 and changed.json()["output_price"] == "13.0000"
    assert_error(api.post("/prices", PRICE), 400)  # the same model twice
    assert api.delete(f"/prices/{pk}").status_code == 204
    assert price_for(trio.acme.pk, "anthropic", "claude-sonnet-4-5").output == 15  # built-in


def test_prices_are_checked_with_clear_errors(client, trio):
    api = as_key(client, trio.acme)
    negative = assert_error(api.post("/prices", {**PRICE, "input_price": "-1"}), 400)
    assert "negative" in str(negative["details"]["input_price"])
    huge = assert_error(api.post("/prices", {**PRICE, "output_price": "10001"}), 400)
    assert "At most" in str(huge["details"]["output_price"])
    digits = assert_error(api.post("/prices", {**PRICE, "output_price": "1e20"}), 400)
    assert "output_price" in digits["details"]
    kind = assert_error(api.post("/prices", {**PRICE, "provider_kind": "acme"}), 400)
    assert "provider_kind" in kind["details"]
    assert_error(api.post("/prices", {**PRICE, "model": ""}), 400)
    assert_error(api.post("/prices", {**PRICE, "surprise": 1}), 400)
    assert not ModelPrice.objects.exists()


def test_the_built_in_prices_are_listed(client, trio):
    rows = as_key(client, trio.acme, "read").get("/prices/defaults").json()
    mini = next(r for r in rows if r["model"] == "gpt-4o-mini")
    assert mini == {
        "provider_kind": "openai", "model": "gpt-4o-mini", "input_price": "0.1500",
        "output_price": "0.6000", "cached_input_price": "0.0750", "cache_write_price": "0.1500",
    }  # fmt: skip


def test_only_admins_change_prices_and_other_tenants_get_404(client, trio):
    theirs = ModelPrice.objects.create(tenant=trio.globex, **{**PRICE, "model": "x"})
    reader = as_key(client, trio.acme, "read")
    assert reader.get("/prices").status_code == 200
    assert_error(reader.post("/prices", PRICE), 403)
    member = Api(login(Client(), trio.bob), tenant_header="acme")
    assert member.get("/prices").status_code == 200
    assert_error(member.post("/prices", PRICE), 403)
    admin = as_key(client, trio.acme)
    assert_error(admin.get(f"/prices/{theirs.pk}"), 404)
    assert_error(admin.patch(f"/prices/{theirs.pk}", {"input_price": "0"}), 404)
    assert_error(admin.delete(f"/prices/{theirs.pk}"), 404)
    assert admin.get("/prices").json()["results"] == []
    theirs.refresh_from_db()
    assert theirs.input_price == Decimal("2.5")


def test_usage_reports_cost_per_agent_member_key_and_day(client, trio, spent):  # noqa: F811
    owner = Api(login(Client(), trio.alice), tenant_header="acme")
    report = owner.get("/usage", {"days": "7"}).json()
    assert (report["days"], report["runs"], report["cost_usd"]) == (7, 4, "1.875001")
    assert [(x["label"], x["cost_usd"]) for x in report["by_agent"]] == [
        ("Writer", "1.125001"), ("Assistant", "0.750000"),
    ]  # fmt: skip
    assert {x["label"] for x in report["by_member"]} == {"alice", "bob", "(no member: API keys)"}
    assert {x["label"] for x in report["by_api_key"]} >= {"=ci-key"}
    assert len(report["by_day"]) == 2
    member = Api(login(Client(), trio.bob), tenant_header="acme")
    assert member.get("/usage").json()["cost_usd"] == "0.125000"  # his own runs only
    assert_error(owner.get("/usage", {"days": "0"}), 400)
    assert_error(owner.get("/usage", {"days": "x"}), 400)
    assert as_key(client, trio.globex, "read").get("/usage").json()["cost_usd"] == "99.000000"


def test_usage_exports_as_csv(client, trio, spent):  # noqa: F811
    api = Api(login(Client(), trio.alice), tenant_header="acme")
    response = api.client.get(
        "/api/v1/usage/export?days=7", HTTP_X_TENANT="acme", HTTP_ACCEPT="text/csv"
    )
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(rows) == 4 and sum(Decimal(r["cost_usd"]) for r in rows) == Decimal("1.875001")
    assert rows[0]["date"] < rows[-1]["date"]
    assert_error(api.get("/usage/export", {"days": "400"}), 400)
    anonymous = Client().get("/api/v1/usage/export", HTTP_X_TENANT="acme")
    assert anonymous.status_code in (401, 403)


def test_the_run_resource_carries_its_cost(client, trio, spent):  # noqa: F811
    run = make_run(trio.acme, user=trio.alice, cost="0.0042", model="gpt-4o")
    body = Api(login(Client(), trio.alice), tenant_header="acme").get(f"/runs/{run.pk}").json()
    assert (body["cost_usd"], body["total_cost_usd"]) == ("0.004200", "0.004200")
