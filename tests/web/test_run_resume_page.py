"""The run page's Resume (agentplatform/web/activity/resume.py): shown only on a failed
run the viewer may resume; pressing it queues the run, whose timeline then shows the
failure, "Resumed by <name>" and what followed; refusals say why (409) or are 403/404."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import Run, RunEvent
from agents.runs import run_start
from agents.runs.engine import execute_run
from tenancy.models import AuditEntry
from tests.factories import login
from tests.fakes.provider_server import ErrorReply, TextReply

pytestmark = pytest.mark.django_db

RESUME = 'action="/t/acme/runs/{}/resume/"'


def failed(trio, agent, provider_server, by) -> Run:
    provider_server.script("openai", ErrorReply(500, "down"))
    run = run_start(tenant=trio.acme, agent=agent, input="hi", initiated_by=by, enqueue=False)
    assert execute_run(run.pk) == "failed"
    return run


def test_the_starter_resumes_a_failed_run_and_its_timeline_says_so(trio, agent, provider_server):
    run = failed(trio, agent, provider_server, trio.bob)
    bob = login(Client(), trio.bob)
    page = bob.get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert RESUME.format(run.pk) in page and "HTTP 500" in page

    provider_server.script("openai", TextReply("Back."))
    pressed = bob.post(f"/t/acme/runs/{run.pk}/resume/")
    assert pressed.status_code == 302 and pressed["Location"] == f"/t/acme/runs/{run.pk}/"
    assert Run.objects.get(pk=run.pk).status == "queued"
    assert execute_run(run.pk) == "succeeded"
    page = bob.get(f"/t/acme/runs/{run.pk}/").content.decode()
    failed_at, resumed_at = page.index("Run failed"), page.index("Resumed by bob")
    assert failed_at < resumed_at < page.index("Run finished")
    assert RESUME.format(run.pk) not in page  # succeeded now
    assert "Back." in page
    entry = AuditEntry.objects.get(action="run.resumed")  # who, which run, when
    assert (entry.user, entry.object_id, entry.details["run"]) == (trio.bob, str(run.pk), run.pk)
    assert entry.at is not None and entry.ip == "127.0.0.1"


def test_the_button_is_not_shown_to_who_may_not_resume_and_a_post_is_refused(
    trio, agent, provider_server
):
    run = failed(trio, agent, provider_server, trio.bob)
    agent.active = False  # bob may no longer use the agent; alice (an owner) neither
    agent.save()
    bob = login(Client(), trio.bob)
    assert RESUME.format(run.pk) not in bob.get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert bob.post(f"/t/acme/runs/{run.pk}/resume/").status_code == 403
    outsider = login(Client(), trio.charlie)
    assert outsider.post(f"/t/acme/runs/{run.pk}/resume/").status_code == 404
    assert Run.objects.get(pk=run.pk).status == "failed"
    assert not RunEvent.objects.filter(type="run.resumed").exists()
    assert not AuditEntry.objects.filter(action="run.resumed").exists()


def test_a_second_press_is_a_409_saying_why(trio, agent, provider_server):
    run = failed(trio, agent, provider_server, trio.alice)
    alice = login(Client(), trio.alice)
    assert alice.post(f"/t/acme/runs/{run.pk}/resume/").status_code == 302
    again = alice.post(f"/t/acme/runs/{run.pk}/resume/")
    assert again.status_code == 409
    assert "Not resumed: This run is queued: only a failed run can be resumed." in (
        again.content.decode()
    )
    assert RunEvent.objects.filter(run=run, type="run.resumed").count() == 1
    assert AuditEntry.objects.filter(action="run.resumed").count() == 1  # the refusal: none


def test_a_resume_past_the_members_request_budget_is_a_429_saying_when_to_retry(
    trio, agent, provider_server, rates
):
    run = failed(trio, agent, provider_server, trio.bob)
    rates("0/min", "100/min")
    refused = login(Client(), trio.bob).post(f"/t/acme/runs/{run.pk}/resume/")
    assert refused.status_code == 429
    assert "Not resumed: Rate limit reached; retry in " in refused.content.decode()
    assert Run.objects.get(pk=run.pk).status == "failed"
