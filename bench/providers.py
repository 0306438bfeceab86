"""What our provider adapters cost over the bare SDK call they wrap, measured side by side
against the local fake provider server (tests/fakes/provider_server.py).

Run: cd /work/main && .venv/bin/python bench/providers.py
(prints a table, writes bench/results/providers.json; BENCH_SMOKE=1: a few calls, seconds).
Takes about a minute and needs no Django settings and no network.

The fake server runs in a separate process (multiprocessing, spawn) and hands its port
back, so the server's threads do not share the client's GIL. The client side runs in ONE
event loop (asyncio.run(main())); in every round each side of each measurement runs once,
the order of the sides rotating from round to round, so machine noise hits all of them.

1. Round trip, `complete(ModelRequest)` of AnthropicAdapter / OpenAIAdapter vs the bare
   SDK's `messages.create(...)` / `chat.completions.create(...)` with the same request
   (a system prompt, one user message, the 3 built-in tools, tool_choice auto). The bare
   side's tool definitions are built ONCE outside the timed loop; the adapter builds them
   on every request (that is part of its cost, and stays in). Both adapters keep their
   retry policy on. One request of each side is compared on the server (JSON bodies,
   ignoring key order) before timing. Figure: µs per call, mean of CALLS_PER_ROUND
   back-to-back calls per round, median over ROUNDS rounds.
2. Time to first streamed token: the server sends a TextReply with CHUNK_DELAY_S between
   SSE events; from the call's start to the adapter's first TextDelta, vs the bare SDK's
   raw stream (Anthropic: first content_block_delta; OpenAI: first chunk whose
   delta.content is not empty). Each stream is consumed to its end after the first token,
   outside the timed part, so connections are reused. Figure: ms, median per round,
   median over rounds.

Targets from the issue: round trip under 1.1x the bare SDK; time to first token within
2 ms of it.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# `python bench/providers.py` puts bench/ first on sys.path, where this very file would
# shadow the `providers` package; the repo root must come first (nothing is pip-installed).
if sys.path and Path(sys.path[0] or ".").resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

import anthropic  # noqa: E402
import httpx2  # noqa: E402
import openai  # noqa: E402

from bench.common import sized, write_results  # noqa: E402
from providers.runtime.anthropic_adapter import AnthropicAdapter  # noqa: E402
from providers.runtime.openai_adapter import OpenAIAdapter  # noqa: E402
from providers.runtime.types import ModelRequest, TextDelta, UserMessage  # noqa: E402
from tools.runtime.builtins import calculator, current_time, think  # noqa: E402
from tools.runtime.registry import ToolRegistry  # noqa: E402

ROUNDS = sized(10, smoke=2)
CALLS_PER_ROUND = sized(100, smoke=5)
STREAMS_PER_ROUND = sized(30, smoke=3)
WARMUP_CALLS = sized(30, smoke=3)
# The 3 built-in tools of tools.runtime.builtins, named: BUILTINS (every plug-in's tools) is
# filled when Django starts, which this bench does not.
TOOLS = ToolRegistry([calculator, think, current_time])
TARGET_RATIO = 1.1
TARGET_TTFT_MS = 2.0
CHUNK_DELAY_S = 0.002
STREAM_TEXT = (
    "a long answer of several words, spread over a few stream events so that the first "
    "token arrives well before the last one"
)
MODEL = {"anthropic": "claude-test-1", "openai": "gpt-test-1"}
MAX_TOKENS = 512
SYSTEM = "You are a careful assistant. Use the tools when they help."
QUESTION = "What is (1 + 2) * sqrt(16), and what time is it in Paris?"
SERVER_MODE = "separate process (multiprocessing spawn), ThreadingHTTPServer on 127.0.0.1"

AsyncCall = Callable[[], Awaitable[Any]]


# -- the fake server, in its own process -----------------------------------------------------
def serve(conn: Connection) -> None:
    """Child process: a ProviderServer, driven by commands over `conn` until "stop"."""
    from tests.fakes.provider_server import ProviderServer, TextReply

    server = ProviderServer(models=list(MODEL.values()))
    conn.send(server.url)
    try:
        while True:
            command, *args = conn.recv()
            if command == "stop":
                break
            if command == "script_streams":
                api, count = args
                reply = TextReply(STREAM_TEXT, chunk_delay_s=CHUNK_DELAY_S)
                server.script(api, *([reply] * count))
                conn.send(None)
            elif command == "last":
                (api,) = args
                last = next(r for r in reversed(server.received) if r.api == api)
                conn.send({"path": last.path, "headers": last.headers, "body": last.body})
            elif command == "stats":
                conn.send(
                    {
                        "requests": len(server.received),
                        "connections": server.connection_count,
                        "pending": {api: server.pending(api) for api in MODEL},
                        "errors": [repr(e) for e in server.errors],
                    }
                )
            elif command == "clear":
                server.received.clear()
                conn.send(None)
    finally:
        server.close()


class RemoteServer:
    """The parent's handle on the child's ProviderServer."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe()
        self._process = context.Process(
            target=serve, args=(child_conn,), name="provider-server", daemon=True
        )
        self._process.start()
        if not self._conn.poll(60):
            raise RuntimeError("the provider server process did not start")
        self.url: str = self._conn.recv()
        self.anthropic_base_url = self.url
        self.openai_base_url = self.url + "/v1"

    def ask(self, *command: Any) -> Any:
        self._conn.send(command)
        return self._conn.recv()

    def close(self) -> None:
        if self._process.is_alive():
            self._conn.send(("stop",))
            self._process.join(10)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(5)


