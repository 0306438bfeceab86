"""Both adapters through the real SDKs over real HTTP to the local provider server."""

from __future__ import annotations

import asyncio
import time

import pytest

from providers.runtime.anthropic_adapter import AnthropicAdapter
from providers.runtime.errors import (
    AuthenticationFailed,
    BadRequest,
    ContextTooLong,
    ModelBehaviorError,
    ProviderError,
    ProviderUnavailable,
    RateLimited,
    Timeout,
)
from providers.runtime.openai_adapter import OpenAIAdapter
from providers.runtime.retry import RetryPolicy
from providers.runtime.types import (
    AssistantMessage,
    Done,
    Image,
    ModelRequest,
    TextDelta,
    ToolCallEvent,
    ToolResultMessage,
    UsageEvent,
    UserMessage,
)
from tests.fakes.provider_server import ErrorReply, TextReply, ToolCallReply
from tests.fakes.provider_server import ToolCall as WireCall
from tools.runtime.builtins import BUILTINS
from tools.runtime.tool import ToolCall

KEYS = {"anthropic": "sk-ant-api03-SECRETSECRET", "openai": "sk-proj-SECRETSECRET"}
FAST_RETRY = RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=2)


def adapter(server, api: str, **kwargs):
    kwargs.setdefault("retry", FAST_RETRY)
    if api == "anthropic":
        return AnthropicAdapter(api_key=KEYS[api], base_url=server.anthropic_base_url, **kwargs)
    return OpenAIAdapter(api_key=KEYS[api], base_url=server.openai_base_url, **kwargs)


def request(**kwargs) -> ModelRequest:
    values = {
        "model": "test-model",
        "system": "Be brief.",
        "messages": [UserMessage("What is 2+2?")],
        "tools": list(BUILTINS),
        "max_tokens": 100,
    }
    values.update(kwargs)
    return ModelRequest(**values)


def run(coro):
    return asyncio.run(coro)


async def collect(stream) -> list:
    return [event async for event in stream]


both = pytest.mark.parametrize("api", ["anthropic", "openai"])


@both
def test_plain_text_with_usage_and_resolved_model(provider_server, api):
    provider_server.script(api, TextReply("Four.", input_tokens=12, output_tokens=3))
    response = run(adapter(provider_server, api).complete(request()))
    assert response.text == "Four." and response.tool_calls == ()
    assert response.stop_reason == "end"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 3)
    assert response.model == "test-model-20250101"


@both
def test_one_tool_call(provider_server, api):
    provider_server.script(
        api, ToolCallReply([WireCall("call_1", "calculator", '{"expression": "2+2"}')])
    )
    response = run(adapter(provider_server, api).complete(request()))
    assert response.tool_calls == (ToolCall("call_1", "calculator", {"expression": "2+2"}),)
    assert response.stop_reason == "tool_calls"


@both
def test_parallel_tool_calls_with_text(provider_server, api):
    calls = [
        WireCall("c1", "calculator", '{"expression": "1+1"}'),
        WireCall("c2", "current_time", '{"timezone": "UTC"}'),
    ]
    provider_server.script(api, ToolCallReply(calls, text="Let me check."))
    response = run(adapter(provider_server, api).complete(request()))
    assert response.text == "Let me check."
    assert [c.name for c in response.tool_calls] == ["calculator", "current_time"]
    assert response.tool_calls[1].arguments == {"timezone": "UTC"}


CONVERSATION = [
    UserMessage("What is 2+2 and the time?"),
    AssistantMessage(
        text="Checking.",
        tool_calls=(
            ToolCall("c1", "calculator", {"expression": "2+2"}),
            ToolCall("c2", "current_time", {}),
        ),
    ),
    ToolResultMessage("c1", "calculator", '{"result": 4}'),
    ToolResultMessage("c2", "current_time", "unknown time zone", is_error=True),
]


def test_anthropic_gets_tool_results_as_tool_result_blocks_in_one_user_turn(provider_server):
    run(adapter(provider_server, "anthropic").complete(request(messages=CONVERSATION)))
    body = provider_server.requests_to("/v1/messages")[0].body
    assert body["system"] == "Be brief."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is 2+2 and the time?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "c1",
                    "name": "calculator",
                    "input": {"expression": "2+2"},
                },
                {"type": "tool_use", "id": "c2", "name": "current_time", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": '{"result": 4}'},
                {
                    "type": "tool_result",
                    "tool_use_id": "c2",
                    "content": "unknown time zone",
                    "is_error": True,
                },
            ],
        },
    ]
    assert body["tools"][0] == {
        "name": "calculator",
        "description": BUILTINS.get("calculator").description,
        "input_schema": BUILTINS.get("calculator").input_schema,
    }
    assert body["tool_choice"] == {"type": "auto"} and body["max_tokens"] == 100


