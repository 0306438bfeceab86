"""REST runs: start, replay an Idempotency-Key, read, list, events as JSON, cancel, approve."""

# Fixtures imported from other modules are used as parameters by name:

from __future__ import annotations

import json
import threading
import time

import psycopg
import pytest
from django.db import connection
from rest_framework.test import APIClient

from agents.models import Agent, Approval, Crew, CrewMember, Run, RunEvent
from agents.runs import run_inline, run_start
from agents.runs.engine import execute_run
from agents.services import conversation_save
from tenancy import services as tenancy
from tenancy.models import ApiKey
from tests.conftest import PAY_SECRET
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply


def client_for(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


@pytest.fixture
def keys(trio):
    """Full API keys: acme with run, acme read-only, globex with run."""
    _, acme_run = tenancy.api_key_create(tenant=trio.acme, name="ci", scopes=["read", "run"])
    _, acme_read = tenancy.api_key_create(tenant=trio.acme, name="ro", scopes=["read"])
    _, globex_run = tenancy.api_key_create(tenant=trio.globex, name="gx", scopes=["read", "run"])
    return {"acme": acme_run, "acme_read": acme_read, "globex": globex_run}


@pytest.fixture
def acme(keys) -> APIClient:
    return client_for(keys["acme"])


def wait(run_id: int, statuses: set[str], timeout: float = 10) -> Run:
    deadline = time.monotonic() + timeout
    while True:
        run = Run.objects.get(pk=run_id)
        if run.status in statuses or time.monotonic() > deadline:
            return run
        time.sleep(0.05)


# -- starting, reading, listing ----------------------------------------------------------
@pytest.mark.django_db
def test_post_runs_queues_a_run_that_get_and_list_show(
    trio, agent, acme, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as enqueued:
        response = acme.post("/api/v1/runs", {"agent": "assistant", "input": "hi"}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "queued" and body["agent"] == "assistant" and body["input"] == "hi"
    assert body["usage"] == {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
    }
    assert response["Location"] == f"/api/v1/runs/{body['id']}"
    assert len(enqueued) == 1
    run = Run.objects.get(pk=body["id"])
    assert run.tenant == trio.acme and run.initiated_by_api_key.name == "ci"

    assert acme.get(f"/api/v1/runs/{run.pk}").json() == body
    listed = acme.get("/api/v1/runs").json()
    assert [r["id"] for r in listed["results"]] == [run.pk]
    assert acme.get("/api/v1/runs?status=queued&agent=assistant").json()["results"]
    assert acme.get("/api/v1/runs?status=succeeded").json()["results"] == []
    assert acme.get("/api/v1/runs?agent=nobody").json()["results"] == []
    bad = acme.get("/api/v1/runs?status=sleeping")
    assert bad.status_code == 400 and "status" in bad.json()["error"]["details"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body, field",
    [
        ({"input": "hi"}, "agent"),
        ({"agent": "assistant", "crew": "desk", "input": "hi"}, "agent"),
        ({"agent": "assistant"}, "input"),
        ({"agent": "assistant", "input": "hi", "colour": "red"}, "colour"),
        ({"agent": "assistant", "input": "nul \x00"}, "input"),
        ({"agent": "Not A Slug", "input": "hi"}, "agent"),
        ({"agent": "assistant", "input": "   "}, "input"),
    ],
)
def test_invalid_run_requests_are_400s_that_name_the_field(agent, acme, body, field):
    response = acme.post("/api/v1/runs", body, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["error"]["details"]
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_unknown_ids_and_paths_answer_404_in_the_error_format(agent, acme):
    for url in ("/api/v1/runs/999999", "/api/v1/runs/abc", "/api/v1/runs/99999999999999999999"):
        response = acme.get(url)
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    response = acme.post("/api/v1/runs", {"agent": "ghost", "input": "hi"}, format="json")
    assert response.status_code == 404


# -- idempotency -----------------------------------------------------------------------
@pytest.mark.django_db
def test_an_idempotency_key_replay_returns_the_same_run_and_starts_nothing(
    agent, acme, django_capture_on_commit_callbacks
):
    request = {"agent": "assistant", "input": "pay the invoice"}
    with django_capture_on_commit_callbacks() as first_enqueued:
        first = acme.post("/api/v1/runs", request, format="json", HTTP_IDEMPOTENCY_KEY="inv-7")
    with django_capture_on_commit_callbacks() as replay_enqueued:
        replay = acme.post("/api/v1/runs", request, format="json", HTTP_IDEMPOTENCY_KEY="inv-7")
    assert (first.status_code, replay.status_code) == (201, 200)
    assert replay.json()["id"] == first.json()["id"]
    assert replay.json()["idempotency_key"] == "inv-7"
    assert (len(first_enqueued), len(replay_enqueued)) == (1, 0)
    assert Run.objects.count() == 1

    other = acme.post(
        "/api/v1/runs",
        {"agent": "assistant", "input": "pay it twice"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="inv-7",
    )
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    fresh = acme.post("/api/v1/runs", request, format="json", HTTP_IDEMPOTENCY_KEY="inv-8")
    assert fresh.status_code == 201 and Run.objects.count() == 2
    too_long = acme.post("/api/v1/runs", request, format="json", HTTP_IDEMPOTENCY_KEY="k" * 201)
    assert too_long.status_code == 400


@pytest.mark.django_db
def test_a_conversation_refuses_a_second_turn_while_the_first_runs(trio, agent, acme):
    key = ApiKey.objects.get(tenant=trio.acme, name="ci")
    chat = conversation_save(tenant=trio.acme, changes={"agent": agent}, owner_api_key=key)
    turn = {"agent": "assistant", "input": "one", "conversation": chat.pk}
    first = acme.post("/api/v1/runs", turn, format="json", HTTP_IDEMPOTENCY_KEY="t-1")
    assert first.status_code == 201  # queued: no worker executes it here
    replay = acme.post("/api/v1/runs", turn, format="json", HTTP_IDEMPOTENCY_KEY="t-1")
    assert replay.status_code == 200 and replay.json()["id"] == first.json()["id"]
    second = acme.post("/api/v1/runs", {**turn, "input": "two"}, format="json")
    assert second.status_code == 409
    error = second.json()["error"]
    assert error["code"] == "conversation_busy"
    assert f"run {first.json()['id']}" in error["message"] and "still running" in error["message"]
    assert Run.objects.filter(conversation=chat).count() == 1


@pytest.mark.django_db
def test_idempotency_keys_are_per_tenant(trio, agent, keys):
    Agent.objects.create(tenant=trio.globex, slug="assistant", name="Globex assistant")
    request = {"agent": "assistant", "input": "hi"}
    acme = client_for(keys["acme"]).post(
        "/api/v1/runs", request, format="json", HTTP_IDEMPOTENCY_KEY="same"
    )
    globex = client_for(keys["globex"]).post(
        "/api/v1/runs", request, format="json", HTTP_IDEMPOTENCY_KEY="same"
    )
    assert (acme.status_code, globex.status_code) == (201, 201)
    assert acme.json()["id"] != globex.json()["id"]


# -- tenancy and scopes --------------------------------------------------------------------
@pytest.mark.django_db
def test_other_tenants_runs_and_approvals_answer_404(trio, agent, keys):
    run = run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False)
    approval = Approval.objects.create(
        tenant=trio.acme, run=run, call_id="c1", tool_name="transfer", arguments={}
    )
    globex = client_for(keys["globex"])
    for method, url in [
        ("get", f"/api/v1/runs/{run.pk}"),
        ("get", f"/api/v1/runs/{run.pk}/events"),
        ("post", f"/api/v1/runs/{run.pk}/cancel"),
        ("post", f"/api/v1/runs/{run.pk}/approvals/{approval.pk}"),
    ]:
        response = getattr(globex, method)(url, {"decision": "approve"}, format="json")
        assert response.status_code == 404, (url, response.json())
    response = globex.get(f"/api/v1/runs/{run.pk}/events", HTTP_ACCEPT="text/event-stream")
    assert response.status_code == 404 and response["Content-Type"] == "application/json"
    assert globex.get("/api/v1/runs").json()["results"] == []
    response = globex.post("/api/v1/runs", {"agent": "assistant", "input": "hi"}, format="json")
    assert response.status_code == 404  # acme's agent is not globex's
    assert Run.objects.count() == 1 and Approval.objects.get().status == "pending"


@pytest.mark.django_db
def test_an_approval_of_another_run_answers_404(trio, agent, acme):
    run = run_start(tenant=trio.acme, agent=agent, input="one", enqueue=False)
    other = run_start(tenant=trio.acme, agent=agent, input="two", enqueue=False)
    approval = Approval.objects.create(
        tenant=trio.acme, run=other, call_id="c1", tool_name="transfer", arguments={}
    )
    url = f"/api/v1/runs/{run.pk}/approvals/{approval.pk}"
    assert acme.post(url, {"decision": "approve"}, format="json").status_code == 404
    assert acme.post(f"/api/v1/runs/{run.pk}/approvals/x", {}, format="json").status_code == 404


@pytest.mark.django_db
def test_a_read_only_key_reads_but_cannot_start_cancel_or_decide(trio, agent, keys):
    run = run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False)
    approval = Approval.objects.create(
        tenant=trio.acme, run=run, call_id="c1", tool_name="transfer", arguments={}
    )
    reader = client_for(keys["acme_read"])
    started = reader.post("/api/v1/runs", {"agent": "assistant", "input": "hi"}, format="json")
    assert started.status_code == 403 and "'run' scope" in started.json()["error"]["message"]
    assert reader.post(f"/api/v1/runs/{run.pk}/cancel").status_code == 403
    decided = reader.post(
        f"/api/v1/runs/{run.pk}/approvals/{approval.pk}", {"decision": "approve"}, format="json"
    )
    assert decided.status_code == 403
    assert reader.get(f"/api/v1/runs/{run.pk}").status_code == 200
    assert reader.get(f"/api/v1/runs/{run.pk}/events").status_code == 200
    assert Run.objects.count() == 1 and Run.objects.get().status == "queued"


@pytest.mark.django_db
def test_no_key_or_a_revoked_key_is_a_401(trio, agent):
    key, full = tenancy.api_key_create(tenant=trio.acme, name="old", scopes=["read", "run"])
    tenancy.api_key_revoke(key=key)
    assert APIClient().get("/api/v1/runs").status_code == 401
    response = client_for(full).get("/api/v1/runs")
    assert response.status_code == 401 and response.json()["error"]["code"]


@pytest.mark.django_db
def test_a_session_member_runs_with_x_tenant_and_an_outsider_gets_404(trio, agent):
    bob = APIClient()
    bob.force_login(trio.bob)
    response = bob.post(
        "/api/v1/runs", {"agent": "assistant", "input": "hi"}, format="json", HTTP_X_TENANT="acme"
    )
    assert response.status_code == 201, response.json()
    assert Run.objects.get().initiated_by_user == trio.bob
    charlie = APIClient()
    charlie.force_login(trio.charlie)
    run_id = response.json()["id"]
    assert charlie.get(f"/api/v1/runs/{run_id}", HTTP_X_TENANT="acme").status_code == 404
    assert charlie.get(f"/api/v1/runs/{run_id}", HTTP_X_TENANT="globex").status_code == 404


# -- events as JSON, cancel --------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_a_run_started_over_rest_shows_the_limits_it_ran_under(trio, agent, acme, provider_server):
    agent.max_rounds, agent.max_tool_calls, agent.max_tokens_per_run = 3, 4, 6000
    agent.save()
    provider_server.script("openai", TextReply("Hi."))
    started = acme.post("/api/v1/runs", {"agent": "assistant", "input": "hi"}, format="json")
    assert started.status_code == 201 and started.json()["limits"] == {}  # not run yet
    url = f"/api/v1/runs/{started.json()['id']}"
    execute_run(started.json()["id"])  # here, unless the session's worker took it already
    deadline = time.monotonic() + 30
    while (run := acme.get(url).json())["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, run
        time.sleep(0.1)
    assert run["status"] == "succeeded", run
    assert run["limits"] == {
        "max_rounds": 3,
        "max_tool_calls": 4,
        "max_tokens_per_run": 6000,
        "max_tokens_per_response": 1024,
    }


def test_events_as_json_after_a_sequence_number(trio, agent, acme, provider_server):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "calculator", '{"expression": "6*7"}')]),
        TextReply("42."),
    )
    run = run_inline(tenant=trio.acme, agent=agent, input="6*7?")
    everything = acme.get(f"/api/v1/runs/{run.pk}/events").json()
    seqs = [e["seq"] for e in everything["events"]]
    assert seqs == list(range(1, len(seqs) + 1)) and everything["has_more"] is False
    assert everything["status"] == "succeeded"
    assert everything["events"][-1]["type"] == "run.completed"
    tail = acme.get(f"/api/v1/runs/{run.pk}/events?after=3").json()
    assert tail["events"] == everything["events"][3:]
    page = acme.get(f"/api/v1/runs/{run.pk}/events?after=1&limit=2").json()
    assert [e["seq"] for e in page["events"]] == [2, 3]
    assert page["has_more"] is True and page["next_after"] == 3
    assert acme.get(f"/api/v1/runs/{run.pk}/events?after=-1").status_code == 400
    assert acme.get(f"/api/v1/runs/{run.pk}/events?after=x").status_code == 400


