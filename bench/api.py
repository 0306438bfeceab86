"""What the OpenAI-compatible API (`/v1/chat/completions`, streaming) adds over streaming from
the provider directly, side by side against the local fake provider server
(tests/fakes/provider_server.py), in one run.

Run: cd /work/main && .venv/bin/python bench/api.py
(prints a table, writes bench/results/api.json; BENCH_SMOKE=1: a few samples, 5 chats at
once). Takes about a minute. Needs no network and no
configuration: it starts the embedded PostgreSQL and Redis in a temporary DATA_DIR (stopped,
and the directory removed, at exit), then runs the platform as `make run` does: the
processes `manage.py serve` starts (serve.platform_commands: uvicorn, the runs worker, the
batch worker), with the environment it gives its children. The fake provider runs in its own
process (multiprocessing, spawn) and answers every chat request with the same TextReply (3
text pieces, CHUNK_DELAY_S between stream events).

1. Time to first token: the `openai` SDK (AsyncOpenAI over httpx2, max_retries=0) with
   `stream=True`, from request start to the first chunk with non-empty `delta.content`;
   through the platform (`model="bench"`, an agent) vs the fake provider directly
   (`model="gpt-test"`). Interleaved, SAMPLES each after WARMUP each; medians and the added ms
   (target: 15 ms at most, issue #16).
2. Concurrency: CONCURRENT streaming chats at once (asyncio.gather, one AsyncOpenAI, 60 s
   timeout), directly, then through the platform 1 + WARM_BURSTS times (the first burst warms
   the workers: its CPU per chat is printed apart; the CPU per chat is the median burst's,
   the latencies the last burst's): completed, errors (429s counted
   apart), per-chat total latency (request start to end of stream) and TTFT p50/p99, and the
   added latency (platform percentile - direct percentile); the platform's CPU per chat: the
   web process, the workers (and apart, their Celery consumer threads, which take the run
   messages) and PostgreSQL.

If the TTFT target is missed, a breakdown of one platform chat from the Run's timestamps and
its RunEvent rows (request -> Run created -> claimed by the worker -> first text delta stored
-> seen by the client) shows where the time goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import multiprocessing
import os
import platform
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0] or ".").resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
import openai  # noqa: E402

from bench.common import (  # noqa: E402
    Child,
    configure_django,
    cpu_seconds,
    free_port,
    group_pids,
    machine_speed_ms,
    main_thread_cpu_seconds,
    postmaster_pid,
    request_budgets_unlimited,
    sized,
    speed_line,
    wait_web,
    wait_worker,
    write_results,
)

SAMPLES = sized(30, smoke=3)
WARMUP = sized(3, smoke=1)
CONCURRENT = sized(100, smoke=5)
# The CPU per chat is the median of this many bursts after the first: one burst's moves by
# +-25% on a 2-core machine, and a slow spell of the machine can take one or two of them.
WARM_BURSTS = sized(5, smoke=1)
CLIENT_TIMEOUT_S = 60.0
TARGET_TTFT_ADDED_MS = 15.0
TARGET_CPU_MS_PER_CHAT = 12.0  # web, workers and PostgreSQL together (issue #35)
CHUNK_DELAY_S = 0.005
REPLY_TEXT = "Hello there, this is the benchmark's reply."
MODEL = "gpt-test"
AGENT = "bench"
SERVER_MODE = "separate process (multiprocessing spawn), ThreadingHTTPServer on 127.0.0.1"


# -- the fake server, in its own process -----------------------------------------------------
def serve(
    conn: Connection, *, latency_s: float = 0.0, chunk_delay_s: float = CHUNK_DELAY_S
) -> None:
    """Child process: a ProviderServer answering every chat with the same TextReply, after
    `latency_s`. Commands: ("stats",), ("in_flight",): answering now, ("take_max",): the most
    at once since the last take, ("stop",)."""
    from tests.fakes.provider_server import ProviderServer, TextReply

    server = ProviderServer(models=[MODEL], latency_s=latency_s)
    reply = TextReply(REPLY_TEXT, chunk_delay_s=chunk_delay_s)
    server._next_reply = lambda api: None if api == "embeddings" else reply  # type: ignore[method-assign]
    conn.send(server.url)
    try:
        while True:
            (command,) = conn.recv()
            if command == "stop":
                break
            if command == "stats":
                conn.send(
                    {
                        "requests": len(server.received),
                        "connections": server.connection_count,
                        "errors": [repr(e) for e in server.errors],
                    }
                )
            with server._lock:
                if command == "in_flight":
                    conn.send(server.in_flight)
                elif command == "take_max":
                    most, server.max_in_flight = server.max_in_flight, server.in_flight
                    conn.send(most)
    finally:
        server.close()


class RemoteServer:
    """The fake provider (`serve` above) in its own process: its answers after `latency_s`."""

    def __init__(self, *, latency_s: float = 0.0, chunk_delay_s: float = CHUNK_DELAY_S) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe()
        target = functools.partial(serve, latency_s=latency_s, chunk_delay_s=chunk_delay_s)
        self._process = context.Process(
            target=target, args=(child_conn,), name="provider-server", daemon=True
        )
        self._process.start()
        if not self._conn.poll(60):
            raise RuntimeError("the provider server process did not start")
        self.url: str = self._conn.recv()
        self.openai_base_url = self.url + "/v1"

    def ask(self, *command: Any) -> Any:
        self._conn.send(command)
        return self._conn.recv()

    def close(self) -> None:
        if self._process.is_alive():
            with contextlib.suppress(Exception):
                self._conn.send(("stop",))
            self._process.join(10)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(5)


# -- Django, the embedded services, uvicorn and the Celery worker -----------------------------
def create_fixture(server: RemoteServer) -> str:
    """Tenant, API key (read, run), default provider connection, agent; the key's secret."""
    from agents.models import Agent
    from providers.models import ProviderConnection
    from tenancy.services import api_key_create, tenant_create

    tenant = tenant_create(slug="bench", name="Bench")
    _, secret = api_key_create(tenant=tenant, name="bench", scopes=["read", "run"])
    ProviderConnection.objects.create(
        tenant=tenant,
        name="Fake OpenAI",
        kind="openai",
        api_key="fake-provider-key",
        base_url=server.openai_base_url,
        default_model=MODEL,
        is_default=True,
        max_retries=0,
    )
    Agent.objects.create(
        tenant=tenant, slug=AGENT, name="Bench", instructions="Be brief.", use_all_tools=False
    )
    return secret


