"""What a gateway call (`<connection>/<model>`) is settled and recorded at, on every face,
through the live server with the real SDKs and the scripted fake provider.

A caller that stops reading a stream once it has the whole answer (its `finish_reason`, its
last text) and closes it leaves the provider's stream read on, for GATEWAY_STREAM_READ_ON_S
(2 s in the tests): the quota counters and the recorded run get the provider's usage, which
comes last; when it never comes, what the provider gave (the input estimate and the content's
characters / 4), never 0. And what a call is held for bounds what it may produce: a body
without a maximum output is sent GATEWAY_DEFAULT_MAX_TOKENS in its API's own field."""

from __future__ import annotations

import math
import re
import time
from decimal import Decimal

import anthropic
import openai
import pytest
from django.conf import settings

from agents import quotas
from agents.models import Quota, Run
from providers.models import ModelPrice
from tests.api.conftest import sdk
from tests.factories import make_connection
from tests.fakes.provider_server import TextReply

pytestmark = pytest.mark.django_db(transaction=True)

GPT = "local-openai/gpt-test"  # the `connection` fixture: an OpenAI connection
CLAUDE = "claude/claude-test"
ANSWER = "The whole answer, every word."  # sent in 3 pieces, 29 characters: 8 tokens
COUNTED = math.ceil(len(ANSWER) / 4)
HELLO = [{"role": "user", "content": "Hi"}]
COMPLETIONS, MESSAGES = "/v1/chat/completions", "/v1/messages"


@pytest.fixture
def limits(trio, connection, provider_server) -> tuple[Quota, Quota]:
    """The tenant's daily token and cost limits (far from used up), the prices of both
    connections' models, and the Anthropic connection "Claude"."""
    make_connection(
        trio.acme, "Claude", "anthropic", api_key="sk-ant-secret",
        base_url=provider_server.anthropic_base_url, default_model="claude-test",
    )  # fmt: skip
    for kind, model in (("openai", "gpt-test"), ("anthropic", "claude-test")):
        ModelPrice.objects.create(
            tenant=trio.acme, provider_kind=kind, model=model, input_price=Decimal(1000),
            output_price=Decimal(10_000), cached_input_price=Decimal(0),
            cache_write_price=Decimal(0),
        )  # $0.001 an input token, $0.01 an output token  # fmt: skip
    tokens = Quota.objects.create(
        tenant=trio.acme, scope="tenant", metric="tokens", period="day", limit=10_000_000
    )
    cost = Quota.objects.create(
        tenant=trio.acme, scope="tenant", metric="cost", period="day", limit=Decimal(100_000)
    )
    return tokens, cost


@pytest.fixture
def gpt(asgi_server, keys) -> openai.OpenAI:
    return sdk(asgi_server, keys["run"])


@pytest.fixture
def claude(asgi_server, keys) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=keys["run"], base_url=asgi_server, max_retries=0, timeout=20)


def recorded(count: int, within_s: float = 10) -> list[Run]:
    """The gateway calls recorded, once there are `count` of them (in the order they were
    recorded: a stream read on for its usage is recorded after the calls that followed)."""
    deadline = time.monotonic() + within_s
    while True:
        runs = list(Run.objects.filter(gateway_model__contains="/").order_by("pk"))
        if len(runs) >= count or time.monotonic() > deadline:
            assert len(runs) == count, runs
            return runs
        time.sleep(0.05)


def settled_as_recorded(tokens: Quota, cost: Quota) -> None:
    """The counters hold exactly what the recorded runs do (every hold settled to its
    record): the tokens and the cost."""
    runs = list(Run.objects.filter(gateway_model__contains="/"))
    spent = sum(r.input_tokens + r.output_tokens for r in runs)
    dollars = float(sum(r.cost_usd for r in runs))
    deadline = time.monotonic() + 30  # (settled off the answer's path: on a loaded machine, late)
    while (quotas.used(tokens), quotas.used(cost)) != (spent, dollars):
        assert time.monotonic() < deadline, (quotas.used(tokens), spent, quotas.used(cost))
        time.sleep(0.05)


