"""Cancelling a run that executes: a flag in Redis under the run's key, which its loop checks
between steps and while a model streams (agents.runtime.loop), and finalize clears.

The checks of one event loop travel together: those asked while a round trip is on its way
go in the next one, as one MGET on the loop's own Redis connection (agentplatform.
redis_wire). A check each step through redis-py's client on the run's database lane cost a
thread hop and waited behind that lane's statements (five a run, about 0.2 ms each in
bench/agents.py's breakdown); a worker holding hundreds of runs sends one command for all
the checks of a moment. A round's check also reads the run's steering flag
(agents.runs.steering) in the same MGET: no round trip of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from django.conf import settings

from agents.models import Run
from agents.runs.channels import publisher
from base.redis_wire import Batched, RedisWire
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
        (cancelled,) = await flags_set(key)
        return cancelled

    return is_cancelled


async def flags_set(*keys: str) -> tuple[bool, ...]:
    """Which of these flags are set: the event loop's checks of a moment go together, as
    one MGET."""
    return await (await _checks.get()).ask(keys)


async def _flags(redis: RedisWire, asked: list[tuple[str, ...]]) -> list[tuple[bool, ...]]:
    values = iter(await redis.call("MGET", *(key for keys in asked for key in keys)))
    return [tuple(next(values) is not None for _ in keys) for keys in asked]


async def _close(checks: Batched) -> None:
    checks.redis.close()


_checks: PerLoop[Batched[tuple[str, ...], tuple[bool, ...]]] = PerLoop(
    lambda: Batched(settings.REDIS_URL, _flags), _close
)
