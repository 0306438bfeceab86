"""The gateway's own door (agentplatform/v1/gateway/door.py): it answers a known key's plain gateway
call exactly as the /v1 view does, and hands everything else to the view with the body it
read. Driven in-process through the real ASGI apps (the view behind the door is the /v1
Django handler), with the scripted fake provider as the connection's service."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from django.conf import settings

from agentplatform.asgi_handler import StreamingASGIHandler
from agentplatform.v1.gateway import flush_gateway_calls, with_gateway_door
from agents.models import Run
from tenancy import services as tenancy
from tenancy.models import Role
from tests.factories import make_connection
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "local-openai/gpt-test"
HELLO = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}
VOLATILE = {"date", "server"}


class Door:
    """The door in front of the /v1 handler; `viewed` counts the calls the view got."""

    def __init__(self) -> None:
        self.viewed = 0
        view = StreamingASGIHandler(settings.API_MIDDLEWARE, views_release_connections=True)

        async def counted(scope, receive, send):
            self.viewed += 1
            await view(scope, receive, send)

        self.app = with_gateway_door(counted)

    def call(self, path, body, *, key=None, headers=(), query=b"", leave_after_first=False):
        """(status, headers, body, which) of one POST; `which` is "door" or "view"."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        head = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]
        if key:
            head.append((b"authorization", f"Bearer {key}".encode()))
        head += [(n.encode(), v.encode()) for n, v in headers]
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query,
            "root_path": "",
            "headers": head,
            "client": ("127.0.0.1", 5000),
            "server": ("127.0.0.1", 8000),
        }
        sent: list[dict] = []
        first_body = asyncio.Event()

        async def talk():
            requested = [{"type": "http.request", "body": raw, "more_body": False}]

            async def receive():
                if requested:
                    return requested.pop()
                if leave_after_first:
                    await first_body.wait()
                    return {"type": "http.disconnect"}
                await asyncio.sleep(3600)

            async def send(message):
                sent.append(message)
                if message["type"] == "http.response.body" and message.get("body"):
                    first_body.set()

            before = self.viewed
            await self.app(scope, receive, send)
            await flush_gateway_calls()
            return "view" if self.viewed > before else "door"

        which = asyncio.run(talk())
        start = sent[0]
        names = {n.decode().lower(): v.decode() for n, v in start["headers"]}
        content = b"".join(m.get("body", b"") for m in sent[1:])
        return start["status"], names, content, which


@pytest.fixture
def door():
    return Door()


@pytest.fixture
def run_key(trio, connection) -> str:
    return tenancy.api_key_create(tenant=trio.acme, name="door", scopes=["read", "run"])[1]


def same_answer(one, other) -> None:
    """Two answers alike but for what changes per call (dates; the provider's ids)."""
    assert one[0] == other[0]
    assert {k: v for k, v in one[1].items() if k not in VOLATILE} == {
        k: v for k, v in other[1].items() if k not in VOLATILE
    }
    left, right = json.loads(one[2]), json.loads(other[2])
    for answer in (left, right):
        answer.pop("id", None), answer.pop("created", None)
    assert left == right


def test_a_known_keys_plain_call_is_answered_by_the_door_as_the_view_answers_it(
    door, run_key, provider_server
):
    provider_server.script("openai", TextReply("Hello.", input_tokens=3, output_tokens=2))
    provider_server.script("openai", TextReply("Hello.", input_tokens=3, output_tokens=2))
    first = door.call("/v1/chat/completions", HELLO, key=run_key)
    second = door.call("/v1/chat/completions", HELLO, key=run_key)
    assert (first[3], second[3]) == ("view", "door")  # the view verified the key first
    same_answer(first, second)
    assert second[1]["x-content-type-options"] == "nosniff"
    assert second[1]["content-length"] == str(len(second[2]))
    runs = Run.objects.filter(gateway_model=MODEL).order_by("pk")
    assert [(r.input_tokens, r.output_tokens, r.status) for r in runs] == [(3, 2, "succeeded")] * 2
    sent = provider_server.requests_to("/v1/chat/completions")
    assert sent[-1].body == sent[-2].body  # the same bytes on to the provider


