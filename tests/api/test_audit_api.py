"""GET /api/v1/audit-log, and the entries the REST entry points record: an agent's secret
changed (masked), a key created, an approval decided, a run started with a key."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import httpx2
import pytest

from agents.models import Run
from agents.runs import run_start
from tenancy import services
from tenancy.models import ApiKey, AuditAction, AuditEntry
from tenancy.records import audit
from tests.api.test_resources import Api, as_key, assert_error
from tests.factories import login, make_agent, make_approval

SECRET = "sk-rest-secret-789"


def log(api: Api, **params) -> list[dict]:
    response = api.get("/audit-log", params)
    assert response.status_code == 200, response.content
    return response.json()["results"]


# -- who may read it ------------------------------------------------------------------------
@pytest.mark.django_db
def test_admin_keys_and_admin_sessions_read_it_others_get_403(client, trio):
    assert as_key(client, trio.acme, "admin").get("/audit-log").status_code == 200
    for scopes in (("read",), ("read", "write", "run")):
        assert_error(as_key(client, trio.acme, *scopes).get("/audit-log"), 403)
    login(client, trio.alice)
    assert Api(client, tenant_header="acme").get("/audit-log").status_code == 200
    login(client, trio.bob)  # a member
    assert_error(Api(client, tenant_header="acme").get("/audit-log"), 403)
    login(client, trio.charlie)  # another tenant's owner
    assert_error(Api(client, tenant_header="acme").get("/audit-log"), 404)
    client.logout()
    assert_error(Api(client).get("/audit-log"), 401)


@pytest.mark.django_db
def test_it_lists_only_the_keys_tenant_newest_first(client, trio):
    audit.record(tenant=trio.globex, action=AuditAction.CONFIG_CHANGED, details={"n": "gx"})
    api = as_key(client, trio.acme, "admin")
    entries = log(api)
    assert entries and all(e["details"].get("n") != "gx" for e in entries)
    ids = [e["id"] for e in entries]
    assert ids == sorted(ids, reverse=True)
    tenant_ids = set(
        AuditEntry.objects.filter(pk__in=ids).values_list("tenant_id", flat=True).distinct()
    )
    assert tenant_ids == {trio.acme.pk}


@pytest.mark.django_db
def test_cursor_pagination_walks_every_entry_once(client, trio):
    AuditEntry.objects.bulk_create(
        AuditEntry(tenant=trio.acme, action=AuditAction.CONFIG_CHANGED, actor_label=f"a{i}")
        for i in range(7)
    )
    api = as_key(client, trio.acme, "admin")
    seen, params = [], {"limit": "3"}
    while True:
        body = api.get("/audit-log", params).json()
        seen += [e["id"] for e in body["results"]]
        if not body["next"]:
            break
        params = dict(parse_qsl(urlsplit(body["next"]).query))
    assert len(seen) == len(set(seen)) == AuditEntry.objects.filter(tenant=trio.acme).count()
    assert_error(api.get("/audit-log", {"cursor": "cD1hYmM="}), 404)


# -- filters -------------------------------------------------------------------------------
@pytest.mark.django_db
def test_filters_as_on_the_page(client, trio):
    api = as_key(client, trio.acme, "admin")
    created = log(api, action="api_key.created")
    assert created and {e["action"] for e in created} == {"api_key.created"}
    assert {e["object_type"] for e in log(api, object_type="tenancy.membership")} == {
        "tenancy.membership"
    }
    assert log(api, actor="nobody-such") == []
    assert log(api, since="2000-01-01", until="2000-01-02") == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"action": "nope"}, "action"),
        ({"action": "\x00"}, "action"),
        ({"actor": "a\x00b"}, "actor"),
        ({"object_type": "y" * 101}, "object_type"),
        ({"since": "not-a-date"}, "since"),
        ({"until": "9999-12-31"}, "until"),
        ({"since": "2025-02-01", "until": "2025-01-01"}, "filters"),
    ],
)
def test_a_bad_filter_is_a_400(client, trio, params, field):
    error = assert_error(as_key(client, trio.acme, "admin").get("/audit-log", params), 400)
    assert field in error["details"]


# -- what the REST entry points record ---------------------------------------------------
@pytest.mark.django_db
def test_an_agents_secret_changed_over_rest_is_masked_everywhere(client, trio):
    make_agent(trio.acme, "bot")
    writer = as_key(client, trio.acme, "read", "config")
    changed = writer.patch("/agents/bot", {"remote_token": SECRET, "description": "new"})
    assert changed.status_code == 200, changed.content
    admin = as_key(client, trio.acme, "admin")
    (entry,) = log(admin, action="config.changed", object_type="agents.agent")
    assert entry["changes"] == {"description": ["", "new"], "remote_token": [None, "[set]"]}
    writer_key = ApiKey.objects.get(tenant=trio.acme, scopes=["config", "read"])
    assert entry["api_key"] == writer_key.pk and entry["actor_label"].startswith("API key test")
    assert entry["ip"] == "127.0.0.1"
    assert all(SECRET not in body for body in admin.bodies + writer.bodies)
    assert not AuditEntry.objects.filter(changes__icontains=SECRET).exists()


@pytest.mark.django_db
def test_a_key_created_over_rest_is_recorded_without_its_secret(client, trio):
    login(client, trio.alice)
    api = Api(client, tenant_header="acme")
    created = api.post("/api-keys", {"name": "deploy", "scopes": ["read"]})
    assert created.status_code == 201
    (entry,) = [e for e in log(api, action="api_key.created") if e["details"]["name"] == "deploy"]
    assert (
        entry["actor_label"] == "alice" and entry["details"]["prefix"] == created.json()["prefix"]
    )
    assert created.json()["key"] not in api.bodies[-1]


@pytest.mark.django_db
def test_a_run_started_with_a_key_and_an_approval_decided_over_rest(
    client, trio, django_capture_on_commit_callbacks
):
    make_agent(trio.acme, "bot")
    runner = as_key(client, trio.acme, "read", "run")
    with django_capture_on_commit_callbacks():  # the Celery enqueue is not run
        started = runner.post("/runs", {"agent": "bot", "input": "hi"})
    assert started.status_code == 201, started.content
    admin = as_key(client, trio.acme, "admin")
    (entry,) = log(admin, action="run.started_by_key")
    assert entry["object_type"] == "agents.run" and entry["details"]["agent"] == "bot"
    assert entry["details"]["run"] == started.json()["id"]
    assert entry["api_key"] is not None

    run = run_start(tenant=trio.acme, agent=make_agent(trio.acme, "b2"), input="x", enqueue=False)
    Run.objects.filter(pk=run.pk).update(status="awaiting_approval")
    approval = make_approval(run, "transfer", arguments={"token": SECRET})
    decided = runner.post(
        f"/runs/{run.pk}/approvals/{approval.pk}", {"decision": "reject", "reason": "Too risky."}
    )
    assert decided.status_code == 200, decided.content
    (entry,) = log(admin, action="approval.decided")
    assert entry["details"]["tool"] == "transfer" and entry["details"]["decision"] == "rejected"
    assert entry["details"]["reason"] == "Too risky." and entry["actor_label"].startswith("API key")
    assert SECRET not in str(entry)
    assert not log(admin, action="run.started_by_key", actor="alice")  # sessions: not logged


@pytest.mark.django_db(transaction=True)
def test_over_asgi_the_actor_and_address_come_from_the_request(trio, asgi_server):
    """The real server (uvicorn, async middleware chain): the config service knows no
    actor, the request being served does."""
    make_agent(trio.acme, "bot")
    _, full = services.api_key_create(tenant=trio.acme, name="asgi", scopes=["read", "config"])
    response = httpx2.patch(
        f"{asgi_server}/api/v1/agents/bot",
        json={"description": "over asgi"},
        headers={"Authorization": f"Bearer {full}"},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    entry = AuditEntry.objects.get(tenant=trio.acme, action="config.changed")
    assert entry.actor_label.startswith("API key asgi") and entry.api_key is not None
    assert entry.ip == "127.0.0.1" and entry.changes == {"description": ["", "over asgi"]}
