"""Code mode against plain tool calling, side by side, on a task of many tool calls: look up
20 records and total their amounts.

Run from the repo root: .venv/bin/python bench/code_mode.py
(prints a table, writes bench/results/code_mode.json). No Django, no database, no network:
the platform's agent loop and tool-call step (agents/runtime/loop.py, tool_step.py) with
the scripted fake model (providers/runtime/fake.py FakeModel), an in-process `get_record`
tool, and for code mode the Monty sandbox (a worker subprocess per program, as in a run).
BENCH_SMOKE=1 runs each side twice: seconds, and no measurement.

Sides (the model's outputs are scripted; the same records and the same answer):
(a) plain, one call per round: the model asks for a record, reads it, asks for the next —
    what a model does when it goes one step at a time: 21 rounds.
(b) plain, parallel calls: all 20 calls in one response, then the answer: 2 rounds (the
    best case of plain tool calling).
(c) code mode: one `run_code` program that looks the 20 records up and totals them, then
    the answer: 2 rounds, and the model reads the total instead of 20 records.

Figures per run: model rounds; tokens sent (every round's whole request: system prompt, tool
definitions, the conversation so far — the platform's estimate, characters / 4,
providers/runtime/estimates.py) and received (the model's text and tool calls, likewise);
wall time (median over RUNS runs, after one untimed run per side). What the fake model does
not show: a real model's latency per round, which (a) pays 21 times and (b) and (c) twice,
and its time to write the program.
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
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

from agents.runtime.code_mode import RUN_CODE  # noqa: E402
from agents.runtime.loop import run_agent  # noqa: E402
from agents.runtime.spec import AgentSpec, CodeLimits, RunStatus  # noqa: E402
from bench.common import sized, write_results  # noqa: E402
from providers.runtime.estimates import (  # noqa: E402
    delivered_chars,
    estimate_input_tokens,
    output_tokens_of,
)
from providers.runtime.fake import FakeModel  # noqa: E402
from tools.runtime.context import RunContext  # noqa: E402
from tools.runtime.registry import ToolRegistry  # noqa: E402
from tools.runtime.tool import Tool, ToolCall  # noqa: E402

RECORDS = 20
RUNS = sized(20, smoke=2)
CTX = RunContext(tenant_id=1, user_id=1, run_id="bench")
REGIONS = ("north", "south", "east", "west")


def record(record_id: int) -> dict:
    """A customer record of a realistic size (about 60 tokens as JSON)."""
    return {
        "id": record_id,
        "name": f"Customer {record_id:03d}",
        "region": REGIONS[record_id % 4],
        "amount": 100 + record_id * 7,
        "currency": "EUR",
        "status": "active" if record_id % 3 else "overdue",
        "notes": f"Account opened in {2010 + record_id % 12}; invoices monthly; contact by email.",
    }


TOTAL = sum(record(i)["amount"] for i in range(1, RECORDS + 1))
ANSWER = f"The {RECORDS} customers' amounts total {TOTAL} EUR."
PROGRAM = (
    f"rows = [get_record(id=i) for i in range(1, {RECORDS + 1})]\n"
    "total = sum(r['amount'] for r in rows)\n"
    "overdue = [r['name'] for r in rows if r['status'] == 'overdue']\n"
    "{'total': total, 'currency': 'EUR', 'overdue': overdue}"
)


def registry() -> ToolRegistry:
    return ToolRegistry(
        [
            Tool(
                name="get_record",
                description="Look up one customer record by its id.",
                input_schema={
                    "type": "object",
                    "properties": {"id": {"type": "integer", "description": "The id."}},
                    "required": ["id"],
                },
                handler=lambda arguments, ctx: record(arguments["id"]),
            )
        ]
    )


def lookup(i: int, prefix: str = "c") -> ToolCall:
    return ToolCall(f"{prefix}{i}", "get_record", {"id": i})


def script(side: str) -> list:
    if side == "plain, one call per round":
        return [*(lookup(i) for i in range(1, RECORDS + 1)), ANSWER]
    if side == "plain, parallel calls":
        return [[lookup(i) for i in range(1, RECORDS + 1)], ANSWER]
    return [ToolCall("p1", RUN_CODE, {"code": PROGRAM}), ANSWER]


SIDES = ("plain, one call per round", "plain, parallel calls", "code mode")


def spec(side: str) -> AgentSpec:
    return AgentSpec(
        name="analyst",
        instructions="You answer questions about customers. Look records up with your tools.",
        model="fake-model",
        max_rounds=30,
        code_mode=side == "code mode",
        code_limits=CodeLimits(),
    )


async def one_run(side: str) -> dict:
    outputs = script(side)
    model = FakeModel(outputs)
    started = time.perf_counter()
    outcome = await run_agent(
        spec=spec(side), adapter=model, registry=registry(), ctx=CTX, input="Total amount?"
    )
    wall_ms = (time.perf_counter() - started) * 1000
    assert outcome.status is RunStatus.SUCCEEDED and outcome.output == ANSWER, outcome.error
    sent = sum(estimate_input_tokens(request) for request in model.requests)
    received = 0
    for output in outputs:
        calls = output if isinstance(output, list) else [output]
        calls = [c for c in calls if isinstance(c, ToolCall)]
        text = output if isinstance(output, str) else ""
        received += output_tokens_of(delivered_chars(text, calls))
    return {
        "rounds": len(model.requests),
        "tokens_sent": sent,
        "tokens_received": received,
        "last_request_tokens": estimate_input_tokens(model.requests[-1]),
        "wall_ms": wall_ms,
    }


async def measure() -> list[dict]:
    rows = []
    for side in SIDES:
        first = await one_run(side)  # untimed: warms the imports and the sandbox binary
        walls = [(await one_run(side))["wall_ms"] for _ in range(RUNS)]
        rows.append({"side": side, **first, "wall_ms_p50": round(statistics.median(walls), 2)})
        del rows[-1]["wall_ms"]
    return rows


def main() -> None:
    load = os.getloadavg()[0]
    rows = asyncio.run(measure())
    print(f"{RECORDS} lookups + a total; {RUNS} timed runs per side; load {load:.2f}")
    header = (
        f"{'':28} {'rounds':>7} {'tokens sent':>12} {'received':>9} {'last req':>9} {'p50 ms':>8}"
    )
    print(header)
    for row in rows:
        print(
            f"{row['side']:28} {row['rounds']:>7} {row['tokens_sent']:>12,} "
            f"{row['tokens_received']:>9,} {row['last_request_tokens']:>9,} "
            f"{row['wall_ms_p50']:>8.2f}"
        )
    by_side = {row["side"]: row for row in rows}
    code, serial, parallel = (by_side[s] for s in ("code mode", *SIDES[:2]))
    write_results(
        "code_mode",
        {
            "machine": {
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "load_start": round(load, 2),
            },
            "records": RECORDS,
            "runs": RUNS,
            "rows": rows,
        },
        headline={
            "rounds_plain_serial": serial["rounds"],
            "rounds_plain_parallel": parallel["rounds"],
            "rounds_code_mode": code["rounds"],
            "tokens_sent_plain_serial": serial["tokens_sent"],
            "tokens_sent_plain_parallel": parallel["tokens_sent"],
            "tokens_sent_code_mode": code["tokens_sent"],
            "wall_ms_p50_code_mode": code["wall_ms_p50"],
        },
    )


if __name__ == "__main__":
    main()
