"""The OpenAI-compatible endpoint, driven by the real `openai` SDK against a uvicorn server
(a subprocess on the test database) whose runs a real Celery worker executes."""

# Fixtures imported from other modules are used as parameters by name:

from __future__ import annotations

import asyncio
import json

import httpx2
import openai
import pytest
from django.test import AsyncClient
from django.urls import reverse

from agents.models import Approval, Run, RunEvent
from tests.api.conftest import sdk
from tests.conftest import PAY_SECRET
from tests.factories import make_agent, make_crew
from tests.fakes.provider_server import ErrorReply, TextReply, ToolCall, ToolCallReply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def client(asgi_server, keys, celery_worker_process) -> openai.OpenAI:
    """The real `openai` SDK on the server's `/v1`, with the `run` key (a worker running)."""
    return sdk(asgi_server, keys["run"])


def run_of(completion_id: str) -> Run:
    assert completion_id.startswith("chatcmpl-")
    return Run.objects.get(pk=int(completion_id.removeprefix("chatcmpl-")))


# -- models ------------------------------------------------------------------------------
def test_models_lists_the_tenants_active_agents_and_crews(trio, agent, asgi_server, keys):
    make_crew(trio.acme, "desk", [agent])
    make_agent(trio.acme, "retired", name="Old", active=False)
    make_agent(trio.globex, "spy", name="Globex's")
    client = sdk(asgi_server, keys["read"])  # listing needs only `read`

    models = client.models.list()
    assert [(m.id, m.object, m.owned_by) for m in models.data] == [
        ("assistant", "model", "acme"),
        ("desk", "model", "acme"),
        ("local-openai/gpt-test", "model", "acme"),  # a gateway model: the connection's
        ("static", "model", "agentplatform"),  # the platform's embedding models
        ("local", "model", "agentplatform"),
    ]
    assert all(isinstance(m.created, int) and m.created > 0 for m in models.data)
    assert client.models.retrieve("desk").id == "desk"
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("spy")
    assert missing.value.code == "model_not_found"


# -- chat completions ---------------------------------------------------------------------
SCRIPTS = {
    "text": (TextReply("Hello there.", input_tokens=12, output_tokens=3),),
    "tool": (
        ToolCallReply(
            [ToolCall("c1", "calculator", '{"expression": "6*7"}')],
            input_tokens=10,
            output_tokens=5,
        ),
        TextReply("It is 42.", input_tokens=20, output_tokens=4),
    ),
}
ANSWERS = {"text": ("Hello there.", 12, 3), "tool": ("It is 42.", 30, 9)}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.mark.parametrize("scenario", ["text", "tool"])
def test_a_non_streaming_chat_completion_runs_the_agent(
    trio, agent, client, provider_server, scenario
):
    provider_server.script("openai", *SCRIPTS[scenario])
    completion = client.chat.completions.create(
        model="assistant", messages=[{"role": "user", "content": "What is 6*7?"}]
    )
    text, prompt_tokens, completion_tokens = ANSWERS[scenario]
    assert completion.object == "chat.completion" and completion.model == "assistant"
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content == text
    assert completion.choices[0].finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (
        prompt_tokens,
        completion_tokens,
    )
    assert completion.usage.total_tokens == prompt_tokens + completion_tokens
    run = run_of(completion.id)
    assert run.status == "succeeded" and run.input == "What is 6*7?"
    assert run.initiated_by_api_key.name == "chat"
    tools = RunEvent.objects.filter(run=run, type="tool.completed")
    if scenario == "tool":  # executed server-side, by the platform
        assert tools.get().payload["result"] == {"result": 42}
    else:
        assert not tools.exists()


