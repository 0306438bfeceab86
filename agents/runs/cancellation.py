"""Cancelling a run that executes: a flag in Redis under the run's key, which its loop checks
between steps and while a model streams (agents.runtime.loop), and finalize clears.

The checks of one event loop travel together: those asked while a round trip is on its way
go in the next one, as one MGET on the loop's own Redis connection (agentplatform.
redis_wire). A check each step through redis-py's client on the run's database lane cost a
thread hop and waited behind that lane's statements (five a run, about 0.2 ms each in
bench/agents.py's breakdown); a worker holding hundreds of runs sends one command for all
the checks of a moment.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from django.conf import settings

from agentplatform.redis_wire import RedisWire
from agents.models import Run
from agents.runs.channels import publisher
from providers.runtime.clients import PerLoop

FLAG_TTL_S = 24 * 3600  # an unread flag (a run that ended meanwhile) expires on its own


def cancel_key(run: Run) -> str:
    # The correlation id makes keys unique even where run ids repeat (a reset database
    # beside a kept Redis, test sessions sharing one Redis).
    return f"ap:run:{run.pk}:{run.correlation_id}:cancel"


def request_cancel(run: Run) -> None:
    """Ask the loop executing `run` to stop at its next check."""
    publisher().set(cancel_key(run), 1, ex=FLAG_TTL_S)


def forget(run: Run) -> None:
    """The run has ended cancelled: its flag has been read."""
    publisher().delete(cancel_key(run))


def checker(run: Run) -> Callable[[], Awaitable[bool]]:
    """The run's check for its loop: has someone asked it to stop?"""
    key = cancel_key(run)

    async def is_cancelled() -> bool:
        checks = await _checks.get()
        return await checks.ask(key)

    return is_cancelled


class _Checks:
    """The cancel checks of one event loop: one round trip at a time, on its own client."""

    def __init__(self) -> None:
        self.waiting: list[tuple[str, asyncio.Future]] = []
        self.draining: asyncio.Task | None = None
        self.redis = RedisWire(settings.REDIS_URL)

    async def ask(self, key: str) -> bool:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.waiting.append((key, future))
        if self.draining is None:
            self.draining = loop.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self.waiting:
                batch, self.waiting = self.waiting, []
                try:
                    flags = await self.redis.call("MGET", *(key for key, _ in batch))
                except Exception as exc:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, future), flag in zip(batch, flags, strict=True):
                    if not future.done():
                        future.set_result(flag is not None)
        finally:
            self.draining = None

    async def close(self) -> None:
        self.redis.close()


_checks: PerLoop[_Checks] = PerLoop(_Checks, _Checks.close)