# -- the two sides ---------------------------------------------------------------------------
@dataclass
class Side:
    provider: str  # "anthropic" | "openai"
    path: str  # "adapter" | "bare SDK"
    complete: AsyncCall
    first_token: Callable[[], Awaitable[float]]  # seconds to the first text delta

    @property
    def name(self) -> str:
        return f"{self.provider} {self.path}"


def model_request(provider: str) -> ModelRequest:
    return ModelRequest(
        model=MODEL[provider],
        messages=[UserMessage(QUESTION)],
        system=SYSTEM,
        tools=list(TOOLS),
        max_tokens=MAX_TOKENS,
    )


def adapter_first_token(adapter: AnthropicAdapter | OpenAIAdapter, request: ModelRequest):
    async def first_token() -> float:
        started = time.perf_counter()
        first: float | None = None
        async for event in adapter.stream(request):
            if first is None and isinstance(event, TextDelta):
                first = time.perf_counter() - started
        if first is None:
            raise RuntimeError(f"{adapter!r} streamed no text")
        return first

    return first_token


def anthropic_sides(server: RemoteServer) -> tuple[Side, Side, anthropic.AsyncAnthropic]:
    adapter = AnthropicAdapter(api_key="k", base_url=server.anthropic_base_url)
    request = model_request("anthropic")
    bare = anthropic.AsyncAnthropic(
        api_key="k",
        base_url=server.anthropic_base_url,
        http_client=httpx2.AsyncClient(),
        max_retries=0,
    )
    # What the adapter sends, prebuilt once: the user turn as a list of text blocks and
    # tool_choice auto (the adapter always sends one when there are tools).
    params: dict[str, Any] = {
        "model": MODEL["anthropic"],
        "max_tokens": MAX_TOKENS,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}],
        "tools": TOOLS.definitions("anthropic"),
        "tool_choice": {"type": "auto"},
    }

    async def bare_complete() -> Any:
        return await bare.messages.create(**params)

    async def bare_first_token() -> float:
        started = time.perf_counter()
        first: float | None = None
        stream = await bare.messages.create(**params, stream=True)
        async for event in stream:
            if first is None and event.type == "content_block_delta":
                first = time.perf_counter() - started
        if first is None:
            raise RuntimeError("the bare Anthropic stream had no content_block_delta")
        return first

    return (
        Side("anthropic", "adapter", lambda: adapter.complete(request),
             adapter_first_token(adapter, request)),
        Side("anthropic", "bare SDK", bare_complete, bare_first_token),
        bare,
    )  # fmt: skip


