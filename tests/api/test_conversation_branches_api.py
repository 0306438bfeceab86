"""A conversation's branches and search over REST: edit (a new version and its run), fork,
branches, switch, messages of one branch, search; the run records the message it answered;
bad input is a clear 4xx and changes nothing; other users' and tenants' conversations 404."""

from __future__ import annotations

import pytest

from agents.models import Conversation, Message, Run
from agents.runs import run_start
from agents.runs.engine import execute_run
from agents.services import conversation_save
from tests.api.test_resources import Api, as_key, assert_error
from tests.factories import login
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat(trio, agent) -> Conversation:
    return conversation_save(
        tenant=trio.acme, changes={"agent": agent, "title": "Trips"}, owner_user=trio.bob
    )


def turn(trio, chat, provider_server, text: str, answer: str) -> Run:
    run = run_start(
        tenant=trio.acme, agent=chat.agent, input=text, conversation=chat, initiated_by=trio.bob
    )
    provider_server.script("openai", TextReply(answer))
    assert execute_run(run.pk) == "succeeded"
    return run


def as_user(client, user, tenant) -> Api:
    return Api(login(client, user, tenant=tenant))


def everything() -> tuple:
    return (
        list(Message.objects.order_by("id").values_list("id", "parent", "content")),
        list(Conversation.objects.order_by("id").values_list("id", "leaf", "title")),
        Run.objects.count(),
    )


def test_edit_switch_fork_and_search_over_rest(client, trio, chat, provider_server):
    first = turn(trio, chat, provider_server, "Plan a trip to Lisbon", "Sure: when?")
    turn(trio, chat, provider_server, "In May", "May is lovely.")
    api = as_user(client, trio.bob, trio.acme)
    base = f"/conversations/{chat.pk}"

    edited = api.post(f"{base}/edit", {"message": first.in_reply_to_id, "input": "Plan Porto"})
    assert edited.status_code == 201, edited.content
    run = edited.json()
    assert run["status"] == "queued" and run["input"] == "Plan Porto"
    new_message = Message.objects.get(pk=run["in_reply_to"])
    assert new_message.content == "Plan Porto" and new_message.parent_id is None
    assert api.get(f"/runs/{run['id']}").json()["in_reply_to"] == new_message.pk
    assert api.get(base).json()["leaf"] == new_message.pk

    branches = api.get(f"{base}/branches").json()
    assert [(b["preview"], b["current"]) for b in branches] == [
        ("May is lovely.", False), ("Plan Porto", True)
    ]  # fmt: skip
    old_tip = branches[0]["tip"]
    switched = api.post(f"{base}/switch", {"message": first.in_reply_to_id})
    assert switched.status_code == 200 and switched.json()["leaf"] == old_tip
    shown = api.get(f"{base}/messages", {"tip": old_tip}).json()["results"]
    assert [m["content"] for m in shown] == [
        "Plan a trip to Lisbon", "Sure: when?", "In May", "May is lovely."
    ]  # fmt: skip
    assert shown[1]["parent"] == shown[0]["id"]
    assert len(api.get(f"{base}/messages").json()["results"]) == 5  # every branch

    fork = api.post(f"{base}/fork", {"message": shown[1]["id"], "title": "Lisbon, again"})
    assert fork.status_code == 201, fork.content
    assert fork.json()["title"] == "Lisbon, again" and fork.json()["agent"] == chat.agent.slug
    fork_id = fork.json()["id"]
    forked = api.get(f"/conversations/{fork_id}/messages").json()["results"]
    assert [m["content"] for m in forked] == ["Plan a trip to Lisbon", "Sure: when?"]

    hits = api.get("/conversations/search", {"q": "lisbon"}).json()
    assert {h["conversation"] for h in hits} == {chat.pk, fork_id}
    assert all("<mark>Lisbon</mark>" in h["snippet"] for h in hits)
    assert api.get("/conversations/search", {"q": "lisbon", "limit": 1}).json()[0] in hits


