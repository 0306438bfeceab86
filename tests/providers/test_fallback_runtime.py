"""providers/runtime/fallback.py without Django: the order of a call (pool, balancing,
failing last), falling back in complete() and in a stream only before its first event,
non-retryable errors raised at once, the switch hook, the in-flight counts."""

from __future__ import annotations

import asyncio

import pytest

from providers.runtime.errors import BadRequest, ProviderUnavailable, RateLimited
from providers.runtime.fake import FakeModel, Stream
from providers.runtime.fallback import Balancer, FallbackAdapter, Target, call_order
from providers.runtime.types import Done, ModelRequest, ModelResponse, TextDelta, UserMessage

REQUEST = ModelRequest(model="m", messages=[UserMessage("hi")])


def target(key: str, model: str = "m", adapter=None, healthy: bool = True) -> Target:
    return Target(key, key.upper(), model, adapter or FakeModel(), healthy)


def keys(targets) -> list[str]:
    return [t.key for t in targets]


def test_round_robin_turns_the_pool_and_keeps_other_models_after_it():
    balancer = Balancer()
    targets = [target("a"), target("b"), target("x", model="other"), target("c")]
    orders = [keys(call_order(targets, "round_robin", balancer)) for _ in range(3)]
    assert orders == [["a", "b", "c", "x"], ["b", "c", "a", "x"], ["c", "a", "b", "x"]]
    assert keys(call_order(targets, "", balancer)) == ["a", "b", "c", "x"]


def test_least_in_flight_starts_with_the_least_busy():
    balancer = Balancer()
    targets = [target("a"), target("b"), target("c")]
    with balancer.counting("a"), balancer.counting("a"), balancer.counting("b"):
        assert keys(call_order(targets, "least_in_flight", balancer)) == ["c", "b", "a"]
    assert balancer.in_flight("a") == 0
    assert keys(call_order(targets, "least_in_flight", balancer)) == ["a", "b", "c"]


def test_failing_targets_go_last():
    targets = [target("a", healthy=False), target("b"), target("x", model="o", healthy=False)]
    assert keys(call_order(targets, "", Balancer())) == ["b", "a", "x"]


def run(coro):
    return asyncio.run(coro)


def test_complete_falls_back_with_the_fallbacks_model_and_says_why():
    first = FakeModel([RateLimited("HTTP 429 with provider text")])
    second = FakeModel(["from b"])
    switched = []

    async def hook(failed, following, reason):
        switched.append((failed.label, following.label, reason))

    adapter = FallbackAdapter(
        [target("a", adapter=first), target("b", model="n", adapter=second)],
        balancer=Balancer(),
        on_switch=hook,
    )
    assert run(adapter.complete(REQUEST)).text == "from b"
    assert second.requests[0].model == "n"
    [(frm, to, reason)] = switched
    assert (frm, to) == ("A/m", "B/n") and "rate limit" in reason and "provider text" not in reason


def test_a_bad_request_is_raised_without_trying_the_next():
    second = FakeModel(["never"])
    adapter = FallbackAdapter(
        [target("a", adapter=FakeModel([BadRequest("no")])), target("b", adapter=second)],
        balancer=Balancer(),
    )
    with pytest.raises(BadRequest):
        run(adapter.complete(REQUEST))
    assert second.requests == []


def test_the_last_failure_is_raised():
    adapter = FallbackAdapter(
        [
            target("a", adapter=FakeModel([ProviderUnavailable("a down")])),
            target("b", adapter=FakeModel([ProviderUnavailable("b down")])),
        ],
        balancer=Balancer(),
    )
    with pytest.raises(ProviderUnavailable, match="b down"):
        run(adapter.complete(REQUEST))


def test_no_fallback_once_the_budget_is_spent():
    second = FakeModel(["never"])
    adapter = FallbackAdapter(
        [
            target("a", adapter=FakeModel([ProviderUnavailable("down")])),
            target("b", adapter=second),
        ],
        balancer=Balancer(),
        budget_s=0,
    )
    with pytest.raises(ProviderUnavailable):
        run(adapter.complete(REQUEST))
    assert second.requests == []


async def collect(adapter) -> list:
    return [event async for event in adapter.stream(REQUEST)]


def test_a_stream_falls_back_before_its_first_event():
    adapter = FallbackAdapter(
        [
            target("a", adapter=FakeModel([Stream([ProviderUnavailable("down")])])),
            target("b", adapter=FakeModel([Stream([TextDelta("hello")])])),
        ],
        balancer=Balancer(),
    )
    events = run(collect(adapter))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["hello"]
    assert isinstance(events[-1], Done)


def test_a_stream_that_began_does_not_fall_back():
    second = FakeModel(["never"])
    broken = Stream([TextDelta("hel"), ProviderUnavailable("cut")])
    adapter = FallbackAdapter(
        [target("a", adapter=FakeModel([broken])), target("b", adapter=second)],
        balancer=Balancer(),
    )
    with pytest.raises(ProviderUnavailable):
        run(collect(adapter))
    assert second.requests == []


def test_the_pool_serves_the_requested_model():
    """A call with another model (a tool-selection call) keeps it on the pool's members."""
    second = FakeModel([ModelResponse(text="ok")])
    adapter = FallbackAdapter(
        [target("a", adapter=FakeModel([RateLimited("x")])), target("b", adapter=second)],
        balancer=Balancer(),
    )
    run(adapter.complete(ModelRequest(model="selector", messages=[UserMessage("hi")])))
    assert second.requests[0].model == "selector"