def late_and_never(runs: list[Run]) -> tuple[Run, Run]:
    """Of two calls, the one settled at the provider's usage (900 + 300, scripted) and the
    one counted from what it gave."""
    (late,) = [r for r in runs if (r.input_tokens, r.output_tokens) == (900, 300)]
    (never,) = [r for r in runs if r is not late]
    return late, never


def priced(run: Run) -> Decimal:
    return Decimal(run.input_tokens) / 1000 + Decimal(run.output_tokens) / 100


def text_until_whole(events, text_of) -> str:
    """Read `events` until their text is the whole ANSWER, then close them: a caller that
    has what it came for and stops reading (its usage, last, never read)."""
    text = ""
    for event in events:
        text += text_of(event) or ""
        if text == ANSWER:
            break
    events.close()
    return text


def chat_text(chunk) -> str:
    return chunk.choices[0].delta.content if chunk.choices else ""


def messages_text(event) -> str:
    return event.delta.text if event.type == "content_block_delta" else ""


def responses_text(event) -> str:
    return event.delta if event.type == "response.output_text.delta" else ""


# -- point 2: a stream left before its usage ---------------------------------------------------
def test_a_chat_left_at_its_finish_reason_is_settled_at_the_providers_usage(
    limits, gpt, provider_server
):
    """Twice with one key: the first call goes through the /v1 view, the second through
    the gateway's own door (the key is known by then)."""
    for _ in range(2):
        provider_server.script(
            "openai", TextReply(ANSWER, input_tokens=900, output_tokens=300, usage_delay_s=1)
        )
        stream = gpt.chat.completions.create(model=GPT, messages=HELLO, stream=True)
        for chunk in stream:
            if chunk.choices and chunk.choices[0].finish_reason:
                break  # the whole answer: the usage comes a second later
        stream.close()
    runs = recorded(2)
    assert [(r.input_tokens, r.output_tokens) for r in runs] == [(900, 300)] * 2
    assert [r.cost_usd for r in runs] == [Decimal("3.9")] * 2
    settled_as_recorded(*limits)


def test_a_chat_whose_usage_never_comes_is_settled_at_what_it_gave(limits, gpt, provider_server):
    provider_server.script("openai", TextReply(ANSWER, usage=False))  # as some services do
    stream = gpt.chat.completions.create(model=GPT, messages=HELLO, stream=True)
    assert text_until_whole(stream, chat_text) == ANSWER
    (run,) = recorded(1)
    assert run.input_tokens > 0 and run.output_tokens == COUNTED and run.cost_usd == priced(run)
    settled_as_recorded(*limits)


def test_a_stream_whose_usage_comes_too_late_is_read_on_only_so_long(limits, gpt, provider_server):
    """The provider would send its usage a minute after the answer: the call is closed and
    recorded GATEWAY_STREAM_READ_ON_S after the caller left, counted from its content."""
    provider_server.script("openai", TextReply(ANSWER, output_tokens=300, usage_delay_s=60))
    stream = gpt.chat.completions.create(model=GPT, messages=HELLO, stream=True)
    assert text_until_whole(stream, chat_text) == ANSWER
    left = time.monotonic()
    (run,) = recorded(1, within_s=settings.GATEWAY_STREAM_READ_ON_S + 3)
    assert time.monotonic() - left >= settings.GATEWAY_STREAM_READ_ON_S - 0.5  # read on
    assert run.input_tokens > 0 and run.output_tokens == COUNTED
    settled_as_recorded(*limits)