# -- the clients -----------------------------------------------------------------------------
@dataclass
class Chat:
    ttft_s: float | None = None
    total_s: float | None = None
    text: str = ""
    error: str | None = None
    status: int | None = None


def make_client(base_url: str, api_key: str) -> openai.AsyncOpenAI:
    limits = httpx2.Limits(max_connections=CONCURRENT * 2, max_keepalive_connections=CONCURRENT)
    return openai.AsyncOpenAI(
        api_key=api_key,
        base_url=base_url,
        http_client=httpx2.AsyncClient(limits=limits, timeout=CLIENT_TIMEOUT_S),
        max_retries=0,
        timeout=CLIENT_TIMEOUT_S,
    )


async def stream_chat(client: openai.AsyncOpenAI, model: str) -> Chat:
    chat = Chat()
    parts: list[str] = []
    started = time.perf_counter()
    try:
        stream = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Say hello."}], stream=True
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                if chat.ttft_s is None:
                    chat.ttft_s = time.perf_counter() - started
                parts.append(chunk.choices[0].delta.content)
        chat.total_s = time.perf_counter() - started
    except openai.APIStatusError as e:
        chat.error, chat.status = f"{e.status_code} {e.message}"[:200], e.status_code
    except Exception as e:
        chat.error = f"{type(e).__name__}: {e}"[:200]
    chat.text = "".join(parts)
    if chat.error is None and REPLY_TEXT not in chat.text:
        chat.error = f"unexpected text {chat.text!r}"[:200]
    return chat


def ms(seconds: float) -> float:
    return seconds * 1000


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