def test_openai_gets_tool_results_as_tool_role_messages(provider_server):
    run(adapter(provider_server, "openai").complete(request(messages=CONVERSATION)))
    body = provider_server.requests_to("/v1/chat/completions")[0].body
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2 and the time?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "2+2"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "current_time", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"result": 4}'},
        {"role": "tool", "tool_call_id": "c2", "content": "unknown time zone"},
    ]
    assert body["tools"][0]["type"] == "function"
    assert body["tools"][0]["function"]["name"] == "calculator"
    assert body["max_completion_tokens"] == 100 and body["tool_choice"] == "auto"


@pytest.mark.parametrize(
    "choice,anthropic_wire,openai_wire",
    [
        ("required", {"type": "any"}, "required"),
        ("none", {"type": "none"}, "none"),
        ("calculator", {"type": "tool", "name": "calculator"},
         {"type": "function", "function": {"name": "calculator"}}),
    ],
)  # fmt: skip
def test_tool_choice_is_translated(provider_server, choice, anthropic_wire, openai_wire):
    run(adapter(provider_server, "anthropic").complete(request(tool_choice=choice)))
    run(adapter(provider_server, "openai").complete(request(tool_choice=choice)))
    assert provider_server.requests_to("/v1/messages")[0].body["tool_choice"] == anthropic_wire
    wire = provider_server.requests_to("/v1/chat/completions")[0].body["tool_choice"]
    assert wire == openai_wire


@both
def test_streaming_text_arrives_in_deltas_then_usage_then_done(provider_server, api):
    provider_server.script(api, TextReply("The answer is four.", input_tokens=9, output_tokens=5))
    events = run(collect(adapter(provider_server, api).stream(request())))
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) >= 2 and "".join(deltas) == "The answer is four."
    assert isinstance(events[-2], UsageEvent) and isinstance(events[-1], Done)
    assert events[-2].usage.output_tokens == 5 and events[-2].usage.input_tokens == 9
    done = events[-1].response
    assert done.text == "The answer is four." and done.model == "test-model-20250101"


@both
def test_streamed_tool_calls_are_assembled_whole(provider_server, api):
    calls = [
        WireCall("c1", "calculator", '{"expression": "(1 + 2) * 3"}'),
        WireCall("c2", "current_time", '{"timezone": "Europe/Paris"}'),
    ]
    provider_server.script(api, ToolCallReply(calls, text="Two calls."))
    events = run(collect(adapter(provider_server, api).stream(request())))
    tool_events = [e.call for e in events if isinstance(e, ToolCallEvent)]
    assert tool_events == [
        ToolCall("c1", "calculator", {"expression": "(1 + 2) * 3"}),
        ToolCall("c2", "current_time", {"timezone": "Europe/Paris"}),
    ]
    done = events[-1].response
    assert done.tool_calls == tuple(tool_events) and done.stop_reason == "tool_calls"
    assert done.text == "Two calls."


@both
def test_429_with_retry_after_is_retried_then_succeeds(provider_server, api):
    provider_server.script(
        api, ErrorReply(429, "slow down", headers={"retry-after": "0.3"}), TextReply("ok now")
    )
    started = time.perf_counter()
    response = run(adapter(provider_server, api).complete(request()))
    assert response.text == "ok now"
    assert time.perf_counter() - started >= 0.3
    assert len([r for r in provider_server.received if r.method == "POST"]) == 2


@both
def test_429_exhausting_retries_is_rate_limited_with_retry_after(provider_server, api):
    provider_server.script(api, *[ErrorReply(429, "slow", headers={"retry-after": "0.01"})] * 3)
    with pytest.raises(RateLimited) as caught:
        run(adapter(provider_server, api).complete(request()))
    assert caught.value.retry_after == pytest.approx(0.01)


@both
def test_503_is_retried_and_401_is_not(provider_server, api):
    provider_server.script(api, ErrorReply(503, "busy"), TextReply("fine"))
    assert run(adapter(provider_server, api).complete(request())).text == "fine"
    provider_server.received.clear()
    provider_server.expect_api_key("the-right-key")
    with pytest.raises(AuthenticationFailed):
        run(adapter(provider_server, api).complete(request()))
    assert len(provider_server.received) == 1


