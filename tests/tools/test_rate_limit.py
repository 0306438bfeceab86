"""Per-tool rate limits in the pure runtime (tools/runtime/rate_limit.py) and where the
registry enforces them (ToolRegistry.execute): no Django, no Redis."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

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


def test_a_call_over_the_limit_is_not_executed_and_the_model_reads_why():
    executed: list = []
    registry = ToolRegistry([limited_tool("search", 2, executed)])
    events: list[tuple[str, dict[str, Any]]] = []
    ctx = RunContext(
        tenant_id=1, rate_limiter=MemoryRateLimiter(), events=lambda t, p: events.append((t, p))
    )
    first, second, third = calls(registry, ctx, "search", 3)
    assert first.error is None and second.error is None and len(executed) == 2
    assert third.result is None and third.rate_limited == RateLimited("search", 2, 60)
    assert third.error == (
        "tool search is limited to 2 calls per minute for this tenant; try again in 60 s"
    )
    assert [t for t, _ in events][-3:] == ["tool.started", "tool.rate_limited", "tool.completed"]
    assert events[-2][1] == {"call_id": "c2", "name": "search", "limit": 2, "retry_after_s": 60}


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


def test_other_tenants_have_their_own_count():
    executed: list = []
    registry = ToolRegistry([limited_tool("search", 1, executed)])
    limiter = MemoryRateLimiter()
    acme, globex = (
        RunContext(tenant_id=1, rate_limiter=limiter),
        RunContext(2, rate_limiter=limiter),
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
