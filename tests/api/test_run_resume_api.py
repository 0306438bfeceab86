"""REST `POST /api/v1/runs/{id}/resume` (agents.runs.resume): its shape, its refusals
(409 with the reason, 403, 404), and the `run.resumed` event in the run's events."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agents.models import Run, RunEvent
from agents.runs import run_start
from agents.runs.engine import execute_run
from tenancy import services as tenancy
from tenancy.models import AuditEntry
from tests.factories import login
from tests.fakes.provider_server import ErrorReply, TextReply

pytestmark = pytest.mark.django_db


def session(user, tenant: str = "acme") -> APIClient:
    return login(APIClient(), user, tenant=tenant)


def failed(trio, agent, provider_server, by) -> Run:
    provider_server.script("openai", ErrorReply(500, "down"))
    run = run_start(tenant=trio.acme, agent=agent, input="hi", initiated_by=by, enqueue=False)
    assert execute_run(run.pk) == "failed"
    return run


def test_a_failed_run_is_resumed_and_its_events_say_by_whom(
    trio, agent, provider_server, django_capture_on_commit_callbacks
):
    run = failed(trio, agent, provider_server, trio.bob)
    provider_server.script("openai", TextReply("Back."))
    with django_capture_on_commit_callbacks(execute=False) as sent:
        response = session(trio.bob).post(f"/api/v1/runs/{run.pk}/resume")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["id"], body["status"], body["error"]) == (run.pk, "queued", "")
    assert len(sent) == 2  # its event published, the run sent to the workers
    assert execute_run(run.pk) == "succeeded"

    events = session(trio.bob).get(f"/api/v1/runs/{run.pk}/events").json()["events"]
    types = [e["type"] for e in events]
    assert types[types.index("run.failed") + 1] == "run.resumed" and types[-1] == "run.completed"
    resumed = next(e for e in events if e["type"] == "run.resumed")["payload"]
    assert resumed["by"] == "bob" and "HTTP 500" in resumed["error"]
    assert session(trio.bob).get(f"/api/v1/runs/{run.pk}").json()["output"] == "Back."
    # In the audit log too: who, which run, when (read by an admin through the API).
    entries = session(trio.alice).get("/api/v1/audit-log?action=run.resumed").json()["results"]
    assert len(entries) == 1, entries
    entry = entries[0]
    assert (entry["actor_label"], entry["object_type"], entry["object_id"]) == (
        "bob", "agents.run", str(run.pk),
    )  # fmt: skip
    assert entry["at"] and entry["details"]["agent"] == agent.slug


def test_a_resume_with_an_api_key_is_in_the_audit_log_as_that_key(trio, agent, provider_server):
    _, secret = tenancy.api_key_create(tenant=trio.acme, name="ops", scopes=["read", "run"])
    keyed = APIClient()
    keyed.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    run = failed(trio, agent, provider_server, trio.alice)
    assert keyed.post(f"/api/v1/runs/{run.pk}/resume").status_code == 200
    entry = AuditEntry.objects.get(action="run.resumed")
    assert entry.api_key.name == "ops" and entry.actor_label.startswith("API key ops")
    assert entry.tenant_id == trio.acme.pk and entry.details["run"] == run.pk


def test_a_run_that_did_not_fail_is_a_409_saying_why(trio, agent, provider_server):
    provider_server.script("openai", TextReply("Fine."))
    run = run_start(tenant=trio.acme, agent=agent, input="hi", initiated_by=trio.alice,
                    enqueue=False)  # fmt: skip
    assert execute_run(run.pk) == "succeeded"
    response = session(trio.alice).post(f"/api/v1/runs/{run.pk}/resume")
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "run_not_resumable"
    assert error["message"] == "This run is succeeded: only a failed run can be resumed."
    assert not RunEvent.objects.filter(type="run.resumed").exists()


def test_who_may_not_resume_gets_403_or_404_and_nothing_changes(trio, agent, provider_server):
    run = failed(trio, agent, provider_server, trio.alice)
    # A member sees only their own runs: another's is a 404, as for cancel.
    assert session(trio.bob).post(f"/api/v1/runs/{run.pk}/resume").status_code == 404
    assert session(trio.charlie, "globex").post(f"/api/v1/runs/{run.pk}/resume").status_code == 404
    _, globex = tenancy.api_key_create(tenant=trio.globex, name="g", scopes=["read", "run"])
    theirs = APIClient()
    theirs.credentials(HTTP_AUTHORIZATION=f"Bearer {globex}")
    assert theirs.post(f"/api/v1/runs/{run.pk}/resume").status_code == 404
    _, read = tenancy.api_key_create(tenant=trio.acme, name="ro", scopes=["read"])
    reader = APIClient()
    reader.credentials(HTTP_AUTHORIZATION=f"Bearer {read}")  # sees every run (an owner's key)
    refused = reader.post(f"/api/v1/runs/{run.pk}/resume")
    assert refused.status_code == 403 and "'run' scope" in refused.json()["error"]["message"]
    # A member who started the run but may no longer use its agent: 403.
    bobs = failed(trio, agent, provider_server, trio.bob)
    agent.active = False
    agent.save()
    assert session(trio.bob).post(f"/api/v1/runs/{bobs.pk}/resume").status_code == 403
    assert Run.objects.filter(status="failed").count() == 2
    assert not RunEvent.objects.filter(type="run.resumed").exists()
    assert not AuditEntry.objects.filter(action="run.resumed").exists()


def test_a_bad_run_id_is_a_404(trio):
    for run_id in ("nope", "0", "99999999999999999999"):
        response = session(trio.alice).post(f"/api/v1/runs/{run_id}/resume")
        assert response.status_code == 404
