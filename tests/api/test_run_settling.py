"""An agent run's streamed model calls are never settled below what they gave, through the
/v1 faces (the real SDKs against the live server): a service that sends no usage has its
calls counted from their content (input estimate + characters / 4) in the run's record and
in the quota counters alike, and a run cancelled mid-stream (REST) keeps what its stream
gave, where it used to count 0 for it."""

from __future__ import annotations

import math
import time
from decimal import Decimal

import anthropic
import httpx2
import openai
import pytest

from agents import quotas
from agents.models import Quota, Run
from providers.models import ModelPrice
from tests.api.conftest import sdk
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = "The whole answer, every word."  # 3 pieces: "The whole ", "answer, ev", "ery word."
HELLO = [{"role": "user", "content": "Hi"}]


@pytest.fixture
def limits(trio, agent) -> tuple[Quota, Quota]:
    ModelPrice.objects.create(
        tenant=trio.acme, provider_kind="openai", model="gpt-test", input_price=Decimal(1000),
        output_price=Decimal(10_000), cached_input_price=Decimal(0), cache_write_price=Decimal(0),
    )  # fmt: skip
    tokens = Quota.objects.create(
        tenant=trio.acme, scope="tenant", metric="tokens", period="day", limit=10_000_000
    )
    cost = Quota.objects.create(
        tenant=trio.acme, scope="tenant", metric="cost", period="day", limit=Decimal(100_000)
    )
    return tokens, cost


def finished(status: str) -> Run:
    for _ in range(200):
        run = Run.objects.filter(agent__isnull=False).order_by("-pk").first()
        if run is not None and run.status == status:
            return run
        time.sleep(0.05)
    raise AssertionError(f"no run {status}: {run and run.status}")


def settled_as_recorded(run: Run, tokens: Quota, cost: Quota) -> None:
    spent = (run.input_tokens + run.output_tokens, float(run.cost_usd))
    deadline = time.monotonic() + 5
    while (quotas.used(tokens), quotas.used(cost)) != spent:
        assert time.monotonic() < deadline, (quotas.used(tokens), quotas.used(cost), spent)
        time.sleep(0.05)


def chat(asgi_server, key) -> str:
    chunks = sdk(asgi_server, key).chat.completions.create(
        model="assistant", messages=HELLO, stream=True
    )
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def responses(asgi_server, key) -> str:
    events = sdk(asgi_server, key).responses.create(model="assistant", input="Hi", stream=True)
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def messages(asgi_server, key) -> str:
    claude = anthropic.Anthropic(api_key=key, base_url=asgi_server, max_retries=0, timeout=20)
    with claude.messages.stream(model="assistant", max_tokens=200, messages=HELLO) as stream:
        return "".join(stream.text_stream)


@pytest.mark.parametrize("face", [chat, responses, messages])
def test_a_run_on_a_service_without_usage_is_counted_from_what_it_gave(
    face, limits, asgi_server, keys, provider_server, celery_worker_process
):
    provider_server.script("openai", TextReply(ANSWER, usage=False))
    assert face(asgi_server, keys["run"]) == ANSWER
    run = finished("succeeded")
    assert run.input_tokens > 0 and run.output_tokens == math.ceil(len(ANSWER) / 4)
    assert run.cost_usd == Decimal(run.input_tokens) / 1000 + Decimal(run.output_tokens) / 100
    settled_as_recorded(run, *limits)


def test_a_run_cancelled_mid_stream_keeps_what_its_stream_gave(
    limits, asgi_server, keys, provider_server, celery_worker_process
):
    """Cancelled over REST once its first words arrived: the rest of the answer never
    comes, and what came is the run's usage and its limits'."""
    provider_server.script(
        "openai", TextReply(ANSWER, input_tokens=900, output_tokens=300, chunk_delay_s=0.6)
    )
    chunks = sdk(asgi_server, keys["run"]).chat.completions.create(
        model="assistant", messages=HELLO, stream=True
    )
    received, run_id = "", None
    with pytest.raises(openai.APIError, match="cancelled"):
        for chunk in chunks:
            received += (chunk.choices[0].delta.content or "") if chunk.choices else ""
            if received and run_id is None:
                run_id = int(chunk.id.removeprefix("chatcmpl-"))
                cancelled = httpx2.post(
                    f"{asgi_server}/api/v1/runs/{run_id}/cancel",
                    headers={"Authorization": f"Bearer {keys['run']}"},
                )
                assert cancelled.status_code == 200
    run = finished("cancelled")
    assert ANSWER.startswith(received) and received != ANSWER
    assert run.input_tokens > 0 and run.output_tokens == math.ceil(len(received) / 4)
    settled_as_recorded(run, *limits)
