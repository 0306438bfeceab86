"""Publishing only what passes, as in production: a change proposed over REST is evaluated
by a real Celery worker (the step task and the case runs on the batch queue), published
when it passes; when it fails, chats during and after its evaluation are answered by the
live version (each request the fake model received says which instructions it was given)."""

from __future__ import annotations

import json
import time

import pytest

from agents.evaluations import case_save, dataset_save
from agents.models import Agent, AgentDraft, Run
from agents.runs import run_start
from agents.services import agent_save
from tests.api.test_resources import as_key
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)

LIVE = "Be brief."
DRAFTED = "Answer like a pirate."
QUESTION = "capital of France?"


@pytest.fixture
def gated(trio, agent) -> Agent:
    dataset = dataset_save(tenant=trio.acme, changes={"name": "capitals"})
    case_save(
        tenant=trio.acme,
        dataset=dataset,
        changes={"input": QUESTION, "expect": {"contains": "Paris"}},
    )
    return agent_save(tenant=trio.acme, agent=agent, changes={"required_evaluation": dataset})


def decided(draft_id: int) -> AgentDraft:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        draft = AgentDraft.objects.get(pk=draft_id)
        if draft.status != "evaluating":
            return draft
        time.sleep(0.2)
    return draft


def finished(run: Run) -> Run:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status not in ("queued", "running"):
            return run
        time.sleep(0.2)
    return run


def sent(provider_server, text: str) -> list[str]:
    """The bodies of the model requests whose messages hold `text`."""
    bodies = [json.dumps(r.body) for r in provider_server.received]
    return [body for body in bodies if text in body]


def test_a_change_proposed_over_rest_is_published_by_the_worker_when_it_passes(
    client, trio, gated, provider_server, celery_worker_process
):
    provider_server.script("openai", TextReply("Arr, Paris it be."))
    api = as_key(client, trio.acme, "read", "config")
    response = api.patch("/agents/assistant", {"instructions": DRAFTED})
    assert response.status_code == 200, response.content
    draft = decided(response.json()["draft"]["id"])
    assert draft.status == "published" and draft.score == 1.0
    assert Agent.objects.get(pk=gated.pk).instructions == DRAFTED
    [evaluated] = sent(provider_server, QUESTION)
    assert DRAFTED in evaluated
    assert api.get("/agents/assistant").json()["instructions"] == DRAFTED


def test_a_failing_draft_never_serves_a_chat_during_or_after_its_evaluation(
    client, trio, gated, provider_server, celery_worker_process
):
    provider_server.script("openai", *[TextReply("It is Lyon.") for _ in range(3)])
    api = as_key(client, trio.acme, "read", "config")
    draft_id = api.patch("/agents/assistant", {"instructions": DRAFTED}).json()["draft"]["id"]
    during = run_start(tenant=trio.acme, agent=gated, input="hello during", initiated_by=trio.alice)
    draft = decided(draft_id)
    assert draft.status == "failed" and draft.score == 0.0
    after = run_start(
        tenant=trio.acme,
        agent=Agent.objects.get(pk=gated.pk),
        input="hello after",
        initiated_by=trio.alice,
    )
    assert finished(during).status == "succeeded" and finished(after).status == "succeeded"
    assert Agent.objects.get(pk=gated.pk).instructions == LIVE
    for chat in ("hello during", "hello after"):
        [body] = sent(provider_server, chat)
        assert LIVE in body and DRAFTED not in body
    [evaluated] = sent(provider_server, QUESTION)
    assert DRAFTED in evaluated
    assert during.agent_draft_id is None and Run.objects.get(pk=after.pk).agent_draft_id is None