@pytest.mark.parametrize("scenario", ["text", "tool"])
def test_a_streaming_chat_completion_streams_chunks_then_usage(
    trio, agent, client, provider_server, scenario
):
    provider_server.script("openai", *SCRIPTS[scenario])
    stream = client.chat.completions.create(
        model="assistant",
        messages=[{"role": "user", "content": "What is 6*7?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text, prompt_tokens, completion_tokens = ANSWERS[scenario]
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    *chunks, last = chunks  # as OpenAI: the usage comes alone, with no choices
    assert last.choices == [] and all(c.usage is None for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text
    assert [c.choices[0].finish_reason for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (
        prompt_tokens,
        completion_tokens,
    )
    assert run_of(chunks[0].id).status == "succeeded"


def test_the_messages_reach_the_agent_as_a_conversation(trio, agent, client, provider_server):
    """System and developer messages join the agent's instructions; earlier turns stay turns."""
    completion = client.chat.completions.create(
        model="assistant",
        messages=[
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": "Enchantée, Ada."},
            {"role": "developer", "content": "Keep it short."},
            {"role": "user", "content": [{"type": "text", "text": "What is my name?"}]},
        ],
    )
    run = run_of(completion.id)
    assert run.input == "What is my name?"
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"]
    assert sent[0]["role"] == "system"
    assert sent[0]["content"].startswith("Be brief.\n\nAnswer in French.\n\nKeep it short.")
    assert sent[1:] == [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Enchantée, Ada."},
        {"role": "user", "content": "What is my name?"},
    ]


def test_a_crew_takes_the_conversation_folded_into_its_task(trio, agent, client, provider_server):
    make_crew(trio.acme, "desk", [agent], mode="sequential")
    completion = client.chat.completions.create(
        model="desk",
        messages=[
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": "Enchantée, Ada."},
            {"role": "user", "content": "What is my name?"},
        ],
    )
    assert run_of(completion.id).input == "What is my name?"
    sent = provider_server.requests_to("/v1/chat/completions")[-1].body["messages"]
    assert sent[-1]["content"] == (
        "Earlier in this conversation:\n"
        "system: Answer in French.\n"
        "user: My name is Ada.\n"
        "assistant: Enchantée, Ada.\n\n"
        "The latest message, to answer now:\n"
        "What is my name?"
    )
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="desk", messages=[{"role": "user", "content": "hi"}], tools=[WEATHER]
        )
    assert "A crew takes text turns only" in refused.value.message


def test_a_crew_answers_as_a_model_with_its_last_members_output(
    trio, agent, client, provider_server
):
    writer = make_agent(trio.acme, "writer")
    crew = make_crew(trio.acme, "desk", [agent, writer], mode="sequential")
    provider_server.script(
        "openai",
        TextReply("Notes: boiling is 100C.", input_tokens=7, output_tokens=2),
        TextReply("Water boils at 100C.", input_tokens=9, output_tokens=3),
    )
    chunks = list(
        client.chat.completions.create(
            model="desk",
            messages=[{"role": "user", "content": "Boiling?"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Water boils at 100C."
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (16, 5)
    run = run_of(chunks[0].id)
    assert run.crew == crew and run.children.count() == 2


@pytest.mark.parametrize("stream", [False, True])
def test_a_run_that_needs_approval_ends_with_the_run_and_where_to_decide(
    trio, agent, client, provider_server, transfer, stream
):
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("t1", "transfer", '{"amount": 500, "to": "bob"}')]),
    )
    messages = [{"role": "user", "content": "Pay bob 500."}]
    if stream:
        chunks = list(
            client.chat.completions.create(model="assistant", messages=messages, stream=True)
        )
        content = "".join(c.choices[0].delta.content or "" for c in chunks)
        completion_id, finish = chunks[0].id, chunks[-1].choices[0].finish_reason
    else:
        completion = client.chat.completions.create(model="assistant", messages=messages)
        content = completion.choices[0].message.content
        completion_id, finish = completion.id, completion.choices[0].finish_reason
    run = run_of(completion_id)
    approval = Approval.objects.get(run=run)
    assert run.status == "awaiting_approval" and finish == "stop"
    assert f"Run {run.pk} is waiting for a human to approve" in content
    assert f"/api/v1/runs/{run.pk}/approvals/{approval.pk}" in content
    assert "`transfer`" in content and '"amount": 500' in content
    assert transfer.requests == []


def test_the_approval_note_shows_the_exact_request_with_its_credential_masked(
    trio, agent, client, provider_server, pay
):
    provider_server.script(
        "openai", ToolCallReply([ToolCall("p1", "pay", '{"amount": 5, "to": "bob"}')])
    )
    completion = client.chat.completions.create(
        model="assistant", messages=[{"role": "user", "content": "Pay bob 5."}]
    )
    content = completion.choices[0].message.content
    assert "Approving sends exactly this request" in content
    assert "POST " in content and "/payments/bob" in content and "Bearer ***" in content
    assert PAY_SECRET not in content and pay.requests == []


def test_errors_come_in_openais_shape_and_the_sdks_exceptions(
    trio, agent, asgi_server, keys, provider_server
):
    hello = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.AuthenticationError) as bad_key:
        sdk(asgi_server, "ap_000000000000_nope").chat.completions.create(
            model="assistant", messages=hello
        )
    assert bad_key.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        sdk(asgi_server, "ap_000000000000_nope").models.list()
    with pytest.raises(openai.PermissionDeniedError):  # `read` cannot run agents
        sdk(asgi_server, keys["read"]).chat.completions.create(model="assistant", messages=hello)
    client = sdk(asgi_server, keys["run"])
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="gpt-4o", messages=hello)
    assert unknown.value.code == "model_not_found"
    assert unknown.value.body == {
        "message": "The model `gpt-4o` does not exist or you do not have access to it.",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    with pytest.raises(openai.BadRequestError) as no_user:
        client.chat.completions.create(
            model="assistant", messages=[{"role": "system", "content": "x"}]
        )
    assert no_user.value.param == "messages"
    raw = httpx2.post(
        f"{asgi_server}/v1/chat/completions",
        content=b"{not json",
        headers={"Authorization": f"Bearer {keys['run']}"},
    )
    assert raw.status_code == 400 and raw.json()["error"]["type"] == "invalid_request_error"
    raw = httpx2.get(f"{asgi_server}/v1/batches")  # (an endpoint the platform has not)
    assert raw.status_code == 404 and set(raw.json()["error"]) == {
        "message",
        "type",
        "param",
        "code",
    }
    assert Run.objects.count() == 0


def test_a_failed_run_is_an_error_that_is_not_retried(
    trio, agent, asgi_server, keys, provider_server, celery_worker_process
):
    provider_server.script("openai", ErrorReply(400, "bad request"), ErrorReply(400, "bad"))
    client = sdk(asgi_server, keys["run"])
    hello = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.InternalServerError) as failed:
        client.chat.completions.create(model="assistant", messages=hello)
    assert failed.value.code == "run_failed"
    assert failed.value.response.headers["x-should-retry"] == "false"
    run = Run.objects.get(pk=int(failed.value.response.headers["x-run-id"]))
    assert run.status == "failed" and f"Run {run.pk} failed" in failed.value.message
    with pytest.raises(openai.APIError) as streamed:
        list(client.chat.completions.create(model="assistant", messages=hello, stream=True))
    assert "failed" in streamed.value.message


def test_throttled_requests_get_429_with_retry_after(trio, agent, keys, monkeypatch):
    from tenancy.request_budgets import ApiKeyRateThrottle

    monkeypatch.setattr(
        ApiKeyRateThrottle, "THROTTLE_RATES", {"api_key": "2/min", "tenant": "100/min"}
    )

    async def three() -> list:
        auth = {"Authorization": f"Bearer {keys['read']}"}
        return [await AsyncClient().get("/v1/models", headers=auth) for _ in range(3)]

    responses = asyncio.run(three())
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert int(responses[2]["Retry-After"]) > 0
    assert responses[2].json()["error"]["code"] == "rate_limit_exceeded"


# -- secrets -------------------------------------------------------------------------------
def test_no_response_body_contains_a_secret(
    trio, agent, asgi_server, keys, provider_server, celery_worker_process
):
    secrets = [*keys.values(), "sk-test-key"]
    provider_server.script(
        "openai",
        ToolCallReply([ToolCall("c1", "calculator", '{"expression": "1+1"}')]),
        TextReply("Two."),
        TextReply("Two again."),
        ErrorReply(401, "Incorrect API key provided: sk-test-key"),  # a provider echoing it
    )
    auth = {"Authorization": f"Bearer {keys['run']}"}
    chat = {"model": "assistant", "messages": [{"role": "user", "content": "1+1?"}]}
    bodies = []
    with httpx2.Client(base_url=asgi_server, headers=auth, timeout=20) as http:
        bodies.append(http.get("/v1/models").text)
        answer = http.post("/v1/chat/completions", json=chat)
        bodies.append(answer.text)
        streamed = http.post("/v1/chat/completions", json={**chat, "stream": True})
        bodies.append(streamed.text)
        assert streamed.text.rstrip().endswith("data: [DONE]")
        failed = http.post("/v1/chat/completions", json=chat)
        assert failed.status_code == 500 and "[redacted]" in failed.text
        bodies.append(failed.text)
        bodies.append(http.get(f"/api/v1/runs/{failed.headers['X-Run-Id']}").text)
        run_id = answer.headers["X-Run-Id"]
        for path in ("/api/v1/runs", f"/api/v1/runs/{run_id}", f"/api/v1/runs/{run_id}/events"):
            bodies.append(http.get(path).text)
        sse = http.get(f"/api/v1/runs/{run_id}/events", headers={"Accept": "text/event-stream"})
        bodies.append(sse.text)
    assert json.loads(bodies[1])["choices"][0]["message"]["content"] == "Two."
    assert "event: run.completed" in bodies[-1]
    for body in bodies:
        for secret in secrets:
            assert secret not in body


def test_v1_runs_behind_its_own_middleware_security_headers_no_session_host_checked(
    trio, agent, asgi_server, keys
):
    """/v1 is served by a handler with API_MIDDLEWARE: the security headers and the Host check
    stay, the pages' session cookie and HTML policy do not come along."""
    auth = {"Authorization": f"Bearer {keys['read']}"}
    response = httpx2.get(f"{asgi_server}/v1/models", headers=auth, timeout=20)
    assert response.status_code == 200
    assert response.headers["x-content-type-options"] == "nosniff"
    assert "referrer-policy" in response.headers
    assert "set-cookie" not in response.headers
    assert "content-security-policy" not in response.headers
    runs_before = Run.objects.count()
    bad_host = {**auth, "Host": "evil.example"}
    body = {"model": "assistant", "messages": [{"role": "user", "content": "hi"}]}
    refused = httpx2.post(
        f"{asgi_server}/v1/chat/completions", headers=bad_host, json=body, timeout=20
    )
    assert refused.status_code == 400
    assert Run.objects.count() == runs_before  # nothing started
    page = httpx2.get(f"{asgi_server}{reverse('login')}", timeout=20)  # the pages: unchanged
    assert page.status_code == 200 and "content-security-policy" in page.headers
