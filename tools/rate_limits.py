"""The platform's tool rate limiter: counts in the shared Redis, so a tenant's limit holds
across every web and worker process (tools/runtime/rate_limit.py has the contract)."""

from __future__ import annotations

from base.rate_counters import hits_async
from tools.runtime.rate_limit import WINDOW_S, RateLimited


def counter_name(tenant_id: int | str, tool: str) -> str:
    return f"tool-rate:{tenant_id}:{tool}"


class RedisRateLimiter:
    """One round trip per call of a limited tool (calls of the same moment share it);
    tools without a limit never get here. Refused calls count too, which changes nothing:
    the window still closes when it would have."""

    async def take(self, tenant_id: int | str, tool: str, per_minute: int) -> RateLimited | None:
        [count] = await hits_async([(counter_name(tenant_id, tool), WINDOW_S)])
        if count.value <= per_minute:
            return None
        return RateLimited(tool, per_minute, count.retry_after_s)


TOOL_RATE_LIMITER = RedisRateLimiter()  # holds nothing: the counts live in Redis
