"""What tracing costs a run: the agent loop with tracing off (no endpoint: the default) and
on (an OTLP/HTTP exporter to a collector stand-in on loopback), side by side.

Run: cd /work/main && .venv/bin/python bench/observability.py
(prints a table, writes bench/results/observability.json; BENCH_SMOKE=1: a few runs). Takes a
few seconds; no Django, no database, no network beyond loopback.

One run = the runtime's `run_agent` (agents/runtime/loop.py) with FakeModel (no HTTP): the
model calls `calculator`, then answers; inside a `run_span` as agents.runs.engine makes one.
On, that is 4 spans (invoke_agent, 2 chat, execute_tool), batched and exported by the SDK's
background thread to tests/fakes/otlp_collector.py. Sides alternate per round (the order
rotating), ROUNDS rounds of RUNS_PER_ROUND runs after a warm-up; figures are the median of
the rounds' per-run means, in microseconds, and the difference. Also: one hook entered and
left with tracing off (the cost every model and tool call pays by default), in nanoseconds.

The exporter's thread shares the GIL with the loop, so "on" includes its encoding and HTTP
work, spread over the runs. A platform run (database, Redis, provider HTTP) takes
milliseconds (bench/agents.py), so the difference is to be read against that.
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
# bench/ (the script's directory, first on sys.path) holds agents.py and mcp.py, which would
# shadow the packages: the repo root replaces it.
sys.path[0] = str(ROOT)

from agents.runtime import tracing  # noqa: E402
from agents.runtime.loop import run_agent  # noqa: E402
from agents.runtime.spec import AgentSpec  # noqa: E402
from bench.common import sized, write_results  # noqa: E402
from providers.runtime.fake import FakeModel  # noqa: E402
from tests.fakes.otlp_collector import OtlpCollector  # noqa: E402
from tools.runtime.builtins import calculator  # noqa: E402
from tools.runtime.context import RunContext  # noqa: E402
from tools.runtime.registry import ToolRegistry  # noqa: E402
from tools.runtime.tool import ToolCall  # noqa: E402

WARMUP_RUNS = sized(200, smoke=10)
ROUNDS = sized(15, smoke=2)
RUNS_PER_ROUND = sized(200, smoke=10)
HOOK_CALLS = sized(200_000, smoke=2_000)

SPEC = AgentSpec(name="bench", instructions="Be brief.", model="fake-model")
REGISTRY = ToolRegistry([calculator])


async def one_run(index: int) -> None:
    model = FakeModel([ToolCall(f"c{index}", "calculator", {"expression": "6*7"}), "42"])
    ctx = RunContext(tenant_id=1, run_id=str(index), correlation_id=f"corr-{index}")
    with tracing.run_span(
        agent="bench", run_id=index, tenant_id=1, correlation_id=ctx.correlation_id
    ):
        outcome = await run_agent(
            spec=SPEC, adapter=model, registry=REGISTRY, ctx=ctx, input="6*7?"
        )
    assert outcome.status.value == "succeeded", outcome.error


async def per_run_us(runs: int) -> float:
    started = time.perf_counter()
    for index in range(runs):
        await one_run(index)
    return (time.perf_counter() - started) / runs * 1e6


def hook_ns() -> float:
    """One model hook entered and left with tracing off."""
    request = type("Request", (), {"model": "m", "max_tokens": 1, "temperature": None})()
    started = time.perf_counter()
    for _ in range(HOOK_CALLS):
        with tracing.model_span("fake", request, None):
            pass
    return (time.perf_counter() - started) / HOOK_CALLS * 1e9


async def main() -> None:
    load_at_start = os.getloadavg()[0]
    collector = OtlpCollector()
    sides = {"off": [], "on (OTLP/HTTP)": []}

    def switch(side: str) -> None:
        if side == "off":
            tracing.uninstall()
        elif not tracing.enabled():
            tracing.install_otlp(collector.url, service_name="bench")

    for side in sides:
        switch(side)
        await per_run_us(WARMUP_RUNS)
    for round_ in range(ROUNDS):
        order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
        for side in order:
            switch(side)
            sides[side].append(await per_run_us(RUNS_PER_ROUND))
    tracing.uninstall()  # flushes what is left
    hook = hook_ns()
    collector.close()

    medians = {side: statistics.median(values) for side, values in sides.items()}
    off, on = medians["off"], medians["on (OTLP/HTTP)"]
    print(f"{'side':<18}{'us per run':>12}")
    for side, value in medians.items():
        print(f"{side:<18}{value:>12.1f}")
    print(f"{'difference':<18}{on - off:>12.1f}  ({(on - off) / 4:.1f} us per span, 4 spans a run)")
    print(f"one hook with tracing off: {hook:.0f} ns")
    print(f"spans received by the collector: {len(collector.spans)}")
    print(f"load average at start and end: {load_at_start:.1f}, {os.getloadavg()[0]:.1f}")
    if not collector.spans:  # then "on" measured tracing that exports nothing
        raise RuntimeError("tracing on: the collector received no spans")

    document = {
        "python": platform.python_version(),
        "load_average": [load_at_start, os.getloadavg()[0]],
        "rounds": ROUNDS,
        "runs_per_round": RUNS_PER_ROUND,
        "us_per_run": medians,
        "difference_us_per_run": on - off,
        "hook_off_ns": hook,
        "spans_received": len(collector.spans),
    }
    headline = {"off µs/run": off, "on µs/run": on, "difference µs/run": on - off}
    write_results("observability", document, headline={**headline, "hook off ns": hook})


if __name__ == "__main__":
    asyncio.run(main())