@pytest.mark.django_db(transaction=True)
def test_cancel_a_queued_run_and_refuse_to_cancel_a_finished_one(trio, agent, acme):
    run = run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False)
    response = acme.post(f"/api/v1/runs/{run.pk}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert RunEvent.objects.filter(run=run, type="run.cancelled").exists()
    again = acme.post(f"/api/v1/runs/{run.pk}/cancel")
    assert again.status_code == 200 and again.json()["status"] == "cancelled"

    finished = run_inline(tenant=trio.acme, agent=agent, input="hello")
    refused = acme.post(f"/api/v1/runs/{finished.pk}/cancel")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "run_finished"


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_runs_status_and_its_terminal_event_are_seen_together(trio, agent, acme):
    """The cancel's event is held up (another transaction is inserting the same event
    number): meanwhile a reader sees the run as it was, never cancelled without its
    `run.cancelled` event (a stream that finds the run ended replays the stored events and
    would end without one)."""
    run = run_start(tenant=trio.acme, agent=agent, input="hi", enqueue=False)
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    holder = psycopg.connect(**params)
    holder.execute(
        "INSERT INTO agents_runevent (tenant_id, run_id, seq, type, payload, created_at) "
        "VALUES (%s, %s, 1, 'held', '{}', NOW())",
        [trio.acme.pk, run.pk],
    )
    answers = []
    cancelling = threading.Thread(
        target=lambda: (answers.append(acme.post(f"/api/v1/runs/{run.pk}/cancel")), close_old())
    )
    cancelling.start()
    try:
        # (A connection of its own: the request's thread has this process act as the app role.)
        with psycopg.connect(**params, autocommit=True) as reader:
            deadline = time.monotonic() + 10
            while not reader.execute(WAITING_TO_INSERT_AN_EVENT).fetchone()[0]:
                assert time.monotonic() < deadline, "the cancel never reached its event"
                time.sleep(0.02)
            seen, ended = reader.execute(
                "SELECT status, EXISTS (SELECT 1 FROM agents_runevent WHERE run_id = id AND "
                "type = 'run.cancelled') FROM agents_run WHERE id = %s",
                [run.pk],
            ).fetchone()
    finally:
        holder.rollback()
        holder.close()
        cancelling.join(10)
    assert (seen, ended) == ("queued", False)
    assert answers[0].status_code == 200 and answers[0].json()["status"] == "cancelled"
    assert RunEvent.objects.get(run=run).type == "run.cancelled"


WAITING_TO_INSERT_AN_EVENT = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND "
    "wait_event_type = 'Lock' AND query LIKE 'INSERT INTO agents_runevent%'"
)