def test_messages_left_before_their_usage_are_settled_at_it_or_at_what_they_gave(
    limits, claude, provider_server
):
    """An Anthropic connection: the output's count (message_delta) comes after the last
    content block; the input's came first (message_start), and stays when the rest never
    comes in time."""
    provider_server.script(
        "anthropic",
        TextReply(ANSWER, input_tokens=900, output_tokens=300, usage_delay_s=1),
        TextReply(ANSWER, input_tokens=900, output_tokens=300, usage_delay_s=60),
    )
    for _ in range(2):
        stream = claude.messages.create(model=CLAUDE, max_tokens=500, messages=HELLO, stream=True)
        for event in stream:
            if event.type == "content_block_stop":
                break  # the whole answer
        stream.close()
    late, never = late_and_never(recorded(2, within_s=settings.GATEWAY_STREAM_READ_ON_S + 3))
    assert late.cost_usd == Decimal("3.9")
    assert (never.input_tokens, never.output_tokens) == (900, COUNTED)
    assert never.cost_usd == priced(never)
    settled_as_recorded(*limits)


def test_a_gateway_response_left_before_its_usage_is_settled_at_it(limits, gpt, provider_server):
    provider_server.script(
        "openai",
        TextReply(ANSWER, input_tokens=900, output_tokens=300, usage_delay_s=1),
        TextReply(ANSWER, usage=False),
    )
    for _ in range(2):
        events = gpt.responses.create(model=GPT, input="Hi", stream=True)
        assert text_until_whole(events, responses_text) == ANSWER
    late, never = late_and_never(recorded(2))
    assert late.cost_usd == Decimal("3.9")
    assert never.input_tokens > 0 and never.output_tokens == COUNTED
    settled_as_recorded(*limits)


def test_translated_streams_left_before_their_usage_are_settled_at_it(
    limits, gpt, claude, provider_server
):
    """An OpenAI model on /v1/messages, an Anthropic model on /v1/chat/completions."""
    provider_server.script(
        "openai",
        TextReply(ANSWER, input_tokens=900, output_tokens=300, usage_delay_s=1),
        TextReply(ANSWER, usage=False),
    )
    provider_server.script(
        "anthropic",
        TextReply(ANSWER, input_tokens=900, output_tokens=300, usage_delay_s=1),
        TextReply(ANSWER, input_tokens=900, output_tokens=300, usage_delay_s=60),
    )
    for _ in range(2):
        events = claude.messages.create(model=GPT, max_tokens=500, messages=HELLO, stream=True)
        assert text_until_whole(events, messages_text) == ANSWER
    for _ in range(2):
        chunks = gpt.chat.completions.create(model=CLAUDE, messages=HELLO, stream=True)
        assert text_until_whole(chunks, chat_text) == ANSWER
    runs = recorded(4, within_s=settings.GATEWAY_STREAM_READ_ON_S + 3)
    by_model = {m: [r for r in runs if r.gateway_model == m] for m in (GPT, CLAUDE)}
    late, never = late_and_never(by_model[GPT])
    late_too, never_too = late_and_never(by_model[CLAUDE])
    assert late.cost_usd == late_too.cost_usd == Decimal("3.9")
    assert never.input_tokens > 0 and never.output_tokens == COUNTED
    assert (never_too.input_tokens, never_too.output_tokens) == (900, COUNTED)
    settled_as_recorded(*limits)


