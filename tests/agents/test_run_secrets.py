"""The run's secrets are scrubbed from everything a run stores or shows (agents/runs/writer.py).

A remote agent server that echoes its bearer token, an HTTP tool's service that echoes
its credential header, a model that repeats a key: whatever comes back, the secret's
value is `[redacted]` in Run.output/error/state, RunEvent payloads, the assistant Message,
the REST answers and the SSE stream.
"""

from __future__ import annotations

import base64
import json
import re

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.test import AsyncClient

from agents.models import Agent, Conversation, Message, Run, RunEvent
from agents.runs import run_inline
from tests.api.test_resources import Api, key_for
from tests.api.test_sse import messages
from tests.factories import login, make_tool
from tests.fakes.provider_server import TextReply, ToolCall, ToolCallReply
from tests.fakes.remote_agent_server import RemoteAgentServer, call, response, tool_call
from tests.tools.local_server import LocalServer, Reply
from tests.tools.test_secret_forms import echoes, recoverable

TOKEN = "remote-ECHOED-token-42"
TOOL_SECRET = "tool-ECHOED-credential-43"
MASK = "[redacted]"


def stored_text(run: Run) -> str:
    """Every column and event a run stored, and its conversation's messages, as one text."""
    run = Run.objects.get(pk=run.pk)
    events = list(RunEvent.objects.filter(run=run).values_list("type", "payload"))
    parts = [run.output, run.error, run.state, run.structured_output, events]
    if run.conversation_id:
        parts.append(list(Message.objects.filter(conversation_id=run.conversation_id).values()))
    return json.dumps(parts, default=str)


def shown_text(client, tenant, run: Run) -> str:
    """The run, its events and its conversation's messages over REST, as alice (the owner)."""
    login(client, get_user_model().objects.get(username="alice"))
    api = Api(client, tenant_header=tenant.slug)
    api.get(f"/runs/{run.pk}")
    api.get(f"/runs/{run.pk}/events")
    if run.conversation_id:
        api.get(f"/conversations/{run.conversation_id}/messages")
    assert all('"error"' not in body[:12] for body in api.bodies), api.bodies
    return "".join(api.bodies)


def sse_text(tenant, run: Run) -> str:
    key = key_for(tenant, "read")

    async def read() -> str:
        response = await AsyncClient().get(
            f"/api/v1/runs/{run.pk}/events",
            headers={"Authorization": f"Bearer {key}", "Accept": "text/event-stream"},
        )
        assert response.status_code == 200
        return json.dumps([m.data async for m in messages(response.streaming_content)])

    return async_to_sync(read)()


@pytest.fixture
def echoing_remote_agent(trio, settings):
    """A remote agent whose server puts the Authorization header it got into its text,
    its state, a call's arguments and its answer."""
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]

    def echo(body: dict) -> dict:
        sent = server.received[-1].headers.get("authorization", "")
        if body["type"] == "query":
            arguments = {"expression": "2+2", "note": sent}
            return tool_call([call("c1", "calculator", arguments)], state={"seen": sent}, text=sent)
        return response(f"You sent me {sent}.")

    server = RemoteAgentServer(handler=echo, expect_token=TOKEN)
    agent = Agent(
        tenant=trio.acme, slug="far", name="Far", kind="remote", remote_url=server.url,
        remote_token=TOKEN, approval_policy="never",
    )  # fmt: skip
    agent.full_clean()
    agent.save()
    yield agent
    server.close()


def test_a_token_the_remote_server_echoes_is_stored_nowhere(client, trio, echoing_remote_agent):
    conversation = Conversation.objects.create(
        tenant=trio.acme, agent=echoing_remote_agent, owner_user=trio.alice
    )
    run = run_inline(
        tenant=trio.acme,
        agent=echoing_remote_agent,
        input="2+2?",
        conversation=conversation,
        initiated_by=trio.alice,
    )
    assert run.status == "succeeded", run.error
    assert run.output == f"You sent me Bearer {MASK}."
    assert Message.objects.get(run=run, role="assistant").content == run.output
    everything = stored_text(run)
    assert TOKEN not in everything and MASK in everything
    assert TOKEN not in shown_text(client, trio.acme, run)