def close_old() -> None:
    connection.close()


# -- approvals, through a real worker ------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_approving_through_the_api_resumes_the_run_with_edited_arguments(
    trio, agent, acme, provider_server, transfer, celery_worker_process
):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("t1", "transfer", '{"amount": 500, "to": "bob"}')]),
        TextReply("Sent 50 to bob."),
    )
    started = acme.post("/api/v1/runs", {"agent": "assistant", "input": "pay bob"}, format="json")
    run_id = started.json()["id"]
    assert wait(run_id, {"awaiting_approval", "failed"}).status == "awaiting_approval"
    pending = acme.get(f"/api/v1/runs/{run_id}").json()["approvals"]
    assert [(a["tool_name"], a["status"], a["run"]) for a in pending] == [
        ("transfer", "pending", run_id)
    ]
    url = f"/api/v1/runs/{run_id}/approvals/{pending[0]['id']}"
    assert acme.post(url, {"decision": "maybe"}, format="json").status_code == 400
    decided = acme.post(
        url,
        {"decision": "approve", "reason": "ok", "arguments": {"amount": 50, "to": "bob"}},
        format="json",
    )
    assert decided.status_code == 200, decided.json()
    # transfer is an HTTP tool: the edit is prepared again and asked again, nothing sent.
    assert decided.json()["status"] == "edited" and decided.json()["decided_by"] == "API key ci"
    again = decided.json()["replaced_by"]
    shown = acme.get(f"/api/v1/runs/{run_id}").json()["approvals"]
    assert [(a["id"], a["status"]) for a in shown] == [
        (pending[0]["id"], "edited"),
        (again, "pending"),
    ]
    assert shown[1]["prepared_request"]["body"] == '{"amount":50,"to":"bob"}'
    assert transfer.requests == []
    approved = acme.post(
        f"/api/v1/runs/{run_id}/approvals/{again}", {"decision": "approve"}, format="json"
    )
    assert approved.status_code == 200 and approved.json()["status"] == "approved"
    run = wait(run_id, {"succeeded", "failed"})
    assert run.status == "succeeded" and run.output == "Sent 50 to bob."
    assert [r.json() for r in transfer.requests] == [{"amount": 50, "to": "bob"}]
    twice = acme.post(url, {"decision": "reject"}, format="json")
    assert twice.status_code == 409 and twice.json()["error"]["code"] == "already_decided"


