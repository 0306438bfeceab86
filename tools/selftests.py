"""Tool self-tests: every example a tool declares with what its result should be (built-ins
in code, configured tools in their `examples`, workflows where they are registered) run
through the tenant's registry like any call, and the outcome kept as the tool's health
(`ToolHealth`, one row per tool, replaced by each run). Run from the tool's page, REST
(`POST /api/v1/tools/{name}/selftest`), `manage.py selftest_tools` and a periodic task.

An example of a tool that writes, or needs approval, runs only when it is marked
`safe_to_run`: a self-test must not book, pay or delete anything nobody meant it to.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from asgiref.sync import async_to_sync
from django.utils import timezone

from agentplatform.tenancy.models import Tenant
from tools.loader import tenant_tools
from tools.models import ToolHealth, ToolHealthStatus
from tools.runtime.context import RunContext
from tools.runtime.definitions import WRITE_EFFECTS
from tools.runtime.expectations import ToolExample
from tools.runtime.tool import Tool, ToolCall
from tools.services import tool_context

CONCURRENT_TOOLS = 8
NOT_SAFE = "not run: this tool writes or needs approval; mark the example safe_to_run to run it"


def selftest_tools(tenant: Tenant, names: list[str] | None = None) -> list[ToolHealth]:
    """Run the self-tests of the tenant's tools that declare examples (`names`: only
    those), record each tool's health, and return them by name."""
    toolbox = tenant_tools(tenant)
    chosen = [
        item for item in toolbox.registry
        if item.selftests and (names is None or item.name in names)
    ]  # fmt: skip
    ctx = tool_context(tenant=tenant, secrets=toolbox.secrets)
    outcomes = async_to_sync(_run_all)(toolbox.registry, chosen, ctx)
    now = timezone.now()
    healths = []
    for item, results in zip(chosen, outcomes, strict=True):
        health, _ = ToolHealth.objects.update_or_create(
            tenant=tenant,
            tool_name=item.name,
            defaults={"status": _status(results), "results": results, "checked_at": now},
        )
        healths.append(health)
    return healths


def health_by_name(tenant: Tenant) -> dict[str, ToolHealth]:
    return {h.tool_name: h for h in ToolHealth.objects.filter(tenant=tenant)}


async def _run_all(registry, tools: list[Tool], ctx: RunContext) -> list[list[dict[str, Any]]]:
    limit = asyncio.Semaphore(CONCURRENT_TOOLS)

    async def one(item: Tool) -> list[dict[str, Any]]:
        async with limit:
            return [await _run(registry, item, n, e, ctx) for n, e in enumerate(item.selftests)]

    return list(await asyncio.gather(*(one(item) for item in tools)))


async def _run(registry, item: Tool, index: int, example: ToolExample, ctx) -> dict[str, Any]:
    name = example.name or f"example {index + 1}"
    risky = item.capability.effect in WRITE_EFFECTS or item.capability.requires_approval
    if risky and not example.safe_to_run:
        return {"name": name, "status": "skipped", "detail": NOT_SAFE, "latency_ms": 0}
    started = time.perf_counter()
    call = ToolCall(id=f"selftest-{index + 1}", name=item.name, arguments=example.arguments)
    result = await registry.execute(call, ctx)
    failure = example.expect.failure(result.result, result.error)
    return {
        "name": name,
        "status": "failed" if failure else "passed",
        "detail": failure or "",
        "latency_ms": round((time.perf_counter() - started) * 1000, 1),
    }


def _status(results: list[dict[str, Any]]) -> str:
    statuses = {r["status"] for r in results}
    if "failed" in statuses:
        return ToolHealthStatus.FAILING
    return ToolHealthStatus.PASSING if "passed" in statuses else ToolHealthStatus.SKIPPED