def test_bad_input_is_a_clear_4xx_and_changes_nothing(client, trio, chat, provider_server, agent):
    first = turn(trio, chat, provider_server, "Hello", "Hi.")
    other = conversation_save(
        tenant=trio.acme, changes={"agent": agent, "title": "Other"}, owner_user=trio.bob
    )
    elsewhere = turn(trio, other, provider_server, "Elsewhere", "Yes.")
    answer = Message.objects.get(conversation=chat, role="assistant")
    base = f"/conversations/{chat.pk}"
    bob = as_user(client, trio.bob, trio.acme)
    before = everything()

    edit = f"{base}/edit"
    refused = assert_error(bob.post(edit, {"message": answer.pk, "input": "x"}), 400)
    assert "Only your own messages can be edited." in str(refused["details"])
    assert_error(bob.post(edit, {"message": elsewhere.in_reply_to_id, "input": "x"}), 404)
    assert_error(bob.post(edit, {"message": 10**12, "input": "x"}), 404)
    assert_error(bob.post(edit, {"message": first.in_reply_to_id, "input": ""}), 400)
    assert_error(bob.post(edit, {"message": first.in_reply_to_id, "input": "   "}), 400)
    assert_error(bob.post(edit, {"message": first.in_reply_to_id, "input": "x" * 100_001}), 400)
    assert_error(bob.post(edit, {"message": first.in_reply_to_id, "input": "a\x00b"}), 400)
    assert_error(bob.post(edit, {"message": "one", "input": "x"}), 400)
    assert_error(bob.post(edit, {"message": first.in_reply_to_id, "input": "x", "x": 1}), 400)
    assert_error(bob.post(f"{base}/fork", {"message": 10**12}), 404)
    assert_error(bob.post(f"{base}/fork", {"message": elsewhere.in_reply_to_id}), 404)
    assert_error(bob.post(f"{base}/fork", {"message": answer.pk, "title": "x" * 201}), 400)
    assert_error(bob.post(f"{base}/switch", {"message": elsewhere.in_reply_to_id}), 404)
    assert_error(bob.get(f"{base}/messages", {"tip": elsewhere.in_reply_to_id}), 404)
    assert_error(bob.get("/conversations/search"), 400)
    assert_error(bob.get("/conversations/search", {"q": "x", "limit": 0}), 400)
    assert_error(bob.get("/conversations/search", {"q": "x" * 201}), 400)
    assert everything() == before

    # Another user of the tenant (its owner, even) and another tenant: 404, nothing found.
    client.logout()
    alice = as_user(client, trio.alice, trio.acme)
    for response in (
        alice.post(edit, {"message": first.in_reply_to_id, "input": "mine now"}),
        alice.post(f"{base}/fork", {"message": answer.pk}),
        alice.post(f"{base}/switch", {"message": answer.pk}),
        alice.get(f"{base}/branches"),
    ):
        assert_error(response, 404)
    assert alice.get("/conversations/search", {"q": "hello"}).json() == []
    client.logout()
    charlie = as_user(client, trio.charlie, trio.globex)
    assert_error(charlie.post(edit, {"message": first.in_reply_to_id, "input": "x"}), 404)
    assert charlie.get("/conversations/search", {"q": "hello"}).json() == []
    key = as_key(client, trio.acme, "read", "run")  # a key owns no conversation of bob's
    assert_error(key.post(edit, {"message": first.in_reply_to_id, "input": "x"}), 404)
    assert everything() == before

    # While an answer runs: 409, as a new turn would be.
    client.logout()
    bob = as_user(client, trio.bob, trio.acme)
    run_start(tenant=trio.acme, agent=agent, input="Long", conversation=chat, initiated_by=trio.bob)
    busy = everything()
    refused = bob.post(edit, {"message": first.in_reply_to_id, "input": "x"})
    assert assert_error(refused, 409, "conversation_busy")
    assert everything() == busy


def test_editing_needs_the_run_scope(client, trio, agent):
    writer = as_key(client, trio.acme, "read", "write")  # may keep conversations, not run
    conversation = writer.post("/conversations", {"agent": agent.slug}).json()["id"]
    message = Message.objects.create(
        tenant=trio.acme, conversation_id=conversation, role="user", content="hi"
    )
    assert_error(
        writer.post(f"/conversations/{conversation}/edit", {"message": message.pk, "input": "x"}),
        403,
    )
    fork = writer.post(f"/conversations/{conversation}/fork", {"message": message.pk})
    assert fork.status_code == 201  # a fork starts no run
    assert Run.objects.count() == 0