def openai_sides(server: RemoteServer) -> tuple[Side, Side, openai.AsyncOpenAI]:
    adapter = OpenAIAdapter(api_key="k", base_url=server.openai_base_url)
    request = model_request("openai")
    bare = openai.AsyncOpenAI(
        api_key="k",
        base_url=server.openai_base_url,
        http_client=httpx2.AsyncClient(),
        max_retries=0,
    )
    # The "openai" preset sends max_completion_tokens, not max_tokens; so does this side.
    params: dict[str, Any] = {
        "model": MODEL["openai"],
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTION},
        ],
        "max_completion_tokens": MAX_TOKENS,
        "tools": TOOLS.definitions("openai"),
        "tool_choice": "auto",
    }

    async def bare_complete() -> Any:
        return await bare.chat.completions.create(**params)

    async def bare_first_token() -> float:
        started = time.perf_counter()
        first: float | None = None
        stream = await bare.chat.completions.create(
            **params, stream=True, stream_options={"include_usage": True}
        )
        async for chunk in stream:
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter() - started
        if first is None:
            raise RuntimeError("the bare OpenAI stream had no content")
        return first

    return (
        Side("openai", "adapter", lambda: adapter.complete(request),
             adapter_first_token(adapter, request)),
        Side("openai", "bare SDK", bare_complete, bare_first_token),
        bare,
    )  # fmt: skip


# -- the same request on both sides? ---------------------------------------------------------
def differences(ours: Any, theirs: Any, where: str = "") -> list[str]:
    """Where two JSON values differ (dict key order ignored)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        found = []
        for key in sorted(set(ours) | set(theirs)):
            here = f"{where}.{key}" if where else key
            if key not in ours:
                found.append(f"{here}: only the bare SDK sends it")
            elif key not in theirs:
                found.append(f"{here}: only the adapter sends it")
            else:
                found += differences(ours[key], theirs[key], here)
        return found
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        pairs = enumerate(zip(ours, theirs, strict=True))
        return [d for i, (a, b) in pairs for d in differences(a, b, f"{where}[{i}]")]
    return [] if ours == theirs else [f"{where}: {ours!r} != {theirs!r}"]


# Headers that legitimately differ per request or per client configuration.
VOLATILE_HEADERS = {"content-length", "x-stainless-retry-count", "idempotency-key"}


async def check_requests(server: RemoteServer, adapter: Side, bare: Side) -> dict[str, Any]:
    """One call of each side, non-streaming and streaming; the server's view compared."""
    api = adapter.provider
    seen = {}
    for kind in ("complete", "stream"):
        for side in (adapter, bare):
            if kind == "complete":
                await side.complete()
            else:
                server.ask("script_streams", api, 1)
                await side.first_token()
            seen[(kind, side.path)] = server.ask("last", api)
    check: dict[str, Any] = {}
    for kind in ("complete", "stream"):
        ours, theirs = seen[(kind, "adapter")], seen[(kind, "bare SDK")]
        body = differences(ours["body"], theirs["body"])
        headers = [
            d
            for d in differences(ours["headers"], theirs["headers"])
            if d.split(":")[0] not in VOLATILE_HEADERS
        ]
        check[kind] = {
            "same_path": ours["path"] == theirs["path"],
            "same_body": not body,
            "body_differences": body,
            "header_differences": headers,
        }
    return check


# -- timing ----------------------------------------------------------------------------------
async def us_per_call(call: AsyncCall, calls: int) -> float:
    """Mean µs per `await call()` over `calls` back-to-back calls."""
    started = time.perf_counter_ns()
    for _ in range(calls):
        await call()
    return (time.perf_counter_ns() - started) / calls / 1000


async def ttft_ms(side: Side, server: RemoteServer, streams: int) -> float:
    """Median ms to the first token over `streams` streams."""
    server.ask("script_streams", side.provider, streams)
    return statistics.median([await side.first_token() * 1000 for _ in range(streams)])


