"""REST: provider connections with write-only API keys, and their connection test."""

from __future__ import annotations

from providers.models import ProviderConnection
from tests.api.test_resources import as_key, assert_error
from tests.factories import make_connection

KEY = "sk-ant-api03-PROVIDER-SECRET"


def claude(**extra) -> dict:
    return {"name": "Claude", "kind": "anthropic", "api_key": KEY, **extra}


def test_connections_crud_with_a_write_only_key(client, trio):
    api = as_key(client, trio.acme)
    created = api.post("/provider-connections", claude(default_model="claude-sonnet-4-5"))
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["has_api_key"] is True and "api_key" not in body
    assert body["health_status"] == "unknown"
    pk = body["id"]

    assert api.get(f"/provider-connections/{pk}").json()["name"] == "Claude"
    assert [c["id"] for c in api.get("/provider-connections").json()["results"]] == [pk]
    renamed = api.patch(f"/provider-connections/{pk}", {"name": "Anthropic"})
    assert renamed.status_code == 200 and renamed.json()["has_api_key"] is True
    assert ProviderConnection.objects.get(pk=pk).api_key == KEY  # omitted: kept
    cleared = api.patch(f"/provider-connections/{pk}", {"api_key": None})
    assert "api_key" in assert_error(cleared, 400)["details"]  # Anthropic needs a key
    rotated = api.patch(f"/provider-connections/{pk}", {"api_key": "sk-new"})
    assert rotated.status_code == 200
    assert ProviderConnection.objects.get(pk=pk).api_key == "sk-new"

    assert api.delete(f"/provider-connections/{pk}").status_code == 204
    assert_error(api.get(f"/provider-connections/{pk}"), 404)
    assert not any(KEY in body or "sk-new" in body for body in api.bodies)


def test_validation_and_filters(client, trio):
    api = as_key(client, trio.acme)
    assert (
        "api_key"
        in assert_error(api.post("/provider-connections", claude(api_key="")), 400)["details"]
    )
    bad_headers = {"name": "x", "kind": "offline", "extra_headers": {"Authorization": "x"}}
    assert (
        "extra_headers"
        in assert_error(api.post("/provider-connections", bad_headers), 400)["details"]
    )
    assert api.post("/provider-connections", claude()).status_code == 201
    offline = {"name": "Offline", "kind": "offline"}
    assert api.post("/provider-connections", offline).status_code == 201
    kinds = [
        c["kind"] for c in api.get("/provider-connections", {"kind": "offline"}).json()["results"]
    ]
    assert kinds == ["offline"]
    assert_error(api.post("/provider-connections", offline), 400)  # the name is taken


def test_a_new_default_takes_over_from_the_old_one(client, trio):
    api = as_key(client, trio.acme)
    first = api.post("/provider-connections", {"name": "A", "kind": "offline", "is_default": True})
    second = api.post("/provider-connections", {"name": "B", "kind": "offline", "is_default": True})
    assert first.status_code == second.status_code == 201
    defaults = api.get("/provider-connections", {"is_default": "true"}).json()["results"]
    assert [c["name"] for c in defaults] == ["B"]


def test_the_connection_test_records_health_without_the_key(
    client, trio, provider_server, settings
):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    api = as_key(client, trio.acme)
    pk = api.post(
        "/provider-connections", claude(base_url=provider_server.anthropic_base_url)
    ).json()["id"]
    tested = api.post(f"/provider-connections/{pk}/test")
    assert tested.status_code == 200, tested.content
    assert tested.json()["ok"] is True and tested.json()["health_status"] == "ok"
    assert tested.json()["last_checked_at"]

    provider_server.expect_api_key("another-key")
    failing = api.post(f"/provider-connections/{pk}/test")
    assert failing.status_code == 200
    assert failing.json()["ok"] is False and failing.json()["health_status"] == "failing"
    assert api.get(f"/provider-connections/{pk}").json()["health_status"] == "failing"
    assert not any(KEY in body for body in api.bodies)


def test_a_private_base_url_test_is_refused_not_a_500(client, trio, settings):
    settings.EGRESS_ALLOWLIST = []
    api = as_key(client, trio.acme)
    pk = api.post(
        "/provider-connections", claude(base_url="http://127.0.0.1:9", max_retries=0)
    ).json()["id"]
    tested = api.post(f"/provider-connections/{pk}/test")
    assert tested.status_code == 200 and tested.json()["ok"] is False
    openai = {"name": "GPT", "kind": "openai", "api_key": KEY, "base_url": "http://10.0.0.1/v1"}
    pk = api.post("/provider-connections", openai).json()["id"]
    tested = api.post(f"/provider-connections/{pk}/test")
    assert tested.status_code == 200 and tested.json()["ok"] is False
    assert tested.json()["message"].startswith("This address is not allowed: ")


def test_other_tenants_connections_answer_404(client, trio):
    theirs = make_connection(trio.globex, "G")
    api = as_key(client, trio.acme)
    assert_error(api.get(f"/provider-connections/{theirs.pk}"), 404)
    assert_error(api.patch(f"/provider-connections/{theirs.pk}", {"name": "mine"}), 404)
    assert_error(
        api.put(f"/provider-connections/{theirs.pk}", {"name": "m", "kind": "offline"}), 404
    )
    assert_error(api.post(f"/provider-connections/{theirs.pk}/test"), 404)
    assert_error(api.delete(f"/provider-connections/{theirs.pk}"), 404)
    assert ProviderConnection.objects.get(pk=theirs.pk).name == "G"
