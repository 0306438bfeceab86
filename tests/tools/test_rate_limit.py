"""Per-tool rate limits (tools/runtime/rate_limit.py) and where the registry enforces them
(ToolRegistry.execute): each test of a limiter runs against the platform's (counts in the
real Redis, tools/rate_limits.py) and the pure runtime's in-process one."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from tools.rate_limits import TOOL_RATE_LIMITER
from tools.runtime.context import RunContext
from tools.runtime.rate_limit import MemoryRateLimiter, RateLimited
from tools.runtime.registry import ToolRegistry
from tools.runtime.tool import Capability, Tool, ToolCall

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}


def limited_tool(name: str, per_minute: int | None, executed: list) -> Tool:
    async def handler(arguments: dict, ctx: RunContext) -> dict:
        executed.append(arguments)
        return {"ok": True}

    capability = Capability(rate_limit_per_minute=per_minute)
    return Tool(name, f"The {name} tool.", SCHEMA, handler, capability=capability)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["redis", "memory"])
def limiter(request):
    return TOOL_RATE_LIMITER if request.param == "redis" else MemoryRateLimiter()


def fresh_tenant() -> int:
    """A tenant id no other test counted for (Redis keeps a count for its minute)."""
    return 10**9 + uuid.uuid4().int % 10**9


def calls(registry: ToolRegistry, ctx: RunContext, name: str, times: int) -> list:
    async def go() -> list:
        return [
            await registry.execute(ToolCall(f"c{i}", name, {"q": "x"}), ctx) for i in range(times)
        ]

    return asyncio.run(go())


def test_the_memory_limiter_counts_a_fixed_minute_per_tenant_and_tool():
    clock = Clock()
    limiter = MemoryRateLimiter(clock)
    take = lambda tenant, tool: asyncio.run(limiter.take(tenant, tool, 2))  # noqa: E731
    assert take(1, "search") is None and take(1, "search") is None
    clock.now += 20
    assert take(1, "search") == RateLimited("search", 2, 40)  # the window opened 20 s ago
    assert take(2, "search") is None and take(1, "fetch") is None  # counted apart
    clock.now += 40
    assert take(1, "search") is None  # a new window


def test_a_limiter_counts_a_minute_per_tenant_and_tool(limiter):
    acme, globex = fresh_tenant(), fresh_tenant()

    async def takes() -> list:
        return [
            await limiter.take(acme, "search", 2),
            await limiter.take(acme, "search", 2),
            await limiter.take(acme, "search", 2),
            await limiter.take(globex, "search", 2),
            await limiter.take(acme, "fetch", 2),
        ]

    first, second, third, other_tenant, other_tool = asyncio.run(takes())
    assert first is second is other_tenant is other_tool is None
    assert (third.tool, third.limit) == ("search", 2) and 58 <= third.retry_after_s <= 60


def test_a_call_over_the_limit_is_not_executed_and_the_model_reads_why(limiter):
    executed: list = []
    registry = ToolRegistry([limited_tool("search", 2, executed)])
    events: list[tuple[str, dict[str, Any]]] = []
    ctx = RunContext(
        tenant_id=fresh_tenant(), rate_limiter=limiter, events=lambda t, p: events.append((t, p))
    )
    first, second, third = calls(registry, ctx, "search", 3)
    assert first.error is None and second.error is None and len(executed) == 2
    wait = third.rate_limited.retry_after_s
    assert third.result is None and third.rate_limited == RateLimited("search", 2, wait)
    assert 58 <= wait <= 60
    assert third.error == (
        f"tool search is limited to 2 calls per minute for this tenant; try again in {wait} s"
    )
    assert [t for t, _ in events][-3:] == ["tool.started", "tool.rate_limited", "tool.completed"]
    assert events[-2][1] == {"call_id": "c2", "name": "search", "limit": 2, "retry_after_s": wait}


def test_invalid_calls_and_tools_without_a_limit_are_not_counted():
    executed: list = []

    class Counting(MemoryRateLimiter):
        def __init__(self) -> None:
            super().__init__()
            self.asked: list[str] = []

        async def take(self, tenant_id, tool, per_minute):
            self.asked.append(tool)
            return await super().take(tenant_id, tool, per_minute)

    limiter = Counting()
    registry = ToolRegistry(
        [limited_tool("search", 1, executed), limited_tool("free", None, executed)]
    )
    ctx = RunContext(tenant_id=1, rate_limiter=limiter)

    async def go() -> list:
        return [
            await registry.execute(ToolCall("bad", "search", {"q": 5}), ctx),  # invalid
            await registry.execute(ToolCall("ok", "search", {"q": "x"}), ctx),
            await registry.execute(ToolCall("f", "free", {"q": "x"}), ctx),
        ]

    bad, ok, free = asyncio.run(go())
    assert bad.error.startswith("invalid arguments") and bad.rate_limited is None
    assert ok.error is None and free.error is None  # the invalid call used none of the 1
    assert limiter.asked == ["search"]


def test_other_tenants_have_their_own_count(limiter):
    executed: list = []
    registry = ToolRegistry([limited_tool("search", 1, executed)])
    acme, globex = (
        RunContext(tenant_id=fresh_tenant(), rate_limiter=limiter),
        RunContext(fresh_tenant(), rate_limiter=limiter),
    )
    assert calls(registry, acme, "search", 2)[1].rate_limited is not None
    assert calls(registry, globex, "search", 1)[0].error is None


def test_a_limiter_that_fails_refuses_the_call_rather_than_let_it_through(caplog):
    executed: list = []

    class Down:
        async def take(self, tenant_id, tool, per_minute):
            raise ConnectionError("redis is down")

    registry = ToolRegistry([limited_tool("search", 5, executed)])
    [result] = calls(registry, RunContext(tenant_id=1, rate_limiter=Down()), "search", 1)
    assert executed == [] and "failed unexpectedly" in result.error
    assert "counting the calls of tool search" in caplog.text and "redis is down" in caplog.text


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
def test_a_capability_refuses_a_limit_that_is_not_a_positive_whole_number(bad):
    with pytest.raises(ValueError, match="rate_limit_per_minute"):
        Capability(rate_limit_per_minute=bad)