@both
def test_server_errors_exhaust_into_provider_unavailable(provider_server, api):
    provider_server.script(api, *[ErrorReply(500, "boom")] * 3)
    with pytest.raises(ProviderUnavailable):
        run(adapter(provider_server, api).complete(request()))


@both
def test_timeout_is_mapped(provider_server, api):
    provider_server.script(api, TextReply("late", delay_s=60))  # cut short by the close
    slow = adapter(provider_server, api, timeout_s=0.2, retry=RetryPolicy(max_attempts=1))
    started = time.perf_counter()
    with pytest.raises(Timeout):
        run(slow.complete(request()))
    # The point is the timeout: back long before the reply (60 s), with 25 times the 0.2 s
    # to spare on a busy machine.
    assert time.perf_counter() - started < 5


@both
def test_context_too_long_and_bad_requests_are_not_retried(provider_server, api):
    provider_server.script(
        api, ErrorReply(400, "prompt is too long: 250000 tokens > 200000 maximum")
    )
    with pytest.raises(ContextTooLong):
        run(adapter(provider_server, api).complete(request()))
    provider_server.script(api, ErrorReply(404, "model not found"))
    with pytest.raises(BadRequest):
        run(adapter(provider_server, api).complete(request()))
    assert len(provider_server.received) == 2


def test_unreachable_provider_is_unavailable():
    dead = OpenAIAdapter(
        api_key="k", base_url="http://127.0.0.1:9/v1", retry=RetryPolicy(max_attempts=1)
    )
    with pytest.raises(ProviderUnavailable, match="cannot reach"):
        run(dead.complete(request()))


def test_malformed_tool_arguments_become_model_behavior_errors(provider_server):
    bad = ToolCallReply([WireCall("c9", "calculator", '{"expression": "2+')])
    provider_server.script("openai", bad, bad)
    provider_server.script("anthropic", bad)
    with pytest.raises(ModelBehaviorError) as caught:
        run(adapter(provider_server, "openai").complete(request()))
    assert (caught.value.call_id, caught.value.name) == ("c9", "calculator")
    with pytest.raises(ModelBehaviorError):
        run(collect(adapter(provider_server, "openai").stream(request())))
    with pytest.raises(ModelBehaviorError):
        run(collect(adapter(provider_server, "anthropic").stream(request())))


@both
def test_the_api_key_never_appears_in_errors_or_reprs(provider_server, api, caplog):
    import logging

    caplog.set_level(logging.DEBUG)  # every logger, every level
    key = KEYS[api]
    provider_server.expect_api_key("another-key")
    subject = adapter(provider_server, api)
    with pytest.raises(AuthenticationFailed) as caught:
        run(subject.complete(request()))
    assert (
        provider_server.received[0].headers.get("x-api-key", "")
        + provider_server.received[0].headers.get("authorization", "")
        != ""
    )  # the key was sent ...
    for text in (str(caught.value), repr(caught.value), repr(subject), caplog.text):
        assert key not in text  # ... and is nowhere else


def test_echoed_masked_keys_are_redacted_from_messages():
    from providers.runtime.sdk_errors import redact

    message = "Incorrect API key provided: sk-proj-ab***********yz. You can find your key"
    assert "sk-proj" not in redact(message, None)
    assert redact("token sk-ant-api03-XYZ used", "sk-ant-api03-XYZ") == "token [redacted] used"


def test_openai_embeddings(provider_server):
    from tests.fakes.provider_server import embedding_for

    vectors = run(
        adapter(provider_server, "openai").embed(["a", "b"], model="emb-test", dimensions=4)
    )
    assert len(vectors) == 2 and len(vectors[0]) == 4
    assert vectors[0] == pytest.approx(embedding_for("a", 4))


def test_presets_and_their_quirks(provider_server):
    mistral = OpenAIAdapter(api_key="k", base_url=provider_server.openai_base_url, preset="mistral")
    run(collect(mistral.stream(request(tool_choice="required"))))
    body = provider_server.requests_to("/v1/chat/completions")[0].body
    assert "stream_options" not in body and body["tool_choice"] == "auto"
    assert body["max_tokens"] == 100
    ollama = OpenAIAdapter(api_key=None, preset="ollama")
    assert ollama.base_url == "http://localhost:11434/v1"
    with pytest.raises(ValueError, match="unknown preset"):
        OpenAIAdapter(api_key="k", preset="nope")
    with pytest.raises(ValueError, match="needs a base URL"):
        OpenAIAdapter(api_key="k", preset="custom")
    xai = OpenAIAdapter(api_key="k", base_url=provider_server.openai_base_url, preset="xai")
    from providers.runtime.errors import ProviderError

    with pytest.raises(ProviderError, match="no embeddings"):
        run(xai.embed(["x"], model="m"))