def test_the_doors_errors_are_the_views(door, run_key, provider_server):
    provider_server.script("openai", TextReply("Hello."))
    door.call("/v1/chat/completions", HELLO, key=run_key)  # (the key verified)
    no_messages = {"model": MODEL, "messages": []}
    by_door = door.call("/v1/chat/completions", no_messages, key=run_key)
    assert by_door[3] == "door" and by_door[0] == 400
    assert json.loads(by_door[2])["error"]["param"] == "messages"


def test_a_throttled_call_is_a_429_from_the_door_too(door, run_key, provider_server, monkeypatch):
    from tenancy import request_budgets

    provider_server.script("openai", TextReply("Hello."))
    door.call("/v1/chat/completions", HELLO, key=run_key)
    monkeypatch.setattr(
        request_budgets.ApiKeyRateThrottle, "THROTTLE_RATES", {"api_key": "1/min", "tenant": None}
    )
    status, headers, body, which = door.call("/v1/chat/completions", HELLO, key=run_key)
    assert (status, which) == (429, "door") and int(headers["retry-after"]) >= 1
    assert json.loads(body)["error"]["code"] == "rate_limit_exceeded"


def test_anything_but_a_plain_call_goes_to_the_view_with_its_body(
    door, trio, run_key, provider_server, agent
):  # (`agent`: acme's assistant)
    for _ in range(9):
        provider_server.script("openai", TextReply("Hello."))
    door.call("/v1/chat/completions", HELLO, key=run_key)  # (the key verified)
    limited_key = tenancy.api_key_create(
        tenant=trio.acme, name="some", scopes=["run"], allowed_agents=["assistant"]
    )[1]
    read_key = tenancy.api_key_create(tenant=trio.acme, name="ro", scopes=["read"])[1]
    for key in (limited_key, read_key):  # verified by a first call, refused all the same
        door.call("/v1/chat/completions", HELLO, key=key)
    cases = {
        "a query string": dict(query=b"stream=true"),
        "an agent": dict(body={"model": "assistant", "messages": []}),  # (no run started)
        "not JSON": dict(body=b"{nope"),
        "an unknown key": dict(key="ap_000000000000_nope"),
        "a key limited to agents": dict(key=limited_key),
        "a key without the run scope": dict(key=read_key),
        "an unknown model": dict(body={**HELLO, "model": "nowhere/other"}),
    }
    answers = {}
    for name, case in cases.items():
        answers[name] = door.call(
            "/v1/chat/completions", case.pop("body", HELLO), key=case.pop("key", run_key), **case
        )
        assert answers[name][3] == "view", name
    assert answers["a query string"][1]["content-type"].startswith("text/event-stream")
    assert answers["an agent"][0] == 400 and b"messages" in answers["an agent"][2]
    assert [answers[n][0] for n in list(cases)[2:]] == [400, 401, 403, 403, 404]


def test_a_host_the_platform_does_not_serve_is_the_views_400(door, run_key, provider_server):
    provider_server.script("openai", TextReply("Hello."))
    door.call("/v1/chat/completions", HELLO, key=run_key)
    status, _, _, which = door.call(
        "/v1/chat/completions", HELLO, key=run_key, headers=[("host", "evil.example")]
    )
    # (the scope's first host header is ours; a second one is the last the view reads)
    assert which == "view" and status == 400


def test_a_body_over_the_limit_is_the_views_413(door, run_key, provider_server, settings):
    provider_server.script("openai", TextReply("Hello."))
    door.call("/v1/chat/completions", HELLO, key=run_key)
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    big = {**HELLO, "messages": [{"role": "user", "content": "x" * 500}]}
    status, _, _, which = door.call("/v1/chat/completions", big, key=run_key)
    assert (status, which) == (413, "view")


