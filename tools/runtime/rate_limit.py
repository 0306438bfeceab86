"""Per-tool rate limits: at most N calls of a tool a minute, per tenant.

A tool's `Capability.rate_limit_per_minute` says how many; the `RateLimiter` on the
`RunContext` counts. `ToolRegistry.execute` asks it once per call that is about to run (its
arguments valid) and, over the limit, runs nothing and hands the model `RateLimited.message`.
The platform's limiter counts in Redis, so every process of a deployment shares one count
(tools/rate_limits.py); `MemoryRateLimiter` counts in this process only (the runtime used
without the platform).

Windows are fixed minutes opened by their first call (as the platform's API budgets are):
simple and one atomic round trip, at the cost of letting up to 2N calls through across a
window's edge.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Protocol

WINDOW_S = 60


@dataclass(frozen=True, slots=True)
class RateLimited:
    """A call refused because its tool had had `limit` calls in this tenant's window."""

    tool: str
    limit: int
    retry_after_s: int  # until the window closes

    @property
    def message(self) -> str:
        """What the model reads, as the call's error."""
        return (
            f"tool {self.tool} is limited to {self.limit} calls per minute for this tenant; "
            f"try again in {self.retry_after_s} s"
        )


class RateLimiter(Protocol):
    async def take(self, tenant_id: int | str, tool: str, per_minute: int) -> RateLimited | None:
        """Count one call of `tool` for the tenant: None if it is within `per_minute` in the
        current window, else why not. May raise when the count cannot be kept (the
        registry then refuses the call rather than let it through uncounted)."""
        ...


class MemoryRateLimiter:
    """Fixed windows held in this process: the runtime's without the platform (tests/tools/
    test_rate_limit.py holds it to the tests the platform's limiter passes)."""

    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self._windows: dict[tuple[str, str], tuple[float, int]] = {}  # -> (ends at, calls)

    async def take(self, tenant_id: int | str, tool: str, per_minute: int) -> RateLimited | None:
        now = self._clock()
        key = (str(tenant_id), tool)
        ends, calls = self._windows.get(key, (0.0, 0))
        if now >= ends:
            ends, calls = now + WINDOW_S, 0
        calls += 1
        self._windows[key] = (ends, calls)
        if calls <= per_minute:
            return None
        return RateLimited(tool, per_minute, max(1, math.ceil(ends - now)))
