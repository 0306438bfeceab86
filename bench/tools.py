"""What `ToolRegistry.execute` costs over calling a tool directly, and what an HTTP tool
costs over a bare httpx2 request to the same local server, measured in one event loop.

Run from the repo root: .venv/bin/python bench/tools.py
(prints a table, writes bench/results/tools.json; BENCH_SMOKE=1: a few iterations, seconds).
Takes under a minute and needs no Django settings. It starts the embedded Redis in a
temporary directory (stopped at exit) and a LocalServer (tests/tools/local_server.py) on
127.0.0.1 in a thread of this process, so the server shares the GIL with the client:
absolute HTTP figures are pessimistic, the sides are comparable.

Targets from the issue: validation + bookkeeping adds under 30 µs per call; an HTTP tool
call is within 1.3x of the bare request.
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import os
import platform
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# `python bench/tools.py` puts bench/ first on sys.path, where this very file would shadow
# the `tools` package; the repo root must come first (nothing is pip-installed).
if sys.path and Path(sys.path[0] or ".").resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402

from agentplatform import embedded  # noqa: E402 (loads no Django settings)
from bench.common import sized, write_results  # noqa: E402
from tests.tools.local_server import LocalServer, Reply  # noqa: E402
from tools.runtime.builtins import calculator  # noqa: E402
from tools.runtime.calculator import evaluate  # noqa: E402
from tools.runtime.circuit import CircuitStore, MemoryCircuitStore, RedisCircuitStore  # noqa: E402
from tools.runtime.context import RunContext, StaticSecrets  # noqa: E402
from tools.runtime.egress import EgressPolicy, GuardedHttpClient  # noqa: E402
from tools.runtime.http_tool import HttpToolConfig, build_http_tool  # noqa: E402
from tools.runtime.registry import ToolRegistry  # noqa: E402
from tools.runtime.tool import Tool, ToolCall, tool  # noqa: E402

FAST_ITERATIONS = sized(20_000, smoke=500)
SYNC_ITERATIONS = sized(2_000, smoke=50)
REPEATS = sized(7, smoke=3)
HTTP_ROUNDS = sized(10, smoke=2)
HTTP_REQUESTS_PER_ROUND = sized(200, smoke=20)
TARGET_OVERHEAD_US = 30.0
TARGET_HTTP_RATIO = 1.3

SECRET = "sk-test"  # noqa: S105 (a fake key for the local server)
SECRET_REF = "tool:1"  # noqa: S105 (the name of a secret, not one)
SMALL_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
    "additionalProperties": False,
}
ARGUMENTS = {"city": "Paris", "days": 3}
# The same with a `pattern` (compiled path), and with a keyword only jsonschema handles.
PATTERN_SCHEMA = {
    **SMALL_SCHEMA,
    "properties": {
        "city": {"type": "string", "pattern": "^[A-Za-z .'-]+$"},
        "days": {"type": "integer"},
    },
}
FALLBACK_SCHEMA = {
    **PATTERN_SCHEMA,
    "properties": {
        **PATTERN_SCHEMA["properties"],
        "days": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
    },
}
EXPRESSION = "(1 + 2) * sqrt(16)"
HTTP_SCHEMA = {
    "type": "object",
    "properties": {"limit": {"type": "integer"}},
    "additionalProperties": False,
}
ITEMS = {"items": [{"id": 1, "name": "first"}, {"id": 2, "name": "second"}], "count": 2}

AsyncCall = Callable[[], Awaitable[Any]]


@dataclass
class RegistryFigure:
    case: str
    iterations: int
    direct_us: float
    registry_us: float
    ratio: float
    overhead_us: float
    target_overhead_us: float | None  # None: the issue's target does not apply
    meets_target: bool | None


@dataclass
class HttpFigure:
    side: str
    us_per_request: float
    ratio: float
    overhead_us: float
    rounds_us: list[float]
    target_ratio: float | None
    meets_target: bool | None


def run_context() -> RunContext:
    return RunContext(tenant_id=1, secrets=StaticSecrets({SECRET_REF: SECRET}), run_id="r")


# -- timing --------------------------------------------------------------------------------
async def us_per_call(call: AsyncCall, iterations: int) -> float:
    """Mean µs per `await call()` over `iterations` back-to-back calls."""
    started = time.perf_counter_ns()
    for _ in range(iterations):
        await call()
    return (time.perf_counter_ns() - started) / iterations / 1000


async def compare(direct: AsyncCall, through: AsyncCall, iterations: int) -> tuple[float, float]:
    """Median µs per call of each side over REPEATS repeats; the sides take turns going first."""
    await us_per_call(direct, iterations // 10)  # warm-up
    await us_per_call(through, iterations // 10)
    direct_us: list[float] = []
    through_us: list[float] = []
    for repeat in range(REPEATS):
        gc.collect()
        if repeat % 2:
            through_us.append(await us_per_call(through, iterations))
            direct_us.append(await us_per_call(direct, iterations))
        else:
            direct_us.append(await us_per_call(direct, iterations))
            through_us.append(await us_per_call(through, iterations))
    return statistics.median(direct_us), statistics.median(through_us)


# -- 1. registry overhead ------------------------------------------------------------------
async def forecast_handler(arguments: dict, ctx: RunContext) -> dict:
    return {"city": arguments["city"], "days": arguments.get("days", 1)}


def forecast_handler_sync(arguments: dict, ctx: RunContext) -> dict:
    return {"city": arguments["city"], "days": arguments.get("days", 1)}


async def forecast(city: str, days: int = 1) -> dict:
    """The weather forecast for a city."""
    return {"city": city, "days": days}


def schema_tool(name: str, handler: Callable, schema: dict = SMALL_SCHEMA) -> Tool:
    return Tool(
        name=name,
        description="The weather forecast for a city.",
        input_schema=schema,
        handler=handler,
    )


async def registry_figure(
    case: str,
    direct: AsyncCall,
    through: AsyncCall,
    iterations: int,
    *,
    target: float | None = TARGET_OVERHEAD_US,
) -> RegistryFigure:
    direct_us, registry_us = await compare(direct, through, iterations)
    overhead = registry_us - direct_us
    return RegistryFigure(
        case=case,
        iterations=iterations,
        direct_us=direct_us,
        registry_us=registry_us,
        ratio=registry_us / direct_us,
        overhead_us=overhead,
        target_overhead_us=target,
        meets_target=None if target is None else overhead < target,
    )


async def registry_figures() -> list[RegistryFigure]:
    ctx = run_context()
    registry = ToolRegistry(
        [
            schema_tool("forecast_schema", forecast_handler),
            tool(forecast, name="forecast_pydantic"),
            schema_tool("forecast_sync", forecast_handler_sync),
            schema_tool("forecast_pattern", forecast_handler, PATTERN_SCHEMA),
            schema_tool("forecast_fallback", forecast_handler, FALLBACK_SCHEMA),
        ]
    )
    # The built-in `calculator` tool, in a registry of its own: BUILTINS (every tenant's
    # built-ins) is filled from the plug-ins when Django starts, which this bench does not.
    builtins = ToolRegistry([calculator])
    calls = {
        "schema": ToolCall("c1", "forecast_schema", ARGUMENTS),
        "pydantic": ToolCall("c1", "forecast_pydantic", ARGUMENTS),
        "sync": ToolCall("c1", "forecast_sync", ARGUMENTS),
        "pattern": ToolCall("c1", "forecast_pattern", ARGUMENTS),
        "fallback": ToolCall("c1", "forecast_fallback", ARGUMENTS),
    }
    calculator_call = ToolCall("c1", "calculator", {"expression": EXPRESSION})
    for outcome in [await registry.execute(call, ctx) for call in calls.values()] + [
        await builtins.execute(calculator_call, ctx)
    ]:
        if outcome.is_error:
            raise RuntimeError(f"{outcome.name} failed: {outcome.error}")

    async def sync_direct() -> dict:
        return forecast_handler_sync(ARGUMENTS, ctx)

    async def calculator_direct() -> int | float:
        return evaluate(EXPRESSION)

    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=32, thread_name_prefix="bench") as pool:
        return [
            await registry_figure(
                "a. Tool + JSON Schema, async",
                lambda: forecast_handler(ARGUMENTS, ctx),
                lambda: registry.execute(calls["schema"], ctx),
                FAST_ITERATIONS,
            ),
            await registry_figure(
                "a'. ... with a pattern",
                lambda: forecast_handler(ARGUMENTS, ctx),
                lambda: registry.execute(calls["pattern"], ctx),
                FAST_ITERATIONS,
            ),
            # anyOf: the whole schema goes to jsonschema (not the common subset).
            await registry_figure(
                "a''. ... jsonschema fallback",
                lambda: forecast_handler(ARGUMENTS, ctx),
                lambda: registry.execute(calls["fallback"], ctx),
                FAST_ITERATIONS,
                target=None,
            ),
            await registry_figure(
                "b. @tool (pydantic), async",
                lambda: forecast(**ARGUMENTS),
                lambda: registry.execute(calls["pydantic"], ctx),
                FAST_ITERATIONS,
            ),
            await registry_figure(
                "c. Tool + JSON Schema, sync",
                sync_direct,
                lambda: registry.execute(calls["sync"], ctx),
                SYNC_ITERATIONS,
            ),
            # Not the registry: the thread hop alone (a pool like the registry's), to tell
            # how much of (c) is the hop and how much is bookkeeping.
            await registry_figure(
                "c'. thread hop alone, no registry",
                sync_direct,
                lambda: loop.run_in_executor(pool, forecast_handler_sync, ARGUMENTS, ctx),
                SYNC_ITERATIONS,
                target=None,
            ),
            await registry_figure(
                "d. built-in calculator",
                calculator_direct,
                lambda: builtins.execute(calculator_call, ctx),
                FAST_ITERATIONS,
            ),
        ]


# -- 2. HTTP tool vs bare request ----------------------------------------------------------
class NoDelayLocalServer(LocalServer):
    """LocalServer with TCP_NODELAY on accepted sockets. Its handler sends the headers and
    the body in two writes; with Nagle on, the body waits for the client's delayed ACK,
    a ~40 ms stall on every keep-alive request that would drown what is measured here."""

    def _connection_opened(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super()._connection_opened(sock)


def http_tool(name: str, url: str, egress: GuardedHttpClient, store: CircuitStore) -> Tool:
    return build_http_tool(
        name=name,
        description="List the items.",
        input_schema=HTTP_SCHEMA,
        config=HttpToolConfig(url=url, auth={"type": "bearer"}),
        egress=egress,
        circuit_store=store,
        circuit_key=f"1:{name}",
        secret_ref=SECRET_REF,
    )


async def interleaved_rounds(sides: dict[str, AsyncCall]) -> dict[str, list[float]]:
    """µs per request of each side, per round; the side that goes first rotates."""
    names = list(sides)
    for name in names:  # warm-up: connections opened, clients and pools built
        await us_per_call(sides[name], HTTP_REQUESTS_PER_ROUND)
    rounds: dict[str, list[float]] = {name: [] for name in names}
    for index in range(HTTP_ROUNDS):
        gc.collect()
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            rounds[name].append(await us_per_call(sides[name], HTTP_REQUESTS_PER_ROUND))
    return rounds


async def http_figures(server: LocalServer, redis_url: str) -> list[HttpFigure]:
    url = server.url + "/v1/items"
    egress = GuardedHttpClient(EgressPolicy(allowlist=("127.0.0.1/32",)))
    registry = ToolRegistry(
        [
            http_tool("items_memory", url, egress, MemoryCircuitStore()),
            http_tool("items_redis", url, egress, RedisCircuitStore(redis_url)),
        ]
    )
    ctx = run_context()
    memory_call = ToolCall("c1", "items_memory", {})
    redis_call = ToolCall("c1", "items_redis", {})
    async with httpx2.AsyncClient() as client:

        async def bare() -> Any:
            response = await client.get(url, headers={"Authorization": f"Bearer {SECRET}"})
            response.raise_for_status()
            return response.json()

        if await bare() != ITEMS:
            raise RuntimeError("the local server did not answer as routed")
        for call in (memory_call, redis_call):
            outcome = await registry.execute(call, ctx)
            if outcome.result != ITEMS:
                raise RuntimeError(f"{call.name} failed: {outcome.error or outcome.result}")
        rounds = await interleaved_rounds(
            {
                "bare httpx2.AsyncClient": bare,
                "http tool, MemoryCircuitStore": lambda: registry.execute(memory_call, ctx),
                "http tool, RedisCircuitStore": lambda: registry.execute(redis_call, ctx),
            }
        )
    await egress.aclose()
    return http_table(rounds)


def http_table(rounds: dict[str, list[float]]) -> list[HttpFigure]:
    (bare_side, bare_rounds), *tool_sides = rounds.items()
    bare_us = statistics.median(bare_rounds)
    figures = [HttpFigure(bare_side, bare_us, 1.0, 0.0, bare_rounds, None, None)]
    for side, side_rounds in tool_sides:
        us = statistics.median(side_rounds)
        ratio = us / bare_us
        figures.append(
            HttpFigure(
                side, us, ratio, us - bare_us, side_rounds, TARGET_HTTP_RATIO,
                ratio <= TARGET_HTTP_RATIO,
            )
        )  # fmt: skip
    return figures


# -- output --------------------------------------------------------------------------------
def verdict(meets: bool | None) -> str:
    return "n/a" if meets is None else ("ok" if meets else "MISSED")


def print_tables(registry: list[RegistryFigure], http: list[HttpFigure]) -> None:
    print(
        f"ToolRegistry.execute vs the handler called directly "
        f"(µs/call, median of {REPEATS} repeats; "
        f"{FAST_ITERATIONS} calls, {SYNC_ITERATIONS} for sync)"
    )
    print(f"{'case':<34}{'direct':>9}{'registry':>10}{'ratio':>8}{'overhead':>10}  <30 µs")
    for f in registry:
        print(
            f"{f.case:<34}{f.direct_us:>9.2f}{f.registry_us:>10.2f}{f.ratio:>7.1f}x"
            f"{f.overhead_us:>10.2f}  {verdict(f.meets_target)}"
        )
    print()
    print(
        f"HTTP GET /v1/items on 127.0.0.1, keep-alive (µs/request, median of "
        f"{HTTP_ROUNDS} interleaved rounds x {HTTP_REQUESTS_PER_ROUND} requests)"
    )
    print(f"{'side':<34}{'µs/req':>9}{'ratio':>8}{'overhead':>10}  <=1.3x")
    for f in http:
        print(
            f"{f.side:<34}{f.us_per_request:>9.1f}{f.ratio:>7.2f}x"
            f"{f.overhead_us:>10.1f}  {verdict(f.meets_target)}"
        )


def write_json(registry: list[RegistryFigure], http: list[HttpFigure]) -> Path:
    document = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "registry": [asdict(f) for f in registry],
        "http": [asdict(f) for f in http],
    }
    headline = {f"overhead µs {f.case.split('.')[0]}": f.overhead_us for f in registry}
    headline |= {f"ratio {f.side}": f.ratio for f in http[1:]}
    return write_results("tools", document, headline=headline)


def start_redis() -> str:
    """The embedded Redis in a temporary directory; stopped, then the directory removed,
    at exit (atexit runs in reverse order of registration)."""
    data_dir = Path(tempfile.mkdtemp(prefix="bench-tools-"))
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    return embedded.redis(data_dir)


async def main() -> None:
    redis_url = start_redis()
    server = NoDelayLocalServer()
    server.route("GET", "/v1/items", Reply(json=ITEMS))
    try:
        registry = await registry_figures()
        http = await http_figures(server, redis_url)
    finally:
        server.close()
    print_tables(registry, http)
    write_json(registry, http)


if __name__ == "__main__":
    asyncio.run(main())
