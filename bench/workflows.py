"""What the declared-workflow engine adds per step over doing the same steps by hand, side by
side in one run against the local fake provider server (tests/fakes/provider_server.py).

Run: cd /work/main && .venv/bin/python bench/workflows.py
(prints a table, writes bench/results/workflows.json). Takes a minute; BENCH_SMOKE=1 runs a
few of each, in seconds. Needs no network and no configuration: the embedded PostgreSQL and
Redis start in a temporary DATA_DIR (removed at exit).

The workflow (a tenant's WorkflowDefinition, agents/workflows/), three steps:
1. `total`: the built-in `calculator` tool with {"expression": "6*7"};
2. `prompt`: a JMESPath transform building a sentence from it;
3. `answer`: an agent step (the tenant's agent on an OpenAI connection to the fake server,
   which answers "ok" at once).

Sides, interleaved run by run (the order alternating), after WARMUP_RUNS untimed runs each:
1. by hand: `tools.runtime.calculator.evaluate`, `jmespath.search` on the same expression,
   one `chat.completions.create` (`openai.AsyncOpenAI(http_client=httpx2...,
   max_retries=0)`; not streamed: a workflow's agent step is not either) with the same
   system prompt and message. No persistence; one client and one event loop for all runs.
2. platform: `agents.runs.workflow_start(enqueue=False)` (input checked against the
   workflow's schema, the Run row) and `agents.runs.execute_run` in this process, as a worker
   runs it: claim and lease, the workflow compiled from its snapshot, the tenant's registry,
   every step's start/completion events stored and published to Redis, a checkpoint of the
   step records after every step, the agent step through the agent loop (its model call
   held against the quotas), finalize.

Figures: median ms per run of each side, the platform's overhead per run and per step
(÷ 3 declared steps; the engine also records its input and output pseudo-steps), the DB
queries of one platform run by kind, its events, and a breakdown of the platform run from
INSTRUMENTED_RUNS extra runs with timers around its parts (`_prepare`: registry, compile,
adapters; the durable checkpoint waits, RunWriter.save; the model call,
OpenAIAdapter.complete; the rest by difference: claim, events, the loop, finalize).

This process runs as the database owner (no row-level security); bench/agents.py measures
what the app role adds to a run.
The machine may be shared: the load average at start and end goes into the JSON.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0] or ".").resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
import jmespath  # noqa: E402
import openai  # noqa: E402

from bench.common import configure_django, sized, write_results  # noqa: E402
from tools.runtime.calculator import evaluate  # noqa: E402

RUNS = sized(40, smoke=3)
WARMUP_RUNS = sized(3, smoke=1)
INSTRUMENTED_RUNS = sized(20, smoke=2)
MODEL = "gpt-test"
STEPS = 3  # declared: a tool, a transform, an agent
TRANSFORM = "join(' ', ['The total is', to_string(total.result)])"
WORKFLOW = {
    "input": {"type": "object", "properties": {"expression": {"type": "string"}}},
    "steps": [
        {"id": "total", "tool": "calculator", "arguments": {"expression": "input.expression"}},
        {"id": "prompt", "transform": TRANSFORM},
        {"id": "answer", "agent": "explainer", "prompt": "prompt"},
    ],
}
INPUT = {"expression": "6*7"}
INSTRUCTIONS = "Say the total in words."


class ByHand:
    """The same three steps with the libraries directly."""

    def __init__(self, base_url: str, system: str) -> None:
        self.client = openai.AsyncOpenAI(
            api_key="k", base_url=base_url, http_client=httpx2.AsyncClient(), max_retries=0
        )
        self.system = system
        self.transform = jmespath.compile(TRANSFORM)

    async def run(self) -> str:
        total = {"result": evaluate(INPUT["expression"])}
        prompt = self.transform.search({"input": INPUT, "total": total})
        completion = await self.client.chat.completions.create(
            model=MODEL,
            messages=[
                {"role": "system", "content": self.system},
                {"role": "user", "content": prompt},
            ],
        )
        return completion.choices[0].message.content or ""


class Platform:
    def __init__(self, tenant: Any, definition: Any) -> None:
        self.tenant, self.definition = tenant, definition

    def run(self) -> Any:
        from agents.models import Run
        from agents.runs import execute_run, workflow_start

        run = workflow_start(
            tenant=self.tenant, workflow=self.definition, input=INPUT, enqueue=False
        )
        status = execute_run(run.pk)
        if status != "succeeded":
            raise RuntimeError(
                f"the workflow run ended {status}: {Run.objects.get(pk=run.pk).error}"
            )
        return run


def create_fixture(base_url: str) -> tuple[Any, Any, str]:
    from agents.models import Agent, WorkflowDefinition
    from agents.runtime.prompt import compose_system_prompt
    from agents.specs import agent_spec
    from agents.tool_sources import effective_tools
    from providers.models import ProviderConnection
    from tenancy.services import tenant_create

    tenant = tenant_create(slug="bench", name="Bench")
    connection = ProviderConnection.objects.create(
        tenant=tenant, name="Fake OpenAI", kind="openai", api_key="k", base_url=base_url,
        default_model=MODEL, is_default=True, max_retries=0,
    )  # fmt: skip
    agent = Agent.objects.create(
        tenant=tenant, slug="explainer", name="Explainer", instructions=INSTRUCTIONS
    )
    definition = WorkflowDefinition.objects.create(
        tenant=tenant, slug="explain", name="Explain", definition=WORKFLOW
    )
    spec = agent_spec(agent, connection)
    system = compose_system_prompt(spec, effective_tools(agent, spec=spec).offered)
    return tenant, definition, system


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


def interleaved(by_hand: ByHand, ours: Platform, loop: asyncio.Runner) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"by hand": [], "platform": []}
    sides = [("by hand", lambda: loop.run(by_hand.run())), ("platform", ours.run)]
    for n in range(WARMUP_RUNS + RUNS):
        for name, call in sides if n % 2 == 0 else reversed(sides):
            started = time.perf_counter()
            call()
            if n >= WARMUP_RUNS:
                times[name].append(time.perf_counter() - started)
    return times


def count_queries(ours: Platform) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agents.models import RunEvent

    with CaptureQueriesContext(connection) as captured:
        run = ours.run()
    kinds = Counter(q["sql"].split(None, 1)[0].upper() for q in captured.captured_queries)
    events = Counter(RunEvent.objects.filter(run=run).values_list("type", flat=True))
    return {"queries": len(captured.captured_queries), "by_kind": dict(kinds),
            "events": sum(events.values()), "event_types": dict(events)}  # fmt: skip


class Timers:
    """Wall time spent inside wrapped functions (sync or async), summed per label."""

    def __init__(self) -> None:
        self.spent: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self._undo: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)
        if inspect.isasyncgenfunction(original):  # timed from the first item to the last

            @functools.wraps(original)
            async def timed(*args, **kwargs):
                started = time.perf_counter()
                try:
                    async for item in original(*args, **kwargs):
                        yield item
                finally:
                    self.spent[label] += time.perf_counter() - started
                    self.calls[label] += 1

        elif asyncio.iscoroutinefunction(original):

            @functools.wraps(original)
            async def timed(*args, **kwargs):
                started = time.perf_counter()
                try:
                    return await original(*args, **kwargs)
                finally:
                    self.spent[label] += time.perf_counter() - started
                    self.calls[label] += 1

        else:

            @functools.wraps(original)
            def timed(*args, **kwargs):
                started = time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    self.spent[label] += time.perf_counter() - started
                    self.calls[label] += 1

        setattr(owner, name, timed)
        self._undo.append((owner, name, original))

    def undo(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)


def breakdown(ours: Platform) -> dict[str, dict[str, float]]:
    """Per platform run, mean ms and calls of each part (the rest by difference)."""
    import agents.runs.workflows as engine
    from agents.runs.writer import RunWriter
    from providers.runtime.openai_adapter import OpenAIAdapter

    timers = Timers()
    timers.wrap(engine, "_prepare", "prepare: registry, compile, adapters")
    timers.wrap(RunWriter, "save", "durable checkpoint waits (RunWriter.save)")
    timers.wrap(OpenAIAdapter, "complete", "model call (adapter)")
    total = 0.0
    try:
        for _ in range(INSTRUMENTED_RUNS):
            started = time.perf_counter()
            ours.run()
            total += time.perf_counter() - started
    finally:
        timers.undo()
    rows = {
        label: {"ms": round(spent / INSTRUMENTED_RUNS * 1000, 3),
                "calls": round(timers.calls[label] / INSTRUMENTED_RUNS, 2)}
        for label, spent in timers.spent.items()
    }  # fmt: skip
    rest = total - sum(timers.spent.values())
    rows["the rest: start, claim, events, engine, tool, finalize"] = {
        "ms": round(rest / INSTRUMENTED_RUNS * 1000, 3), "calls": 1.0
    }  # fmt: skip
    rows["whole run"] = {"ms": round(total / INSTRUMENTED_RUNS * 1000, 3), "calls": 1.0}
    return rows


def main() -> None:
    load_start = os.getloadavg()[0]
    configure_django("bench-workflows-")
    from tests.fakes.provider_server import ProviderServer

    server = ProviderServer(models=[MODEL])  # unscripted: every chat gets a short "ok"
    try:
        tenant, definition, system = create_fixture(server.openai_base_url)
        ours = Platform(tenant, definition)
        with asyncio.Runner() as loop:
            by_hand = ByHand(server.openai_base_url, system)
            times = interleaved(by_hand, ours, loop)
        queries = count_queries(ours)
        parts = breakdown(ours)
        errors = [repr(e) for e in server.errors]
    finally:
        server.close()

    hand, plat = median_ms(times["by hand"]), median_ms(times["platform"])
    per_step = (plat - hand) / STEPS
    print(f"declared workflow: a tool step, a transform, an agent step; {RUNS} runs per side")
    print(f"{'side':34} {'median ms/run':>14} {'ms/step':>9}")
    print(f"{'by hand (calculator, jmespath, SDK)':34} {hand:14.2f} {hand / STEPS:9.2f}")
    print(f"{'platform (workflow_start+execute)':34} {plat:14.2f} {plat / STEPS:9.2f}")
    print(f"engine overhead: {plat - hand:.2f} ms per run, {per_step:.2f} ms per step")
    print(f"one platform run: {queries['queries']} queries on its own thread "
          f"{queries['by_kind']} (RunWriter's go on its writer thread), "
          f"{queries['events']} events")  # fmt: skip
    print(f"breakdown of a platform run (mean of {INSTRUMENTED_RUNS}):")
    for label, row in parts.items():
        print(f"  {label:56} {row['ms']:9.2f} ms  x{row['calls']:g}")
    if errors:
        raise SystemExit(f"the fake provider failed: {errors[:3]}")
    document = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_start": round(load_start, 2),
                    "load_end": round(os.getloadavg()[0], 2)},
        "setup": {"runs": RUNS, "warmup_runs": WARMUP_RUNS, "steps": STEPS,
                  "workflow": WORKFLOW},
        "median_ms": {"by hand": hand, "platform": plat},
        "overhead_ms_per_run": round(plat - hand, 3),
        "overhead_ms_per_step": round(per_step, 3),
        "queries": queries,
        "breakdown": parts,
    }  # fmt: skip
    write_results(
        "workflows",
        document,
        headline={
            "by hand ms/run": hand,
            "platform ms/run": plat,
            "engine overhead ms/step": round(per_step, 3),
        },
    )


if __name__ == "__main__":
    main()