def test_messages_to_an_anthropic_connection_go_through_the_door_with_its_headers(
    door, trio, run_key, provider_server
):
    make_connection(
        trio.acme,
        "Local Claude",
        "anthropic",
        api_key="sk-ant-test",
        base_url=provider_server.url,
        default_model="claude-test",
    )
    body = {"model": "local-claude/claude-test", "max_tokens": 50, "messages": HELLO["messages"]}
    for _ in range(2):
        provider_server.script("anthropic", TextReply("Hi."))
    key_header = [("x-api-key", run_key), ("anthropic-version", "2023-06-01")]
    first = door.call("/v1/messages", body, headers=key_header)
    second = door.call("/v1/messages", body, headers=key_header)
    assert (first[3], second[3]) == ("view", "door")
    same_answer(first, second)
    sent = provider_server.requests_to("/v1/messages")[-1]
    assert sent.headers.get("anthropic-version") == "2023-06-01"
    missing = door.call("/v1/messages", {**body, "max_tokens": None}, headers=key_header)
    assert missing[3] == "door" and missing[0] == 400
    assert json.loads(missing[2])["type"] == "error"  # Anthropic's shape
    calls = len(provider_server.requests_to("/v1/messages"))
    threaded = door.call("/v1/messages", {**body, "thread": "msg_1"}, headers=key_header)
    assert threaded[3] == "view" and threaded[0] == 400  # (nothing stored to continue)
    assert json.loads(threaded[2])["error"]["message"].startswith("`thread` is not supported")
    assert len(provider_server.requests_to("/v1/messages")) == calls


def test_a_stream_through_the_door_passes_through_and_a_caller_leaving_ends_it(
    door, run_key, provider_server
):
    provider_server.script("openai", TextReply("Hello."))
    door.call("/v1/chat/completions", HELLO, key=run_key)
    provider_server.script("openai", TextReply("a b c d", output_tokens=4))
    status, headers, content, which = door.call(
        "/v1/chat/completions", {**HELLO, "stream": True}, key=run_key
    )
    assert (status, which) == (200, "door") and headers["cache-control"] == "no-cache"
    assert content.endswith(b"data: [DONE]\n\n") and b"a b c d" not in content  # (in pieces)
    assert Run.objects.filter(gateway_model=MODEL, output_tokens=4).exists()
    provider_server.script("openai", TextReply("slow words", chunk_delay_s=3))
    left = time.monotonic()
    status, _, content, which = door.call(
        "/v1/chat/completions", {**HELLO, "stream": True}, key=run_key, leave_after_first=True
    )  # (read on, then recorded: GATEWAY_STREAM_READ_ON_S after the caller left)
    assert which == "door" and time.monotonic() - left < settings.GATEWAY_STREAM_READ_ON_S + 1.5
    assert Run.objects.filter(gateway_model=MODEL).count() == 3


def test_the_door_reads_on_a_stream_left_for_its_usage_and_sends_its_maximum(
    door, run_key, provider_server
):
    """As the view: a caller leaving leaves the provider's stream read on for its usage (it
    comes a second after the answer), and a body without a maximum is sent the gateway's."""
    provider_server.script("openai", TextReply("Hello."))
    door.call("/v1/chat/completions", HELLO, key=run_key)
    provider_server.script(
        "openai", TextReply("a b c d", input_tokens=900, output_tokens=300, usage_delay_s=1)
    )
    *_, which = door.call(
        "/v1/chat/completions", {**HELLO, "stream": True}, key=run_key, leave_after_first=True
    )
    assert which == "door"
    run = Run.objects.filter(gateway_model=MODEL).order_by("-pk").first()
    assert (run.input_tokens, run.output_tokens) == (900, 300)
    sent = [r.body for r in provider_server.requests_to("/v1/chat/completions")]
    assert [b.get("max_completion_tokens") for b in sent] == [
        settings.GATEWAY_DEFAULT_MAX_TOKENS
    ] * 2  # (the connection is OpenAI's: its own field)


def test_the_door_stays_shut_when_the_security_headers_depend_on_the_request(
    run_key, provider_server, settings
):
    settings.SECURE_HSTS_SECONDS = 3600
    door = Door()
    provider_server.script("openai", TextReply("Hello."))
    provider_server.script("openai", TextReply("Hello."))
    door.call("/v1/chat/completions", HELLO, key=run_key)
    assert door.call("/v1/chat/completions", HELLO, key=run_key)[3] == "view"


def test_a_viewer_key_is_refused_by_the_view_not_let_through(door, trio, provider_server):
    """A key whose role may not start runs: the door leaves it to the view's 403, even once
    the key is verified."""
    _, key = tenancy.api_key_create(
        tenant=trio.acme, name="viewer", scopes=["read", "run"], role=Role.VIEWER
    )
    answers = [door.call("/v1/chat/completions", HELLO, key=key) for _ in range(2)]
    assert [(a[0], a[3]) for a in answers] == [(403, "view"), (403, "view")]