async def interleaved_rounds(
    sides: list[Side], server: RemoteServer
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per round and side: µs per round trip, and median ms to the first token."""
    for side in sides:  # warm-up: clients built, connections opened, code paths hot
        await us_per_call(side.complete, WARMUP_CALLS)
        await ttft_ms(side, server, 3)
    round_trip: dict[str, list[float]] = {side.name: [] for side in sides}
    first_token: dict[str, list[float]] = {side.name: [] for side in sides}
    for index in range(ROUNDS):
        server.ask("clear")  # keep the server's request log short
        gc.collect()
        shift = index % len(sides)
        order = sides[shift:] + sides[:shift]
        for side in order:
            round_trip[side.name].append(await us_per_call(side.complete, CALLS_PER_ROUND))
        for side in reversed(order):
            first_token[side.name].append(await ttft_ms(side, server, STREAMS_PER_ROUND))
        print(f"  round {index + 1}/{ROUNDS} done", file=sys.stderr, flush=True)
    return round_trip, first_token


# -- figures ---------------------------------------------------------------------------------
@dataclass
class RoundTripFigure:
    provider: str
    side: str
    us_per_call: float
    ratio: float  # over the bare SDK
    overhead_us: float
    rounds_us: list[float]
    target_ratio: float | None
    meets_target: bool | None


@dataclass
class FirstTokenFigure:
    provider: str
    side: str
    ms: float
    difference_ms: float  # minus the bare SDK
    rounds_ms: list[float]
    target_difference_ms: float | None
    meets_target: bool | None


def figures(
    round_trip: dict[str, list[float]], first_token: dict[str, list[float]]
) -> tuple[list[RoundTripFigure], list[FirstTokenFigure]]:
    trips: list[RoundTripFigure] = []
    tokens: list[FirstTokenFigure] = []
    for provider in MODEL:
        bare_rt = statistics.median(round_trip[f"{provider} bare SDK"])
        bare_ft = statistics.median(first_token[f"{provider} bare SDK"])
        for side in ("bare SDK", "adapter"):
            ours = side == "adapter"
            rt_rounds = round_trip[f"{provider} {side}"]
            ft_rounds = first_token[f"{provider} {side}"]
            us = statistics.median(rt_rounds)
            ms = statistics.median(ft_rounds)
            ratio = us / bare_rt
            trips.append(
                RoundTripFigure(
                    provider, side, us, ratio, us - bare_rt, rt_rounds,
                    TARGET_RATIO if ours else None, ratio < TARGET_RATIO if ours else None,
                )
            )  # fmt: skip
            difference = ms - bare_ft
            tokens.append(
                FirstTokenFigure(
                    provider, side, ms, difference, ft_rounds,
                    TARGET_TTFT_MS if ours else None, difference < TARGET_TTFT_MS if ours else None,
                )
            )  # fmt: skip
    return trips, tokens


# -- output ----------------------------------------------------------------------------------
def verdict(meets: bool | None) -> str:
    return "" if meets is None else ("ok" if meets else "MISSED")


def print_tables(
    trips: list[RoundTripFigure], tokens: list[FirstTokenFigure], checks: dict[str, Any]
) -> None:
    print(f"fake provider server: {SERVER_MODE}")
    print()
    print(
        f"1. Round trip, complete() vs bare SDK create() (µs/call: mean of {CALLS_PER_ROUND} "
        f"calls per round, median of {ROUNDS} interleaved rounds)"
    )
    print(
        f"{'side':<22}{'µs/call':>10}{'rounds min-max':>17}{'ratio':>9}{'overhead':>10}"
        f"  target <{TARGET_RATIO}x"
    )
    for f in trips:
        spread = f"{min(f.rounds_us):.0f}-{max(f.rounds_us):.0f}"
        print(
            f"{f.provider + ' ' + f.side:<22}{f.us_per_call:>10.1f}{spread:>17}{f.ratio:>8.3f}x"
            f"{f.overhead_us:>10.1f}  {verdict(f.meets_target)}"
        )
    print()
    print(
        f"2. Time to first streamed token (ms: median of {STREAMS_PER_ROUND} streams per "
        f"round, median of {ROUNDS} rounds; server waits {CHUNK_DELAY_S * 1000:g} ms "
        f"between events)"
    )
    print(
        f"{'side':<22}{'ms':>10}{'rounds min-max':>17}{'diff ms':>9}  target <{TARGET_TTFT_MS:g} ms"
    )
    for f in tokens:
        spread = f"{min(f.rounds_ms):.2f}-{max(f.rounds_ms):.2f}"
        print(
            f"{f.provider + ' ' + f.side:<22}{f.ms:>10.3f}{spread:>17}{f.difference_ms:>+9.3f}"
            f"  {verdict(f.meets_target)}"
        )
    print()
    print("Same request on the wire (adapter vs bare SDK, JSON bodies, key order ignored):")
    for provider, check in checks.items():
        for kind, result in check.items():
            same = "same body" if result["same_body"] else "DIFFERENT body: "
            same += "; ".join(result["body_differences"])
            headers = "; ".join(result["header_differences"])
            print(f"  {provider:<10}{kind:<9}{same}" + (f"; headers: {headers}" if headers else ""))
    header_diffs = [d for c in checks.values() for r in c.values() for d in r["header_differences"]]
    if any("timeout" in d for d in header_diffs):
        print(
            "  (the timeout headers differ because the adapter's client has timeout_s=60, "
            "the bare one the SDK's default 600 s)"
        )
    print(
        "  The bare side's tool definitions are prebuilt once; the adapter builds them "
        "(definition_for per tool) on every request."
    )


def write_json(
    trips: list[RoundTripFigure],
    tokens: list[FirstTokenFigure],
    checks: dict[str, Any],
    stats: dict[str, Any],
) -> Path:
    document = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "anthropic": anthropic.__version__,
            "openai": openai.__version__,
        },
        "setup": {
            "server": SERVER_MODE,
            "rounds": ROUNDS,
            "calls_per_round": CALLS_PER_ROUND,
            "streams_per_round": STREAMS_PER_ROUND,
            "chunk_delay_s": CHUNK_DELAY_S,
            "bare_tool_definitions": "prebuilt once, outside the timed loop",
            "adapter_tool_definitions": "built per request (definition_for per tool)",
            "adapter_retry_policy": "default RetryPolicy, on",
            "server_stats": stats,
        },
        "request_check": checks,
        "round_trip": [asdict(f) for f in trips],
        "first_token": [asdict(f) for f in tokens],
    }
    headline = {f"{f.provider} round-trip ratio": f.ratio for f in trips if f.side == "adapter"}
    headline |= {
        f"{f.provider} first-token difference ms": f.difference_ms
        for f in tokens
        if f.side == "adapter"
    }
    return write_results("providers", document, headline=headline)


async def main() -> None:
    server = RemoteServer()
    try:
        anthropic_adapter, anthropic_bare, anthropic_client = anthropic_sides(server)
        openai_adapter, openai_bare, openai_client = openai_sides(server)
        checks = {
            "anthropic": await check_requests(server, anthropic_adapter, anthropic_bare),
            "openai": await check_requests(server, openai_adapter, openai_bare),
        }
        sides = [anthropic_adapter, anthropic_bare, openai_adapter, openai_bare]
        round_trip, first_token = await interleaved_rounds(sides, server)
        stats = server.ask("stats")
        if stats["errors"] or any(stats["pending"].values()):
            raise RuntimeError(f"the provider server had trouble: {stats}")
        await anthropic_client.close()
        await openai_client.close()
    finally:
        server.close()
    trips, tokens = figures(round_trip, first_token)
    print_tables(trips, tokens, checks)
    write_json(trips, tokens, checks, stats)


if __name__ == "__main__":
    asyncio.run(main())