@pytest.mark.django_db(transaction=True)
def test_nor_in_the_event_stream(trio, echoing_remote_agent):
    run = run_inline(tenant=trio.acme, agent=echoing_remote_agent, input="2+2?")
    streamed = sse_text(trio.acme, run)
    assert "You sent me" in streamed and TOKEN not in streamed


def test_a_credential_an_http_tool_echoes_and_a_model_repeats_is_stored_nowhere(
    client, trio, agent, connection, provider_server
):
    with LocalServer() as service:
        # The service echoes the credential header back (a debug answer).
        service.route("GET", "/whoami", Reply(json={"you_sent": TOOL_SECRET}))
        make_tool(
            trio.acme,
            "whoami",
            kind="http",
            description="Who am I?",
            input_schema={"type": "object", "properties": {}},
            config={"url": service.url + "/whoami", "auth": {"type": "header"}},
            secret=TOOL_SECRET,
        )
        provider_server.script(
            "openai",
            ToolCallReply([ToolCall("c1", "whoami", "{}")]),
            # A model repeating secrets it should never have seen (and the connection's key).
            TextReply(f"It said {TOOL_SECRET}; my key is {connection.api_key}."),
        )
        conversation = Conversation.objects.create(
            tenant=trio.acme, agent=agent, owner_user=trio.alice
        )
        run = run_inline(
            tenant=trio.acme,
            agent=agent,
            input="Who am I?",
            conversation=conversation,
            initiated_by=trio.alice,
        )
        assert service.requests[0].headers["x-api-key"] == TOOL_SECRET  # it was sent
    assert run.status == "succeeded", run.error
    assert run.output == f"It said {MASK}; my key is {MASK}."
    everything = stored_text(run) + shown_text(client, trio.acme, run)
    assert TOOL_SECRET not in everything and connection.api_key not in everything


ENCODED_SECRET = "Zq7-Xw93+vK/8mP=Lr tail"  # percent-encoding, base64 and hex all change it


def test_a_credential_the_service_echoes_transformed_reaches_neither_the_model_nor_a_record(
    client, trio, agent, connection, provider_server
):
    """A service answering with its Basic credential base64'd (alone and as `user:secret`,
    at each of base64's alignments), hex'd, percent-encoded, reversed...: the model's next
    request, the run's events and fields, its conversation and the REST answers show none
    of them — nor the forms a model repeats."""

    def echo(request) -> dict:
        sent = request.headers["authorization"]
        secret = base64.b64decode(sent.removeprefix("Basic ")).decode().partition(":")[2]
        return {"header": sent, "forms": echoes(secret)}

    with LocalServer() as service:
        service.route("GET", "/whoami", Reply(echo=echo))
        make_tool(
            trio.acme,
            "whoami",
            kind="http",
            description="Who am I?",
            input_schema={"type": "object", "properties": {}},
            config={"url": service.url + "/whoami", "auth": {"type": "basic", "username": "svc"}},
            secret=ENCODED_SECRET,
        )
        repeated = echoes(ENCODED_SECRET)
        provider_server.script(
            "openai",
            ToolCallReply([ToolCall("c1", "whoami", "{}")]),
            TextReply(f"It said {repeated['base64']} and {repeated['hex']}, {repeated['quote']}."),
        )
        conversation = Conversation.objects.create(
            tenant=trio.acme, agent=agent, owner_user=trio.alice
        )
        run = run_inline(
            tenant=trio.acme,
            agent=agent,
            input="Who am I?",
            conversation=conversation,
            initiated_by=trio.alice,
        )
    assert run.status == "succeeded", run.error
    # The model's second request carries the tool's answer, every form masked in it.
    [_, second] = provider_server.requests_to("/v1/chat/completions")
    [result] = [m for m in second.body["messages"] if m["role"] == "tool"]
    assert result["content"].count(MASK) >= len(repeated) + 1
    seen_by_model = json.dumps(second.body, ensure_ascii=False)
    assert recoverable(ENCODED_SECRET, seen_by_model, window=5) == set()
    # (base64 leaves a character or two of padding: bits of the last byte at most)
    assert re.fullmatch(
        rf"It said {re.escape(MASK)}\S{{0,3}} and {re.escape(MASK)}, {re.escape(MASK)}\.",
        run.output,
    )
    recorded = stored_text(run) + shown_text(client, trio.acme, run)
    assert MASK in recorded
    assert recoverable(ENCODED_SECRET, recorded, window=5) == set()