async def ttft_rounds(platform_c: openai.AsyncOpenAI, direct_c: openai.AsyncOpenAI) -> dict:
    for _ in range(WARMUP):
        for client, model in ((platform_c, AGENT), (direct_c, MODEL)):
            chat = await stream_chat(client, model)
            if chat.error:
                raise RuntimeError(f"warm-up chat failed ({model}): {chat.error}")
    samples: dict[str, list[Chat]] = {"platform": [], "direct": []}
    for i in range(SAMPLES):
        order = [("platform", platform_c, AGENT), ("direct", direct_c, MODEL)]
        if i % 2:
            order.reverse()
        for side, client, model in order:
            samples[side].append(await bounded_chat(client, model))
    return samples


async def bounded_chat(client: openai.AsyncOpenAI, model: str) -> Chat:
    """A chat with an overall deadline: the platform's heartbeats keep a stuck stream alive
    past the SDK's read timeout."""
    try:
        return await asyncio.wait_for(stream_chat(client, model), CLIENT_TIMEOUT_S)
    except TimeoutError:
        return Chat(error=f"no end of stream within {CLIENT_TIMEOUT_S:g} s")


async def concurrent_chats(client: openai.AsyncOpenAI, model: str) -> tuple[list[Chat], float]:
    started = time.perf_counter()
    chats = await asyncio.gather(*(bounded_chat(client, model) for _ in range(CONCURRENT)))
    return list(chats), time.perf_counter() - started


@dataclass
class Concurrency:
    side: str
    completed: int
    errors: int
    throttled_429: int
    wall_s: float
    total_p50_ms: float | None
    total_p99_ms: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    error_samples: list[str] = field(default_factory=list)


def summarize(side: str, chats: list[Chat], wall_s: float) -> Concurrency:
    ok = [c for c in chats if c.error is None]
    totals = [ms(c.total_s) for c in ok if c.total_s is not None]
    ttfts = [ms(c.ttft_s) for c in ok if c.ttft_s is not None]
    errors = [c for c in chats if c.error is not None]
    return Concurrency(
        side=side,
        completed=len(ok),
        errors=len(errors),
        throttled_429=sum(1 for c in errors if c.status == 429),
        wall_s=wall_s,
        total_p50_ms=pct(totals, 50) if totals else None,
        total_p99_ms=pct(totals, 99) if totals else None,
        ttft_p50_ms=pct(ttfts, 50) if ttfts else None,
        ttft_p99_ms=pct(ttfts, 99) if ttfts else None,
        error_samples=[
            f"{n} x {e}" for e, n in Counter(c.error for c in errors if c.error).most_common(5)
        ],
    )


# -- where the time goes -------------------------------------------------------------------
def last_run_pk() -> int | None:
    from django.db import connection

    from agents.models import Run

    try:
        return Run.objects.order_by("-pk").values_list("pk", flat=True).first()
    finally:
        connection.close()


def max_connections() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW max_connections")
        return cursor.fetchone()[0]


def run_breakdown(last_n: int, max_pk: int | None) -> dict[str, Any]:
    """From the last `last_n` Runs (the TTFT samples): created -> started (Celery pickup,
    incl. the broker hop), started -> first text delta event stored, and the events per run."""
    from agents.models import Run, RunEvent

    runs = list(Run.objects.filter(pk__lte=max_pk or 0).order_by("-pk")[:last_n])
    pickup, to_first_delta, to_finished, events = [], [], [], []
    types: dict[str, int] = {}
    for run in runs:
        rows = list(RunEvent.objects.filter(run=run).order_by("seq"))
        events.append(len(rows))
        for row in rows:
            types[row.type] = types.get(row.type, 0) + 1
        if run.started_at and run.created_at:
            pickup.append(ms((run.started_at - run.created_at).total_seconds()))
        delta = next((r for r in rows if "delta" in r.type), None)
        if delta is not None and run.started_at:
            to_first_delta.append(ms((delta.created_at - run.started_at).total_seconds()))
        if run.finished_at and run.started_at:
            to_finished.append(ms((run.finished_at - run.started_at).total_seconds()))

    def med(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    return {
        "runs": len(runs),
        "created_to_started_ms": med(pickup),
        "started_to_first_text_event_ms": med(to_first_delta),
        "started_to_finished_ms": med(to_finished),
        "events_per_run": med(events),
        "event_types_total": types,
    }


# -- output ----------------------------------------------------------------------------------
def fmt(value: float | None, width: int = 10, spec: str = ".1f") -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}{spec}}"


