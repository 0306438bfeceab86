"""Tool self-tests: every example a tool declares with what its result should be (built-ins
in code, configured tools in their `examples`, workflows where they are registered) called
as a direct call of whoever asked (`agents.runs.tool_run`, via `selftest`: the tool-call
step's approval rule, rate limit, quotas and egress, recorded as a run), and the outcome
kept as the tool's health (`ToolHealth`, one row per tool, replaced by each run). Run from
the tool's page, REST (`POST /api/v1/tools/{name}/selftest`), `manage.py selftest_tools` and
a periodic task (those two as the platform).

An example of a tool that writes, or needs approval, runs only when it is marked
`safe_to_run`: a self-test must not book, pay or delete anything nobody meant it to. Even
then a tool that needs approval is not run: nobody can approve a self-test's call, so the
step refuses it (recorded) and the example is `skipped`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.utils import timezone

from agents.runs import atool_run_on_callers_thread
from tenancy.models import ApiKey, Tenant
from tenancy.policy import Principal
from tools.loader import tenant_tools
from tools.models import ToolHealth, ToolHealthStatus
from tools.runtime.definitions import WRITE_EFFECTS
from tools.runtime.expectations import ToolExample
from tools.runtime.tool import Tool

CONCURRENT_TOOLS = 8
NOT_SAFE = "not run: this tool writes or needs approval; mark the example safe_to_run to run it"
GONE = "not run: the tool was removed while its self-tests ran"
UNATTENDED = (
    "not run: this tool needs approval, and nobody can approve a self-test's call; "
    "test it with a call of your own"
)


def selftest_tools(
    tenant: Tenant,
    names: list[str] | None = None,
    *,
    by: AbstractBaseUser | ApiKey | None = None,
) -> list[ToolHealth]:
    """Run the self-tests of the tenant's tools that declare examples (`names`: only
    those), record each tool's health, and return them by name. `by`: who asked (None: the
    platform); PermissionDenied, before anything runs, unless they may execute each tool.
    Each example that runs is a recorded run of its own."""
    toolbox = tenant_tools(tenant)
    chosen = [
        item for item in toolbox.registry
        if item.selftests and (names is None or item.name in names)
    ]  # fmt: skip
    if by is not None:
        principal = Principal.for_initiator(tenant, by)
        if not all(principal.may_execute_tool(item.name) for item in chosen):
            raise PermissionDenied("You may not execute this tool.")
    caller = {"api_key": by} if isinstance(by, ApiKey) else {"user": by}
    outcomes = async_to_sync(_run_all)(tenant, chosen, caller)
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


async def _run_all(
    tenant: Tenant, tools: list[Tool], caller: dict[str, Any]
) -> list[list[dict[str, Any]]]:
    limit = asyncio.Semaphore(CONCURRENT_TOOLS)

    async def one(item: Tool) -> list[dict[str, Any]]:
        async with limit:
            return [
                await _run(tenant, item, n, example, caller)
                for n, example in enumerate(item.selftests)
            ]

    return list(await asyncio.gather(*(one(item) for item in tools)))


async def _run(
    tenant: Tenant, item: Tool, index: int, example: ToolExample, caller: dict[str, Any]
) -> dict[str, Any]:
    name = example.name or f"example {index + 1}"
    risky = item.capability.effect in WRITE_EFFECTS or item.capability.requires_approval
    if risky and not example.safe_to_run:
        return {"name": name, "status": "skipped", "detail": NOT_SAFE, "latency_ms": 0}
    try:
        outcome = await atool_run_on_callers_thread(
            tenant=tenant, name=item.name, arguments=example.arguments, via="selftest",
            unattended=UNATTENDED, **caller,
        )  # fmt: skip
    except Http404:  # deleted since the examples were listed
        return {"name": name, "status": "skipped", "detail": GONE, "latency_ms": 0}
    shown = {"name": name, "run_id": outcome.run_id}
    if outcome.error == UNATTENDED:  # refused by the step's approval rule, not a failure
        return {**shown, "status": "skipped", "detail": UNATTENDED, "latency_ms": 0}
    failure = example.expect.failure(outcome.result, outcome.error)
    return {
        **shown,
        "status": "failed" if failure else "passed",
        "detail": failure or "",
        "latency_ms": round(outcome.latency_ms, 1),
    }


def _status(results: list[dict[str, Any]]) -> str:
    statuses = {r["status"] for r in results}
    if "failed" in statuses:
        return ToolHealthStatus.FAILING
    return ToolHealthStatus.PASSING if "passed" in statuses else ToolHealthStatus.SKIPPED
