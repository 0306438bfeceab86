"""A parallel crew of 4 members vs the same 4 agents run one after another, each member a
real agent loop on the OpenAI adapter against the local fake provider server answering
after PROVIDER_LATENCY_S (50 ms). Expect a wall-time ratio close to 4x.

Run: cd /work/main && .venv/bin/python bench/crews.py   (prints a table, writes
bench/results/crews.json; BENCH_SMOKE=1: 2 rounds). No Django needed.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench")]

from agents.runtime.crew import ChildOutcome, CrewSpec, run_parallel  # noqa: E402
from agents.runtime.loop import run_agent  # noqa: E402
from agents.runtime.spec import AgentSpec  # noqa: E402
from bench.common import sized, write_results  # noqa: E402
from providers.runtime.openai_adapter import OpenAIAdapter  # noqa: E402
from tests.fakes.provider_server import ProviderServer, TextReply  # noqa: E402
from tools.runtime.context import RunContext  # noqa: E402
from tools.runtime.registry import ToolRegistry  # noqa: E402

PROVIDER_LATENCY_S = 0.05
MEMBERS = ("analyst", "critic", "editor", "fact_checker")
ROUNDS = sized(15, smoke=2)


async def main() -> dict:
    server = ProviderServer()
    adapter = OpenAIAdapter(api_key="k", base_url=server.openai_base_url)
    ctx = RunContext(tenant_id=1)

    async def run_member(member: str, task: str, context: str, key: str) -> ChildOutcome:
        server.script("openai", TextReply(f"{member} done", delay_s=PROVIDER_LATENCY_S))
        outcome = await run_agent(
            spec=AgentSpec(name=member, instructions=f"You are the {member}.", model="gpt-test"),
            adapter=adapter,
            registry=ToolRegistry(),
            ctx=ctx,
            input=task,
        )
        return ChildOutcome(outcome.status, outcome.output, outcome.error, outcome.usage, key)

    async def nothing(type, **payload) -> None:
        return None

    crew = CrewSpec(name="review", mode="parallel", members=MEMBERS)
    parallel, sequential = [], []
    await run_member("warmup", "hi", "", "w")  # connections and clients made
    try:
        for _ in range(ROUNDS):
            started = time.perf_counter()
            outcome = await run_parallel(crew, "Review the draft.", run_member, nothing)
            parallel.append(time.perf_counter() - started)
            assert outcome.status.value == "succeeded", outcome.error
            started = time.perf_counter()
            for member in MEMBERS:
                await run_member(member, "Review the draft.", "", member)
            sequential.append(time.perf_counter() - started)
    finally:
        server.close()
    result = {
        "provider_latency_ms": PROVIDER_LATENCY_S * 1000,
        "members": len(MEMBERS),
        "parallel_crew_ms": statistics.median(parallel) * 1000,
        "one_after_another_ms": statistics.median(sequential) * 1000,
    }
    result["ratio"] = result["one_after_another_ms"] / result["parallel_crew_ms"]
    return result


def report() -> dict:
    result = asyncio.run(main())
    latency = result["provider_latency_ms"]
    print(f"crew of {result['members']} members, provider latency {latency:.0f} ms")
    print(f"  parallel crew          {result['parallel_crew_ms']:8.1f} ms")
    print(f"  one after another      {result['one_after_another_ms']:8.1f} ms")
    print(f"  wall-time ratio        {result['ratio']:8.2f}x   (ideal {result['members']}x)")
    headline = {k: result[k] for k in ("parallel_crew_ms", "one_after_another_ms", "ratio")}
    write_results("crews", result, headline=headline)
    return result


if __name__ == "__main__":
    report()
