"""A run's streamed model call is never settled, nor recorded, below what it gave: cancelled
mid-stream, broken off by its provider, or answered by a service that counts nothing, the
meter (agents.quotas.MeteredAdapter, on the real Redis counters) and the run's usage (the
loop's outcome, which the run records) agree on the input estimate plus the output's
characters / 4 (providers.runtime.estimates)."""

from __future__ import annotations

import asyncio
import math

import pytest

from agents import quotas
from agents.models import Quota
from agents.runtime.loop import run_agent
from agents.runtime.spec import AgentSpec, RunStatus
from providers.runtime.errors import ProviderUnavailable
from providers.runtime.estimates import estimate_input_tokens
from providers.runtime.fake import FakeModel, Stream
from providers.runtime.openai_adapter import OpenAIAdapter
from providers.runtime.types import (
    Done,
    ModelRequest,
    ModelResponse,
    TextDelta,
    Usage,
    UserMessage,
)
from tests.agents.test_loop import RecordingSink
from tests.fakes.provider_server import TextReply
from tools.runtime.context import RunContext
from tools.runtime.registry import ToolRegistry

pytestmark = pytest.mark.django_db(transaction=True)  # (the meter reads its rules on a thread)

SPEC = AgentSpec(name="helper", instructions="Be brief.", model="fake-model")
PIECES = ["The whole ", "answer, ev", "ery word."]


@pytest.fixture
def tokens(trio) -> Quota:
    return Quota.objects.create(
        tenant=trio.acme, scope="tenant", metric="tokens", period="day", limit=1_000_000
    )


def metered_run(trio, model: FakeModel, **kwargs):
    adapter = quotas.metered(model, quotas.Meter(tenant_id=trio.acme.pk))
    return asyncio.run(
        run_agent(
            spec=SPEC, adapter=adapter, registry=ToolRegistry(), input="hi",
            ctx=RunContext(tenant_id=trio.acme.pk), **kwargs,
        )
    )  # fmt: skip


def given(model: FakeModel, delivered: str) -> int:
    """The tokens of the input estimate of the one request `model` got, and `delivered`."""
    (request,) = model.requests
    return estimate_input_tokens(request) + math.ceil(len(delivered) / 4)


def test_a_run_cancelled_mid_stream_is_held_and_recorded_at_what_it_gave(trio, tokens):
    model = FakeModel([Stream([TextDelta(p) for p in PIECES])])
    sink = RecordingSink(wants_text_deltas=True, delay_s=0.3)  # (past the check's interval)

    async def cancelled() -> bool:
        return len(sink.of("text.delta")) >= 2

    outcome = metered_run(trio, model, sink=sink, is_cancelled=cancelled)
    assert outcome.status is RunStatus.CANCELLED
    spent = given(model, "".join(PIECES[:2]))
    assert outcome.usage.input_tokens + outcome.usage.output_tokens == spent
    assert quotas.used(tokens) == spent


def test_a_stream_broken_off_by_its_provider_is_held_and_recorded_at_what_it_gave(trio, tokens):
    model = FakeModel([Stream([TextDelta(PIECES[0]), ProviderUnavailable("reset")])])
    outcome = metered_run(trio, model, sink=RecordingSink(wants_text_deltas=True))
    assert outcome.status is RunStatus.FAILED
    spent = given(model, PIECES[0])
    assert outcome.usage.input_tokens + outcome.usage.output_tokens == spent
    assert quotas.used(tokens) == spent


def test_a_stream_that_ends_with_the_providers_usage_is_held_at_it(trio, tokens):
    usage = Usage(input_tokens=900, output_tokens=300)
    done = Done(ModelResponse(text="".join(PIECES), usage=usage, model="fake-model"))
    model = FakeModel([Stream([*(TextDelta(p) for p in PIECES), done])])
    outcome = metered_run(trio, model, sink=RecordingSink(wants_text_deltas=True))
    assert outcome.status is RunStatus.SUCCEEDED and outcome.usage == usage
    assert quotas.used(tokens) == 1200


def test_a_service_that_counts_nothing_is_counted_from_what_it_gave(provider_server):
    """The OpenAI adapter, streamed and not, against a service that sends no usage (the
    real SDK and the fake provider)."""
    provider_server.script("openai", TextReply("".join(PIECES), usage=False))
    provider_server.script("openai", TextReply("".join(PIECES), usage=False))
    adapter = OpenAIAdapter(api_key="k", base_url=provider_server.openai_base_url)
    request = ModelRequest(model="m", messages=[UserMessage("hi")], max_tokens=50)

    async def both():
        events = [event async for event in adapter.stream(request)]
        return events[-1].response.usage, (await adapter.complete(request)).usage

    streamed, whole = asyncio.run(both())
    counted = Usage(estimate_input_tokens(request), math.ceil(len("".join(PIECES)) / 4))
    assert streamed == whole == counted
    assert provider_server.requests_to("/v1/chat/completions")[0].body["stream_options"] == {
        "include_usage": True
    }  # (asked for, never sent)