@pytest.mark.django_db(transaction=True)
def test_an_approval_shows_the_exact_request_with_its_credential_masked(
    trio, agent, acme, keys, provider_server, pay
):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("p1", "pay", '{"amount": 500, "to": "bob"}')]),
        TextReply("Paid."),
    )
    run = run_start(tenant=trio.acme, agent=agent, input="pay bob", enqueue=False)
    execute_run(run.pk)
    body = acme.get(f"/api/v1/runs/{run.pk}").json()
    [approval] = body["approvals"]
    assert approval["prepared_request"] == {
        "method": "POST",
        "url": f"{pay.url}/payments/bob",
        "headers": [
            ["X-Client", "agents"],
            ["Authorization", "Bearer ***"],
            ["Idempotency-Key", f"{run.pk}:p1"],
            ["Content-Type", "application/json"],
        ],
        "body": '{"amount":500}',
        "credential_header": "Authorization",
    }
    events = acme.get(f"/api/v1/runs/{run.pk}/events").content.decode()
    assert '"prepared_request"' in events
    url = f"/api/v1/runs/{run.pk}/approvals/{approval['id']}"
    edit = {"decision": "approve", "arguments": {"amount": "x", "to": "b"}}
    refused = acme.post(url, edit, format="json")
    assert refused.status_code == 400 and "invalid arguments" in refused.content.decode()
    assert Approval.objects.get(pk=approval["id"]).status == "pending"
    globex = client_for(keys["globex"])
    assert globex.post(url, {"decision": "approve"}, format="json").status_code == 404
    direct = acme.post(
        "/api/v1/tools/pay/execute", {"arguments": {"amount": 3, "to": "bob"}}, format="json"
    )
    assert direct.status_code == 202 and direct.json()["prepared_request"]["body"] == '{"amount":3}'
    everything = body | {"events": events, "direct": direct.json()}
    assert PAY_SECRET not in json.dumps(everything) and pay.requests == []


