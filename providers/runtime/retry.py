"""One retry policy for every provider call.

Exponential backoff with full jitter, Retry-After honoured (capped), bounded attempts
and total time. Only RateLimited, ProviderUnavailable and Timeout are retried; auth,
bad-request and model-behaviour errors never are.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from providers.runtime.errors import ProviderError, RateLimited

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 20.0
    max_total_s: float = 90.0

    def delay(self, attempt: int, error: ProviderError) -> float:
        """Seconds to wait before attempt `attempt + 1`."""
        if isinstance(error, RateLimited) and error.retry_after is not None:
            return min(max(error.retry_after, 0.0), self.max_delay_s)
        ceiling = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return random.uniform(0, ceiling)  # noqa: S311 (jitter)

    async def run(self, call: Callable[[], Awaitable[T]]) -> T:
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                return await call()
            except ProviderError as error:
                if not error.retryable or attempt >= self.max_attempts:
                    raise
                wait = self.delay(attempt, error)
                if time.monotonic() - started + wait > self.max_total_s:
                    raise
                await asyncio.sleep(wait)


NO_RETRY = RetryPolicy(max_attempts=1)