def main() -> None:
    load_at_start, speed_at_start = os.getloadavg(), machine_speed_ms()
    request_budgets_unlimited()
    configure_django("bench-api-")
    import celery
    import django
    from django.conf import settings

    data_dir = Path(settings.DATA_DIR)
    server = RemoteServer()
    children: list[Child] = []
    try:
        secret = create_fixture(server)
        port = free_port()
        from agentplatform.management.commands.serve import platform_commands

        for name, command in platform_commands("127.0.0.1", port).items():
            log = data_dir / f"{name.replace(' ', '-')}.log"
            children.append(Child(name, command[1:], log))  # Child adds the interpreter
        web, worker = children[0], children[1]
        web_ready_s = wait_web(web, port)
        worker_ready_s = wait_worker(worker)
        platform_url = f"http://127.0.0.1:{port}/v1"

        cutoff: list[int | None] = []
        groups, postgres = [c.process.pid for c in children], postmaster_pid(data_dir)
        cpu: dict[str, Any] = {}

        async def measure() -> tuple[dict, list[Concurrency]]:
            platform_c = make_client(platform_url, secret)
            direct_c = make_client(server.openai_base_url, "fake-provider-key")
            try:
                samples = await ttft_rounds(platform_c, direct_c)
                cutoff.append(await asyncio.to_thread(last_run_pk))
                direct_chats, direct_wall = await concurrent_chats(direct_c, MODEL)

                # The first burst warms the workers (the TTFT samples mostly ran in the web
                # process): their database lanes, their connections to the provider, the
                # modules runs import on first use. Its CPU is printed apart; the figure
                # is the median of the next WARM_BURSTS bursts'.
                workers = group_pids(groups[1:])

                def used() -> tuple[float, ...]:  # serve's, the web's, PostgreSQL's, consumers'
                    found = cpu_seconds({"serve": groups, "web": groups[:1]}, postgres)
                    consumers = main_thread_cpu_seconds(workers)
                    return found["serve"], found["web"], found["PostgreSQL"], consumers

                bursts: list[dict[str, float]] = []
                for _ in range(1 + WARM_BURSTS):
                    speed = machine_speed_ms()  # (a slow spell inflates the burst's CPU)
                    before = used()
                    platform_chats, platform_wall = await concurrent_chats(platform_c, AGENT)
                    after = used()
                    failed = [c.error for c in platform_chats if c.error is not None]
                    if failed:  # a burst with errors measures the errors, not the chats
                        raise RuntimeError(f"{len(failed)} chats of a burst failed: {failed[0]}")
                    done = len(platform_chats)
                    serve, web, postgres_ms, consumers = (
                        (a - b) * 1000 / done for a, b in zip(after, before, strict=True)
                    )
                    bursts.append(
                        {
                            "serve_ms_per_chat": serve,
                            "web_ms_per_chat": web,
                            "workers_ms_per_chat": serve - web,
                            "consumers_ms_per_chat": consumers,
                            "postgres_ms_per_chat": postgres_ms,
                            "ms_per_chat": serve + postgres_ms,
                            "loop_ms_before": speed,
                        }
                    )
                cold, warm = bursts[0], bursts[1:]
                cpu.update({f"cold_{k}": v for k, v in cold.items()})
                cpu.update(sorted(warm, key=lambda b: b["ms_per_chat"])[len(warm) // 2])
                cpu["warm_bursts_ms_per_chat"] = [b["ms_per_chat"] for b in warm]
                cpu["warm_bursts_loop_ms"] = [b["loop_ms_before"] for b in warm]
            finally:
                await platform_c.close()
                await direct_c.close()
            conc = [
                summarize("direct", direct_chats, direct_wall),
                summarize("platform /v1", platform_chats, platform_wall),
            ]
            return samples, conc

        samples, conc = asyncio.run(measure())
        breakdown = run_breakdown(SAMPLES, cutoff[0])
        breakdown["postgres_max_connections"] = max_connections()
        stats = server.ask("stats")
        worker_tail, web_tail = worker.tail(), web.tail()
    finally:
        for child in reversed(children):
            child.stop()
        server.close()

    ttft: dict[str, dict[str, Any]] = {}
    for side, chats in samples.items():
        ok = [ms(c.ttft_s) for c in chats if c.error is None and c.ttft_s is not None]
        totals = [ms(c.total_s) for c in chats if c.error is None and c.total_s is not None]
        ttft[side] = {
            "samples": len(ok),
            "errors": [c.error for c in chats if c.error],
            "median_ms": statistics.median(ok) if ok else None,
            "min_ms": min(ok) if ok else None,
            "max_ms": max(ok) if ok else None,
            "total_median_ms": statistics.median(totals) if totals else None,
        }
    p, d = ttft["platform"]["median_ms"], ttft["direct"]["median_ms"]
    added_ttft = p - d if p is not None and d is not None else None
    meets = added_ttft is not None and added_ttft <= TARGET_TTFT_ADDED_MS

    direct, plat = conc
    added = {
        "total_p50_ms": None
        if plat.total_p50_ms is None
        else plat.total_p50_ms - (direct.total_p50_ms or 0),
        "total_p99_ms": None
        if plat.total_p99_ms is None
        else plat.total_p99_ms - (direct.total_p99_ms or 0),
        "ttft_p50_ms": None
        if plat.ttft_p50_ms is None
        else plat.ttft_p50_ms - (direct.ttft_p50_ms or 0),
        "ttft_p99_ms": None
        if plat.ttft_p99_ms is None
        else plat.ttft_p99_ms - (direct.ttft_p99_ms or 0),
    }

    print(f"fake provider: {SERVER_MODE}; TextReply, 3 pieces, {CHUNK_DELAY_S * 1000:g} ms apart")
    print(
        f"platform: the processes of `manage.py serve` (uvicorn, the runs worker, the batch "
        f"worker); {os.cpu_count()} CPUs"
    )
    print()
    print(f"1. Time to first token, median of {SAMPLES} interleaved samples, {WARMUP} warm-up")
    print(f"{'side':<28}{'TTFT ms':>10}{'min':>9}{'max':>9}{'total ms':>10}{'errors':>8}")
    for side, label in (("direct", "fake provider directly"), ("platform", "platform /v1 (agent)")):
        t = ttft[side]
        print(
            f"{label:<28}{fmt(t['median_ms'])}{fmt(t['min_ms'], 9)}{fmt(t['max_ms'], 9)}"
            f"{fmt(t['total_median_ms'])}{len(t['errors']):>8}"
        )
    verdict = "ok" if meets else "MISSED"
    print(
        f"{'added by the platform':<28}{fmt(added_ttft)}   target <= {TARGET_TTFT_ADDED_MS:g} ms: "
        f"{verdict}"
    )
    print()
    print(f"2. {CONCURRENT} concurrent streaming chats (client timeout {CLIENT_TIMEOUT_S:g} s)")
    print(
        f"{'side':<28}{'done':>6}{'errors':>8}{'429':>6}{'wall s':>8}{'total p50':>11}"
        f"{'total p99':>11}{'TTFT p50':>10}{'TTFT p99':>10}"
    )
    for c in conc:
        print(
            f"{c.side:<28}{c.completed:>6}{c.errors:>8}{c.throttled_429:>6}{c.wall_s:>8.2f}"
            f"{fmt(c.total_p50_ms, 11)}{fmt(c.total_p99_ms, 11)}{fmt(c.ttft_p50_ms)}"
            f"{fmt(c.ttft_p99_ms)}"
        )
    print(
        f"{'added (platform - direct)':<28}{'':>28}{fmt(added['total_p50_ms'], 11)}"
        f"{fmt(added['total_p99_ms'], 11)}{fmt(added['ttft_p50_ms'])}{fmt(added['ttft_p99_ms'])}"
    )
    for c in conc:
        for sample in c.error_samples:
            print(f"  {c.side} error: {sample}")
    bursts = ", ".join(f"{ms:.1f}" for ms in cpu["warm_bursts_ms_per_chat"])
    loops = ", ".join(f"{ms:.0f}" for ms in cpu["warm_bursts_loop_ms"])
    print(
        f"platform CPU per chat (of the {CONCURRENT}, the median burst of {bursts}; the "
        f"machine's loop read before each: {loops} ms): "
        f"{cpu['ms_per_chat']:.1f} ms "
        f"(serve's processes {cpu['serve_ms_per_chat']:.1f}: web {cpu['web_ms_per_chat']:.1f}, "
        f"workers {cpu['workers_ms_per_chat']:.1f}, of which their Celery consumer threads "
        f"{cpu['consumers_ms_per_chat']:.2f}; PostgreSQL "
        f"{cpu['postgres_ms_per_chat']:.1f}); target <= {TARGET_CPU_MS_PER_CHAT:g} ms: "
        f"{'ok' if cpu['ms_per_chat'] <= TARGET_CPU_MS_PER_CHAT else 'MISSED'}"
    )
    print(
        f"  the burst before it, the first after start (workers cold): "
        f"{cpu['cold_ms_per_chat']:.1f} ms (serve's processes "
        f"{cpu['cold_serve_ms_per_chat']:.1f}, PostgreSQL {cpu['cold_postgres_ms_per_chat']:.1f})"
    )
    speed_at_end = machine_speed_ms()
    print(f"  {speed_line(speed_at_start, speed_at_end)}")
    print()
    print(f"Where a platform chat's time goes (median of the {breakdown['runs']} TTFT-sample runs)")
    for key in (
        "created_to_started_ms",
        "started_to_first_text_event_ms",
        "started_to_finished_ms",
        "events_per_run",
        "postgres_max_connections",
    ):
        value = breakdown[key]
        print(f"  {key:<40}{value if isinstance(value, str) else fmt(value)}")

    document = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_start_end": [load_at_start, os.getloadavg()],
            "speed_ms_start_end": [speed_at_start, speed_at_end],
            "django": django.__version__,
            "celery": celery.__version__,
            "openai": openai.__version__,
        },
        "setup": {
            "server": SERVER_MODE,
            "reply": {"text": REPLY_TEXT, "pieces": 3, "chunk_delay_s": CHUNK_DELAY_S},
            "web": "uvicorn agentplatform.asgi:application, 1 process",
            "processes": "manage.py serve's (serve.platform_commands)",
            "web_ready_s": web_ready_s,
            "celery_worker_ready_s": worker_ready_s,
            "client": "openai.AsyncOpenAI(httpx2.AsyncClient, max_retries=0), stream=True",
            "server_stats": stats,
        },
        "ttft": {
            "samples": SAMPLES,
            "warmup": WARMUP,
            "sides": ttft,
            "added_ms": added_ttft,
            "target_added_ms": TARGET_TTFT_ADDED_MS,
            "meets_target": meets,
        },
        "concurrency": {
            "chats": CONCURRENT,
            "client_timeout_s": CLIENT_TIMEOUT_S,
            "sides": [c.__dict__ for c in conc],
            "added_ms": added,
            "platform_cpu": cpu,
            "target_cpu_ms_per_chat": TARGET_CPU_MS_PER_CHAT,
        },
        "platform_run_breakdown": breakdown,
        "worker_log_tail": worker_tail[-1500:],
        "uvicorn_log_tail": web_tail[-1500:],
    }
    headline = {
        "TTFT ms, direct": d,
        "TTFT ms, platform": p,
        "TTFT added ms": added_ttft,
        f"{CONCURRENT} at once, platform total p50 ms": plat.total_p50_ms,
        f"{CONCURRENT} at once, added total p50 ms": added["total_p50_ms"],
        "platform CPU ms per chat": cpu["ms_per_chat"],
        "platform CPU ms per chat, first burst (cold)": cpu["cold_ms_per_chat"],
    }
    write_results("api", document, headline=headline)


if __name__ == "__main__":
    main()