@pytest.mark.django_db(transaction=True)
def test_a_crew_members_approval_is_decided_through_the_crew_run(
    trio, agent, acme, provider_server, transfer, celery_worker_process
):
    crew = Crew.objects.create(tenant=trio.acme, slug="desk", name="Desk", mode="sequential")
    CrewMember.objects.create(tenant=trio.acme, crew=crew, agent=agent)
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("t1", "transfer", '{"amount": 5, "to": "eve"}')]),
        TextReply("No transfer made."),
    )
    started = acme.post("/api/v1/runs", {"crew": "desk", "input": "pay eve"}, format="json")
    assert started.status_code == 201 and started.json()["crew"] == "desk"
    crew_run = wait(started.json()["id"], {"awaiting_approval", "failed"})
    assert crew_run.status == "awaiting_approval", crew_run.error
    approvals = acme.get(f"/api/v1/runs/{crew_run.pk}").json()["approvals"]
    assert len(approvals) == 1 and approvals[0]["run"] != crew_run.pk  # the member's run
    response = acme.post(
        f"/api/v1/runs/{crew_run.pk}/approvals/{approvals[0]['id']}",
        {"decision": "reject", "reason": "not today"},
        format="json",
    )
    assert response.status_code == 200 and response.json()["status"] == "rejected"
    crew_run = wait(crew_run.pk, {"succeeded", "failed"})
    assert crew_run.status == "succeeded" and crew_run.output == "No transfer made."
    assert transfer.requests == []


