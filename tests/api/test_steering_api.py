"""REST while a conversation's answer works: queue (`/conversations/{id}/queue`), steer
(`/runs/{id}/steer`), take back; only the owner, clear 4xx for the rest, nothing changed."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agents.models import QueuedMessage, Run
from agents.runs import run_start
from agents.runs.engine import execute_run
from agents.services import conversation_save
from tenancy import services as tenancy
from tenancy.models import ApiKey
from tests.factories import login
from tests.fakes.provider_server import TextReply


def client_for(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


@pytest.fixture
def keys(trio):
    _, mine = tenancy.api_key_create(tenant=trio.acme, name="ci", scopes=["read", "run"])
    _, other = tenancy.api_key_create(tenant=trio.acme, name="other", scopes=["read", "run"])
    _, read = tenancy.api_key_create(tenant=trio.acme, name="ro", scopes=["read"])
    _, globex = tenancy.api_key_create(tenant=trio.globex, name="gx", scopes=["read", "run"])
    return {"mine": mine, "other": other, "read": read, "globex": globex}


@pytest.fixture
def working(trio, agent, keys):
    """A conversation of the `mine` key whose first answer is queued for a worker."""
    key = ApiKey.objects.get(tenant=trio.acme, name="ci")
    chat = conversation_save(tenant=trio.acme, changes={"agent": agent}, owner_api_key=key)
    run = run_start(tenant=trio.acme, agent=agent, input="One", conversation=chat, initiated_by=key)
    return chat, run


def test_a_queued_message_waits_and_starts_when_the_answer_ends(working, keys, provider_server):
    chat, run = working
    api = client_for(keys["mine"])
    answer = api.post(f"/api/v1/conversations/{chat.pk}/queue", {"input": "Two"}, format="json")
    assert answer.status_code == 201, answer.content
    queued = answer.json()
    assert (queued["status"], queued["kind"], queued["run"]) == ("waiting", "turn", run.pk)
    listed = api.get(f"/api/v1/conversations/{chat.pk}/queue").json()
    assert [q["content"] for q in listed] == ["Two"]
    provider_server.script("openai", TextReply("First."))
    assert execute_run(run.pk) == "succeeded"
    started = QueuedMessage.objects.get(pk=queued["id"]).started_run
    assert started.input == "Two" and started.conversation_id == chat.pk
    assert api.get(f"/api/v1/conversations/{chat.pk}/queue").json() == []


def test_a_steer_is_stored_and_a_finished_run_refuses_one(working, keys):
    _, run = working
    api = client_for(keys["mine"])
    answer = api.post(f"/api/v1/runs/{run.pk}/steer", {"input": "Be brief."}, format="json")
    assert answer.status_code == 201, answer.content
    assert (answer.json()["kind"], answer.json()["status"]) == ("steer", "waiting")
    cancelled = api.post(f"/api/v1/runs/{run.pk}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    late = api.post(f"/api/v1/runs/{run.pk}/steer", {"input": "Still?"}, format="json")
    assert late.status_code == 409 and late.json()["error"]["code"] == "run_finished"
    # The steer the loop never took became the next turn, which started.
    steer = QueuedMessage.objects.get(pk=answer.json()["id"])
    assert (steer.kind, steer.late, steer.status) == ("turn", True, "started")


def test_a_queued_message_is_taken_back_once(working, keys):
    chat, _ = working
    api = client_for(keys["mine"])
    queued = api.post(f"/api/v1/conversations/{chat.pk}/queue", {"input": "x"}, format="json")
    url = f"/api/v1/conversations/{chat.pk}/queue/{queued.json()['id']}"
    assert api.delete(url).status_code == 204
    assert api.delete(url).status_code == 404
    assert not QueuedMessage.objects.exists()


def test_others_get_404_viewers_403_and_bad_input_400_changing_nothing(trio, working, keys, client):
    chat, run = working
    queue = f"/api/v1/conversations/{chat.pk}/queue"
    steer = f"/api/v1/runs/{run.pk}/steer"
    for key in ("other", "globex"):  # another key of the tenant; another tenant's
        api = client_for(keys[key])
        assert api.post(queue, {"input": "x"}, format="json").status_code == 404
        assert api.get(queue).status_code == 404
        assert api.post(steer, {"input": "x"}, format="json").status_code == 404
    login(client, trio.bob, tenant=trio.acme)  # a member of the tenant, not the owner
    assert client.post(queue, {"input": "x"}, content_type="application/json").status_code == 404
    assert client.post(steer, {"input": "x"}, content_type="application/json").status_code == 404
    read_only = client_for(keys["read"])
    assert read_only.post(queue, {"input": "x"}, format="json").status_code == 403
    assert read_only.post(steer, {"input": "x"}, format="json").status_code == 403
    api = client_for(keys["mine"])
    for body in ({"input": ""}, {"input": "   "}, {"input": "x" * 100_001}, {}, {"input": None},
                 {"input": "a\x00b"}, {"input": "x", "extra": 1}):  # fmt: skip
        for url in (queue, steer):
            answer = api.post(url, body, format="json")
            assert answer.status_code == 400, (url, body, answer.content)
    assert (
        api.post(f"/api/v1/runs/{run.pk + 999}/steer", {"input": "x"}, format="json").status_code
        == 404
    )
    assert api.delete(f"{queue}/abc").status_code == 404
    # A run outside any conversation: there is no turn to steer.
    alone = run_start(
        tenant=trio.acme, agent=run.agent, input="x", initiated_by=run.initiated_by_api_key
    )
    assert (
        api.post(f"/api/v1/runs/{alone.pk}/steer", {"input": "x"}, format="json").status_code == 400
    )
    assert not QueuedMessage.objects.exists()
    assert Run.objects.filter(conversation=chat).count() == 1