@both
def test_list_models(provider_server, api):
    models = run(adapter(provider_server, api).list_models())
    assert "claude-test-1" in models and "gpt-test-1" in models


# -- the OpenAI adapter reads the server-sent events itself ---------------------------------
class _SSEServer:
    """A loopback server answering every POST with `body` as text/event-stream."""

    def __init__(self, body: bytes) -> None:
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def sse_stream(body: bytes) -> list:
    server = _SSEServer(body)
    try:
        openai_adapter = OpenAIAdapter(api_key="k", base_url=server.url, retry=RetryPolicy(1))
        return run(collect(openai_adapter.stream(request())))
    finally:
        server.close()


def test_an_error_event_in_the_middle_of_a_stream_is_a_provider_error():
    body = (
        b'data: {"id": "1", "choices": [{"index": 0, "delta": {"content": "Hel"}}]}\n\n'
        b'data: {"error": {"message": "the model is overloaded", "type": "server_error"}}\n\n'
    )
    with pytest.raises(ProviderError, match="overloaded"):
        sse_stream(body)


def test_a_stream_of_events_split_over_lines_and_comments_reads_whole():
    body = (
        b": keep-alive\n\n"
        b'event: chunk\ndata: {"id": "1", "model": "m1",\ndata:  "choices": [{"index": 0, '
        b'"delta": {"content": "Hello"}}]}\n\n'
        b'data: {"id": "1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],'
        b' "usage": {"prompt_tokens": 3, "completion_tokens": 1}}\n\n'
        b"data: [DONE]\n\n"
    )
    events = sse_stream(body)
    done = events[-1].response
    assert (done.text, done.model, done.stop_reason) == ("Hello", "m1", "end")
    assert (done.usage.input_tokens, done.usage.output_tokens) == (3, 1)


def test_a_stream_event_that_is_not_json_is_the_models_fault():
    with pytest.raises(ModelBehaviorError, match="not JSON"):
        sse_stream(b"data: {oops\n\n")


def test_images_and_sampling_options_reach_each_provider_in_its_shape(provider_server):
    image = Image(media_type="image/png", data="iVBORw0KGgo=")
    message = UserMessage("What is this?", (image,))
    options = {"top_p": 0.5, "seed": 7, "stop": ["END"], "temperature": 0.1}
    asyncio.run(
        adapter(provider_server, "anthropic").complete(request(messages=[message], **options))
    )
    asyncio.run(adapter(provider_server, "openai").complete(request(messages=[message], **options)))
    anthropic = provider_server.requests_to("/v1/messages")[-1].body
    assert anthropic["messages"][-1]["content"] == [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {"type": "text", "text": "What is this?"},
    ]
    assert anthropic["stop_sequences"] == ["END"]
    assert not {"seed", "top_p", "temperature"} & set(anthropic)  # (its API takes none)
    openai_body = provider_server.requests_to("/v1/chat/completions")[-1].body
    assert openai_body["messages"][-1]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]
    assert (openai_body["top_p"], openai_body["seed"], openai_body["stop"]) == (0.5, 7, ["END"])


def test_a_stream_past_the_response_cap_is_a_provider_error_not_held():
    """The cap the SDK's guarded client had (tools.runtime.egress.SDK_MAX_RESPONSE_BYTES)
    holds for the adapter's own stream: counted as it is decoded."""
    from tests.providers.test_http1 import Scripted, in_a_loop

    chunk = b'data: {"choices": [{"delta": {"content": "' + b"x" * 200 + b'"}}]}\n\n'
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        + f"Content-Length: {len(chunk) * 3}\r\n\r\n".encode()
        + chunk * 3
    )

    @in_a_loop
    async def scenario():
        async with Scripted([answer]) as server:
            adapter = OpenAIAdapter(api_key="k", base_url=server.url, retry=RetryPolicy(1))
            adapter.max_response_bytes = 500
            request = ModelRequest(model="m", messages=[UserMessage("hi")])
            with pytest.raises(ProviderError, match="larger than 500 bytes"):
                async for _ in adapter.stream(request):
                    pass

    scenario()