# -- point 3: what is held bounds what may be produced -------------------------------------------
def test_a_chat_without_a_maximum_is_sent_the_one_it_is_held_for(
    trio, limits, gpt, provider_server
):
    cap = settings.GATEWAY_DEFAULT_MAX_TOKENS
    make_connection(
        trio.acme, "Local", "openai_compatible", preset="custom",
        base_url=provider_server.openai_base_url, default_model="m",
    )  # fmt: skip
    for model in (GPT, "local/m"):  # the first call through the view, the next the door
        gpt.chat.completions.create(model=model, messages=HELLO)
        list(gpt.chat.completions.create(model=model, messages=HELLO, stream=True))
    sent = [r.body for r in provider_server.requests_to(COMPLETIONS)]
    # OpenAI's own field for its connections, `max_tokens` for an OpenAI-compatible one
    assert [b.get("max_completion_tokens") for b in sent] == [cap, cap, None, None]
    assert [b.get("max_tokens") for b in sent] == [None, None, cap, cap]
    gpt.chat.completions.create(model=GPT, messages=HELLO, max_tokens=50)
    own = provider_server.requests_to(COMPLETIONS)[-1].body
    assert own["max_tokens"] == 50 and "max_completion_tokens" not in own  # as it came
    # A service other than OpenAI's reads `max_tokens` only: the caller's maximum said there.
    gpt.chat.completions.create(model="local/m", messages=HELLO, max_completion_tokens=60)
    own = provider_server.requests_to(COMPLETIONS)[-1].body
    assert (own["max_completion_tokens"], own["max_tokens"]) == (60, 60)


def test_a_chat_is_held_for_each_of_its_choices(trio, limits, gpt, provider_server):
    tokens, _ = limits
    tokens.limit = 2 * settings.GATEWAY_DEFAULT_MAX_TOKENS  # one answer fits, not three
    tokens.save()
    gpt.chat.completions.create(model=GPT, messages=HELLO)
    with pytest.raises(openai.RateLimitError) as refused:
        gpt.chat.completions.create(model=GPT, messages=HELLO, n=3)
    assert "cannot take this call (up to" in refused.value.message
    assert len(provider_server.requests_to(COMPLETIONS)) == 1  # never sent
    with pytest.raises(openai.BadRequestError) as bad:
        gpt.chat.completions.create(model=GPT, messages=HELLO, n=2.5)
    assert bad.value.param == "n" and "must be a positive integer" in bad.value.message
    with pytest.raises(openai.BadRequestError) as bad:
        gpt.chat.completions.create(model=GPT, messages=HELLO, max_tokens="lots")
    assert bad.value.param == "max_tokens"
    assert len(provider_server.requests_to(COMPLETIONS)) == 1


def test_a_response_without_a_maximum_is_sent_one_and_says_so(limits, gpt, provider_server):
    cap = settings.GATEWAY_DEFAULT_MAX_TOKENS
    response = gpt.responses.create(model=GPT, input="Hi")
    assert response.max_output_tokens == cap  # what the caller sees of it
    events = list(gpt.responses.create(model=GPT, input="Hi", stream=True))
    assert events[-1].response.max_output_tokens == cap
    own = gpt.responses.create(model=GPT, input="Hi", max_output_tokens=40)
    assert own.max_output_tokens == 40
    sent = [r.body for r in provider_server.requests_to(COMPLETIONS)]
    assert [b["max_completion_tokens"] for b in sent] == [cap, cap, 40]


def test_a_chat_with_an_anthropic_model_is_held_for_the_maximum_it_is_sent(
    limits, gpt, provider_server
):
    """Anthropic requires a maximum: a body without one is sent the gateway's, and held for
    it (it used to be held for less than it was sent)."""
    cap = settings.GATEWAY_DEFAULT_MAX_TOKENS
    tokens, _ = limits
    gpt.chat.completions.create(model=CLAUDE, messages=HELLO)
    assert provider_server.requests_to(MESSAGES)[-1].body["max_tokens"] == cap
    recorded(1)
    settled_as_recorded(*limits)  # (settled after the answer: its hold may still be counted)
    tokens.limit = quotas.used(tokens) + cap  # less than the input and the cap
    tokens.save()
    with pytest.raises(openai.RateLimitError) as refused:
        gpt.chat.completions.create(model=CLAUDE, messages=HELLO)
    held = re.search(r"cannot take this call \(up to ([\d,]+) tokens more", refused.value.message)
    assert held is not None and int(held.group(1).replace(",", "")) > cap  # the input, and the cap
    assert len(provider_server.requests_to(MESSAGES)) == 1  # never sent
