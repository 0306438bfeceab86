"""Provider fallback and load sharing: one ModelAdapter over an ordered list of targets
(connection + model).

`FallbackAdapter.complete`/`stream` send the request to the first target of the call's
order; on a retryable failure (rate limited, unavailable: 5xx or connection refused, timed
out: `ProviderError.retryable`), after that connection's own retries, the next target is
tried, and `on_switch` is told (the run records a `provider.fallback` event). A failure
that is not retryable (a bad request, a refused key) is raised at once: another connection
would refuse it too, or an admin must act. Falling back stops once `budget_s` has passed
since the call began (the run's retry budget: RetryPolicy's total time), and a stream falls
back only before its first event (what was shown cannot be taken back).

The order of a call: the targets that serve the primary's model share its load (the
pool: several keys or deployments of one model), round robin or least in flight; the
other targets follow in their order, as fallbacks only. Targets whose connection's health
check is failing go last: they are tried only once every healthy one has failed.

The in-flight counts and the round-robin turn are per process (`Balancer`): each run
worker holds up to RUN_CONCURRENCY runs on one event loop, so a process sees enough of
the traffic to spread it, and counts kept in Redis would outlive a process that dies
mid-call (they would need leases to be repaired). Many processes each spreading evenly
spread evenly together.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Literal, Protocol, TypeVar

from providers.runtime.adapter import ModelAdapter
from providers.runtime.errors import ProviderError, provider_failure
from providers.runtime.types import ModelRequest, ModelResponse, StreamEvent

Balancing = Literal["", "round_robin", "least_in_flight"]
BALANCING: tuple[str, ...] = ("", "round_robin", "least_in_flight")
DEFAULT_BUDGET_S = 90.0  # as RetryPolicy.max_total_s: a call's whole retry time


@dataclass(frozen=True)
class Target:
    """One connection and model a call may go to. `key` identifies the connection for the
    balancer (its id); `connection` is its name, as events show it."""

    key: str
    connection: str
    model: str
    adapter: ModelAdapter
    healthy: bool = True

    @property
    def label(self) -> str:
        return f"{self.connection}/{self.model}"


SwitchHook = Callable[[Target, Target, str], Awaitable[None]]


class Routable(Protocol):
    """What ordering needs of a target (a Target, or the gateway's route)."""

    @property
    def key(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def healthy(self) -> bool: ...


R = TypeVar("R", bound=Routable)


class Balancer:
    """Per-process in-flight counts and round-robin turns, by target key (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight: dict[str, int] = {}
        self._turns = itertools.count()

    def in_flight(self, key: str) -> int:
        return self._in_flight.get(key, 0)

    def turn(self) -> int:
        with self._lock:
            return next(self._turns)

    @contextmanager
    def counting(self, key: str):
        with self._lock:
            self._in_flight[key] = self._in_flight.get(key, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                left = self._in_flight.get(key, 1) - 1
                if left > 0:
                    self._in_flight[key] = left
                else:
                    self._in_flight.pop(key, None)


def call_order(targets: Sequence[R], balancing: str, balancer: Balancer) -> list[R]:
    """The order one call tries `targets` in (the first is the primary): the pool sharing
    the primary's model balanced, then the other targets; failing ones last."""
    if not targets:
        return []
    primary_model = targets[0].model
    pool = [t for t in targets if t.model == primary_model]
    rest = [t for t in targets if t.model != primary_model]
    if balancing == "round_robin" and len(pool) > 1:
        start = balancer.turn() % len(pool)
        pool = pool[start:] + pool[:start]
    elif balancing == "least_in_flight" and len(pool) > 1:
        pool = sorted(pool, key=lambda t: balancer.in_flight(t.key))  # stable: ties keep order
    ordered = pool + rest
    return [t for t in ordered if t.healthy] + [t for t in ordered if not t.healthy]


class FallbackAdapter:
    """A ModelAdapter trying `targets` in turn (see the module's docstring). `targets[0]`
    is the primary: the request's own model goes to the pool sharing its model; another
    target gets its own model."""

    def __init__(
        self,
        targets: Sequence[Target],
        *,
        balancing: str = "",
        balancer: Balancer,
        on_switch: SwitchHook | None = None,
        budget_s: float = DEFAULT_BUDGET_S,
    ) -> None:
        if not targets:
            raise ValueError("a fallback adapter needs at least one target")
        self.targets = tuple(targets)
        self.balancing = balancing
        self.balancer = balancer
        self.on_switch = on_switch
        self.budget_s = budget_s
        self.provider = targets[0].adapter.provider

    def _request_for(self, target: Target, request: ModelRequest) -> ModelRequest:
        if target.model == self.targets[0].model:
            return request  # the pool serves what was asked (also a selection model's call)
        return replace(request, model=target.model)

    async def _switch(
        self, order: list[Target], index: int, error: ProviderError, started: float
    ) -> bool:
        """Whether to go on to `order[index + 1]` after `error` (said to `on_switch`)."""
        if not error.retryable or index + 1 >= len(order):
            return False
        if time.monotonic() - started >= self.budget_s:
            return False
        failed, following = order[index], order[index + 1]
        if self.on_switch is not None:
            reason = provider_failure(error, failed.connection, failed.model)
            await self.on_switch(failed, following, reason)
        return True

    async def complete(self, request: ModelRequest) -> ModelResponse:
        order = call_order(self.targets, self.balancing, self.balancer)
        started = time.monotonic()
        for index, target in enumerate(order):
            try:
                with self.balancer.counting(target.key):
                    return await target.adapter.complete(self._request_for(target, request))
            except ProviderError as error:
                if not await self._switch(order, index, error, started):
                    raise
        raise AssertionError("unreachable: the last target raises")  # pragma: no cover

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        order = call_order(self.targets, self.balancing, self.balancer)
        started = time.monotonic()
        for index, target in enumerate(order):
            began = False
            try:
                with self.balancer.counting(target.key):
                    async for event in target.adapter.stream(self._request_for(target, request)):
                        began = True
                        yield event
                return
            except ProviderError as error:
                if began or not await self._switch(order, index, error, started):
                    raise

    async def list_models(self) -> list[str]:
        return await self.targets[0].adapter.list_models()  # type: ignore[attr-defined]