# -- schema ------------------------------------------------------------------------------
@pytest.mark.django_db
def test_every_runs_endpoint_is_documented_with_schemas_and_examples(client):
    paths = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()["paths"]
    runs = {path: ops for path, ops in paths.items() if path.startswith("/api/v1/runs")}
    assert set(runs) == {
        "/api/v1/runs",
        "/api/v1/runs/{run_id}",
        "/api/v1/runs/{run_id}/events",
        "/api/v1/runs/{run_id}/cancel",
        "/api/v1/runs/{run_id}/resume",
        "/api/v1/runs/{run_id}/steer",
        "/api/v1/runs/{run_id}/verifications",
        "/api/v1/runs/{run_id}/feedback",
        "/api/v1/runs/{run_id}/approvals/{approval_id}",
    }
    for path, operations in runs.items():
        for method, operation in operations.items():
            assert operation["summary"], (method, path)
            documented = [operation.get("requestBody", {}), *operation["responses"].values()]
            content = [c for d in documented for c in d.get("content", {}).values()]
            assert all(c.get("schema") for c in content), (method, path)
            assert any(c.get("examples") for c in content), (method, path)
    events = runs["/api/v1/runs/{run_id}/events"]["get"]["responses"]
    assert set(events["200"]["content"]) == {"application/json", "text/event-stream"}
    assert set(events["404"]["content"]) == {"application/json"}
