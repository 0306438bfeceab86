"""MCP `tools/call` throughput: the platform's `/mcp` (API-key auth, the tenant's registry,
a Run recorded per call) vs a bare SDK `MCPServer` exposing the same trivial tool, side by
side in one run, driven by the SDK's own client.

Run: cd /work/main && .venv/bin/python bench/mcp.py
(prints a table, writes bench/results/mcp.json; BENCH_SMOKE=1: 2 callers, one short round
per side). Takes about a minute. Needs no network and
no configuration: the embedded PostgreSQL and Redis start in a temporary DATA_DIR (removed at
exit); each server is one `uvicorn` process (stateless Streamable HTTP, JSON responses,
DNS-rebinding protection on), started with the environment `manage.py serve` gives its
children.

The tool: `calculator` with {"expression": "6*7"} — on the platform the built-in (validated
arguments, the registry's execute path, a Run and its two events stored per call); on the
bare server an SDK tool calling the same `tools.runtime.calculator.evaluate`.

Load: CALLERS concurrent clients (each `streamable_http_client` + `ClientSession`, initialized
once), each calling in a loop for ROUND_S seconds; ROUNDS rounds per side, interleaved
(bare, platform, bare, platform...). Figures: calls/s (median of the rounds), per-call
latency p50/p99 over all rounds, errors, and the throughput ratio platform / bare (target:
at least 0.7). The platform's server assumes the app role (row-level security on) unless
DB_ROW_LEVEL_SECURITY=false is set, for a comparison.
"""

from __future__ import annotations

import asyncio
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0] or ".").resolve() == ROOT / "bench":
    sys.path.pop(0)  # bench/mcp.py would shadow the `mcp` SDK
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402

from bench.common import sized  # noqa: E402

CALLERS = sized(8, smoke=2)
ROUND_S = sized(5.0, smoke=0.5)
ROUNDS = sized(3, smoke=1)
WARMUP_S = sized(1.0, smoke=0.3)
TARGET_RATIO = 0.7
ARGUMENTS = {"expression": "6*7"}


def bare_app():
    """The bare side (`uvicorn bench.mcp:bare_app --factory`): an SDK MCPServer with one tool."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.transport_security import TransportSecuritySettings

    from tools.runtime.calculator import evaluate

    server = MCPServer("bare")

    @server.tool(name="calculator", description="Evaluate an arithmetic expression.")
    def calculator(expression: str) -> dict:
        return {"result": evaluate(expression)}

    return server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(
            allowed_hosts=["127.0.0.1:*"], allowed_origins=["http://127.0.0.1:*"]
        ),
    )


async def caller(url: str, headers: dict, until: float, latencies: list, errors: list) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        while time.perf_counter() < until:
            started = time.perf_counter()
            try:
                result = await session.call_tool("calculator", ARGUMENTS)
                if result.is_error:
                    errors.append(str(result.content)[:200])
                    continue
            except Exception as exc:  # counted, not fatal: the figures say how many
                errors.append(f"{type(exc).__name__}: {exc}"[:200])
                continue
            latencies.append(time.perf_counter() - started)


async def load(url: str, headers: dict, seconds: float) -> tuple[float, list[float], list[str]]:
    latencies: list[float] = []
    errors: list[str] = []
    started = time.perf_counter()
    until = started + seconds
    await asyncio.gather(*(caller(url, headers, until, latencies, errors) for _ in range(CALLERS)))
    wall = time.perf_counter() - started
    return len(latencies) / wall, latencies, errors


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


def main() -> None:
    from bench.common import (
        Child,
        configure_django,
        free_port,
        results_dir,
        wait_web,
        write_results,
    )

    configure_django("bench-mcp-")
    from agents.models import Run
    from tenancy.services import api_key_create, tenant_create

    tenant = tenant_create(slug="bench", name="Bench")
    _, key = api_key_create(tenant=tenant, name="bench", scopes=["read", "run"])

    logs = results_dir()
    logs.mkdir(parents=True, exist_ok=True)
    ours_port, bare_port = free_port(), free_port()
    uvicorn = ["-m", "uvicorn", "--host", "127.0.0.1", "--log-level", "warning"]
    ours = Child(
        "platform",
        [*uvicorn, "agentplatform.asgi:application", "--port", str(ours_port), "--lifespan", "on"],
        logs / "mcp-platform.log",
    )
    bare = Child(
        "bare",
        [*uvicorn, "bench.mcp:bare_app", "--factory", "--port", str(bare_port)],
        logs / "mcp-bare.log",
    )
    try:
        wait_web(ours, ours_port)
        wait_web(bare, bare_port)
        sides = {
            "bare SDK MCPServer": (f"http://127.0.0.1:{bare_port}/mcp", {}),
            "platform /mcp": (
                f"http://127.0.0.1:{ours_port}/mcp",
                {"Authorization": f"Bearer {key}"},
            ),
        }
        for url, headers in sides.values():  # warm both (imports, pools, caches)
            asyncio.run(load(url, headers, WARMUP_S))
        runs_before = Run.objects.filter(tenant=tenant).count()
        rates: dict[str, list[float]] = {side: [] for side in sides}
        latencies: dict[str, list[float]] = {side: [] for side in sides}
        errors: dict[str, list[str]] = {side: [] for side in sides}
        for _ in range(ROUNDS):
            for side, (url, headers) in sides.items():
                rate, lat, errs = asyncio.run(load(url, headers, ROUND_S))
                rates[side].append(rate)
                latencies[side] += lat
                errors[side] += errs
        recorded = Run.objects.filter(tenant=tenant).count() - runs_before
    finally:
        ours.stop()
        bare.stop()

    rows = []
    print(f"MCP tools/call, {CALLERS} concurrent SDK clients, {ROUNDS} x {ROUND_S:g} s per side")
    print(f"{'side':24} {'calls/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'calls':>7} {'errors':>7}")
    for side in sides:
        row = {
            "side": side,
            "calls_per_s": statistics.median(rates[side]),
            "rounds_calls_per_s": rates[side],
            "p50_ms": pct(latencies[side], 0.5),
            "p99_ms": pct(latencies[side], 0.99),
            "calls": len(latencies[side]),
            "errors": len(errors[side]),
            "first_errors": errors[side][:3],
        }
        rows.append(row)
        print(
            f"{side:24} {row['calls_per_s']:9.1f} {row['p50_ms']:8.1f} {row['p99_ms']:8.1f} "
            f"{row['calls']:7d} {row['errors']:7d}"
        )
    ratio = rows[1]["calls_per_s"] / rows[0]["calls_per_s"]
    verdict = "ok" if ratio >= TARGET_RATIO else "MISSED"
    print(f"throughput ratio platform / bare: {ratio:.2f}x (target >= {TARGET_RATIO}): {verdict}")
    print(f"runs recorded by the platform during the timed rounds: {recorded}")
    document = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "setup": {"callers": CALLERS, "round_s": ROUND_S, "rounds": ROUNDS},
        "sides": rows,
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "runs_recorded": recorded,
    }
    # A side without one successful call measured nothing.
    headline = {
        f"{row['side']} calls/s": row["calls_per_s"] if row["calls"] else None for row in rows
    }
    headline["ratio platform / bare"] = ratio if all(row["calls"] for row in rows) else None
    write_results("mcp", document, headline=headline)


if __name__ == "__main__":
    main()
