"""What the platform adds to an agent run over a bare hand-written loop, side by side against
the local fake provider server (tests/fakes/provider_server.py).

Run: cd /work/main && .venv/bin/python bench/agents.py
(prints tables, writes bench/results/agents.json). Takes a minute or two; BENCH_SMOKE=1 runs
every section a few times (bench/common.py), in seconds. Needs no network
and no configuration: it starts the embedded PostgreSQL and Redis in a temporary DATA_DIR
(stopped, and the directory removed, at exit), one Celery worker subprocess and the durable
peers' processes (stopped at the end; the peers need .venv-peers: `make py-peers`).

One run = 3 rounds: the model calls `calculator` (round 1), calls it again (round 2), then
answers "done" (round 3); the OpenAI wire format, scripted per run on the fake server. The
server runs in a separate process (multiprocessing, spawn), so its threads do not share the
client's GIL. RUNS timed runs per side, in blocks of BLOCK_RUNS (every side's block once per
round, the order rotating from round to round), after WARMUP_RUNS untimed runs per side.

Sides:
1. bare loop: `openai.AsyncOpenAI(http_client=httpx2.AsyncClient(), max_retries=0)`,
   `chat.completions.create` with the definitions of the tools the platform offers the agent
   (the built-ins and the plug-ins' tools, `effective_tools`; prebuilt once), the tool
   call executed with `tools.runtime.calculator.evaluate` directly, messages appended, until
   text. No persistence. One client and one event loop (asyncio.Runner) for all its runs.
1'. bare loop, streaming (reference): the same with `stream=True` and the deltas assembled,
   because the platform streams (its event sink wants text deltas).
1''. run_agent only (reference): the platform's agent loop and OpenAI adapter (egress-guarded
   client, streaming) with the tenant's registry, an event sink that stores nothing and no
   checkpoints: no DB, no Redis, no lease. Its parts are built once and it runs on the bare
   loop's event loop, so its SDK client (PerLoop) is kept across runs.
2. inline platform path: `agents.runs.run_inline` (Run row, leased execution, events
   stored and published to Redis, checkpoints after every step — both through RunWriter, which
   coalesces them into single statements — OpenAI adapter through the egress-guarded client).
3. full path through Celery: `agents.runs.run_start(enqueue=True)` in this process, a
   real worker subprocess (`--pool solo`) executes it; timed to the terminal event seen
   through `agents.runs.reader.iter_run_events` (what a streaming client sees), and to the Run
   row being terminal (polled every POLL_S after that event; `finalize` writes the row
   after the terminal event is published).
4. durable peers (bench/peers/, their own venv and processes): openai-agents with a
   SQLAlchemy session, openai-agents with DBOS, pydantic-ai with DBOS, the same run with
   every step persisted in the same PostgreSQL; and the bare loop again in the peers' venv
   (reference).

Figures: median ms per run over the RUNS runs of each side, ms per model round (÷ 3), the
overhead per round over the bare loop (difference of the medians ÷ 3), the ratio, and the
platform's overhead ÷ the best durable peer's. Targets from the issues: under 10 ms of
platform overhead per round, persistence included; at most half the best peer's overhead.

Also: the DB queries of one inline run and of one chat turn (an inline run continuing a
conversation: CaptureQueriesContext, by kind and table), the Redis commands it sends (INFO
commandstats before/after, before the worker starts), and a timing breakdown of the inline
path, alone and as a chat turn, from INSTRUMENTED_RUNS extra runs each with the functions
wrapped in timers (_prepare_agent and its parts, the checkpoints (waits where durable),
model calls with their quota holds, tool calls, finalize; the rest by difference; and
RunWriter's writes in the DB thread, which overlap the model and tool calls), and unit costs
in isolation (an event INSERT with and without its own transaction, a tool round's rows as 8
statements vs as RunWriter writes them, an SSL context, a guarded client with a new or a
shared one, the thread hops).

Row-level security: this process logs in as the app role (rls.assume_app_role) and acts for
the bench tenant, as a web process serving that tenant's request would; it makes the fixture
inside rls.owner() (the app login acting for every tenant). The worker is given the owner's
DATABASE_URL, as `manage.py serve` gives it, and logs in as the app role itself, as workers
do. `DB_ROW_LEVEL_SECURITY=false` runs every side as the owner instead, for a comparison.

The machine may be shared (2 cores here): the load average at start and end goes into the
JSON, and the figures move with it; the interleaving keeps the sides comparable.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import multiprocessing
import os
import platform
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# `python bench/agents.py` puts bench/ first on sys.path, where this very file would shadow
# the `agents` package; the repo root must come first (nothing is pip-installed).
if sys.path and Path(sys.path[0] or ".").resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
import openai  # noqa: E402

from bench.common import (  # noqa: E402
    Child,
    child_env,
    configure_django,
    sized,
    wait_worker,
    write_results,
)
from bench.peers import BARE_PEER, DURABLE_PEERS, PEERS, Peers  # noqa: E402
from tools.runtime.calculator import evaluate  # noqa: E402

RUNS = sized(30, smoke=3)
BLOCK_RUNS = sized(5, smoke=1)  # runs of one side in a row; RUNS is a multiple
WARMUP_RUNS = sized(3, smoke=1)
INSTRUMENTED_RUNS = sized(20, smoke=2)
QUERY_RUNS = sized(3, smoke=2)
COST_REPEATS = sized(5, smoke=1)
ROUNDS_PER_RUN = 3
TARGET_OVERHEAD_MS = 10.0
TARGET_PEER_RATIO = 0.5  # the platform's overhead per round ÷ the best durable peer's
POLL_S = 0.002
RUN_TIMEOUT_S = 30.0
MODEL = "gpt-test"
MAX_TOKENS = 1024  # AgentSpec.max_tokens_per_response's default, as the adapter sends it
INSTRUCTIONS = "Be brief."
INPUT = "What are 2+2 and 3*3?"
CALLS = (("c1", '{"expression": "2+2"}'), ("c2", '{"expression": "3*3"}'))
ANSWER = "done"
SERVER_MODE = "separate process (multiprocessing spawn), ThreadingHTTPServer on 127.0.0.1"
WORKER_COMMAND = [
    "-m", "celery", "-A", "agentplatform", "worker", "--without-gossip", "--without-mingle",
    "--without-heartbeat", "--pool", "solo", "--loglevel", "WARNING",
    "-Q", "runs,housekeeping",  # as serve's runs workers (settings.RUNS_QUEUE, ...)
]  # fmt: skip

BARE, BARE_STREAM = "bare loop", "bare loop, streaming"
LOOP_ONLY = "run_agent only (no DB, no Redis)"
INLINE = "platform inline (run_inline)"
CELERY_EVENT = "platform via Celery, terminal event"
CELERY_ROW = "platform via Celery, terminal Run row"
SIDES = (BARE, BARE_STREAM, LOOP_ONLY, INLINE, CELERY_EVENT, CELERY_ROW, *PEERS)
REFERENCE_SIDES = (BARE, BARE_STREAM, LOOP_ONLY, *PEERS)  # no target: not the platform path


# -- the fake server, in its own process -----------------------------------------------------
def serve(conn: Connection) -> None:
    """Child process: a ProviderServer, driven by commands over `conn` until "stop"."""
    from tests.fakes.provider_server import ProviderServer, TextReply, ToolCall, ToolCallReply

    server = ProviderServer(models=[MODEL])
    conn.send(server.url)
    replies = [
        ToolCallReply([ToolCall(call_id, "calculator", arguments)]) for call_id, arguments in CALLS
    ]
    replies.append(TextReply(ANSWER))
    try:
        while True:
            (command,) = conn.recv()
            if command == "stop":
                break
            if command == "script_run":  # the 3 replies of one run; answers what was left
                left = server.pending("openai")
                server.script("openai", *replies)
                conn.send(left)
            elif command == "last":
                last = next(r for r in reversed(server.received) if r.api == "openai")
                conn.send(last.body)
            elif command == "stats":
                conn.send(
                    {
                        "requests": len(server.received),
                        "connections": server.connection_count,
                        "pending": server.pending("openai"),
                        "errors": [repr(e) for e in server.errors],
                    }
                )
            elif command == "clear":
                server.received.clear()
                conn.send(None)
            elif command == "recent":  # who asked for the last replies, to tell a run's calls
                conn.send(  # from a stray client's
                    [
                        f"{r.headers.get('user-agent', '?')}: {len(r.body['messages'])} messages"
                        for r in server.received[-6:]
                        if r.api == "openai" and isinstance(r.body, dict) and "messages" in r.body
                    ]
                )
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
        self.openai_base_url = self.url + "/v1"

    def ask(self, *command: Any) -> Any:
        self._conn.send(command)
        return self._conn.recv()

    def script_run(self) -> None:
        left = self.ask("script_run")
        if left:
            raise RuntimeError(f"the previous run left {left} scripted replies unused")

    def close(self) -> None:
        if self._process.is_alive():
            self._conn.send(("stop",))
            self._process.join(10)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(5)


# -- Django, the embedded services and the Celery worker ---------------------------------------
# -- the sides -------------------------------------------------------------------------------
@dataclass
class Fixture:
    tenant: Any
    agent: Any
    connection: Any
    system: str  # the platform's composed system prompt, sent by the bare loop too
    tools: list[dict[str, Any]]  # the tools the platform offers the agent, as OpenAI's


def create_fixture(server: RemoteServer) -> Fixture:
    from agents.models import Agent
    from agents.runtime.prompt import compose_system_prompt
    from agents.specs import agent_spec
    from agents.tool_sources import effective_tools
    from providers.models import ProviderConnection
    from tenancy.services import tenant_create

    tenant = tenant_create(slug="bench", name="Bench")
    connection = ProviderConnection.objects.create(
        tenant=tenant,
        name="Fake OpenAI",
        kind="openai",
        api_key="k",
        base_url=server.openai_base_url,
        default_model=MODEL,
        is_default=True,
        max_retries=0,
    )
    agent = Agent.objects.create(
        tenant=tenant, slug="bench", name="Bench", instructions=INSTRUCTIONS, use_all_tools=True
    )
    spec = agent_spec(agent, connection)
    offered = effective_tools(agent, spec=spec).offered  # the built-ins and the plug-ins' tools
    system = compose_system_prompt(spec, offered)
    return Fixture(tenant, agent, connection, system, offered.definitions("openai"))


class BareLoop:
    """The hand-written loop: one SDK client, tool definitions built once."""

    def __init__(self, base_url: str, fixture: Fixture) -> None:
        self.client = openai.AsyncOpenAI(
            api_key="k", base_url=base_url, http_client=httpx2.AsyncClient(), max_retries=0
        )
        self.system = fixture.system
        self.tools = fixture.tools
        self.last_messages: list[dict[str, Any]] = []

    def _params(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "model": MODEL,
            "messages": messages,
            "max_completion_tokens": MAX_TOKENS,
            "tools": self.tools,
            "tool_choice": "auto",
        }

    def _act(self, messages: list[dict[str, Any]], text: str, calls: list[dict]) -> bool:
        """Append the assistant turn and the tool results; False when the run is done."""
        turn: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            turn["tool_calls"] = calls
        messages.append(turn)
        for call in calls:
            arguments = json.loads(call["function"]["arguments"])
            result = {"result": evaluate(arguments["expression"])}
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
            )
        return bool(calls)

    async def run(self) -> tuple[str, int]:
        messages = [{"role": "system", "content": self.system}, {"role": "user", "content": INPUT}]
        for rounds in range(1, 11):
            completion = await self.client.chat.completions.create(**self._params(messages))
            message = completion.choices[0].message
            calls = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in message.tool_calls or ()
            ]
            if not self._act(messages, message.content or "", calls):
                self.last_messages = messages
                return message.content or "", rounds
        raise RuntimeError("the bare loop did not finish")

    async def run_streaming(self) -> tuple[str, int]:
        messages = [{"role": "system", "content": self.system}, {"role": "user", "content": INPUT}]
        for rounds in range(1, 11):
            stream = await self.client.chat.completions.create(
                **self._params(messages), stream=True, stream_options={"include_usage": True}
            )
            text: list[str] = []
            pending: dict[int, dict[str, Any]] = {}
            async for chunk in stream:
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                if delta.content:
                    text.append(delta.content)
                for piece in delta.tool_calls or ():
                    part = pending.setdefault(
                        piece.index,
                        {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                    )
                    part["id"] = piece.id or part["id"]
                    if piece.function is not None:
                        part["function"]["name"] += piece.function.name or ""
                        part["function"]["arguments"] += piece.function.arguments or ""
            calls = [pending[index] for index in sorted(pending)]
            if not self._act(messages, "".join(text), calls):
                return "".join(text), rounds
        raise RuntimeError("the streaming bare loop did not finish")


class DroppingSink:
    """Wants text deltas like RunEventSink (so the adapter streams), stores nothing."""

    wants_text_deltas = True

    async def emit(self, type: str, payload: dict[str, Any]) -> None:
        return None


@dataclass
class LoopParts:
    """What `_prepare` hands the agent loop, built once (as the bare loop's client is)."""

    spec: Any
    adapter: Any
    registry: Any
    ctx: Any

    @classmethod
    def build(cls, fixture: Fixture) -> LoopParts:
        from agents.specs import agent_spec
        from providers.services import adapter_for
        from tools.loader import tenant_tools
        from tools.services import tool_context

        return cls(
            spec=agent_spec(fixture.agent, fixture.connection),
            adapter=adapter_for(fixture.connection),
            registry=tenant_tools(fixture.tenant).registry,
            ctx=tool_context(tenant=fixture.tenant, run_id="bench"),
        )


class Sides:
    """One run of each side; each returns its wall times in seconds."""

    def __init__(self, fixture: Fixture, server: RemoteServer, bare: BareLoop) -> None:
        self.fixture, self.server, self.bare = fixture, server, bare
        self.loop = LoopParts.build(fixture)
        self.runner = asyncio.Runner()  # the bare loop's event loop, reused across runs
        # Per platform run: (created -> started_at, started_at -> finished_at) in ms.
        self.stamps: dict[str, list[tuple[float, float]]] = {INLINE: [], CELERY_ROW: []}

    def bare_run(self, *, streaming: bool = False) -> dict[str, float]:
        self.server.script_run()
        started = time.perf_counter()
        text, rounds = self.runner.run(self.bare.run_streaming() if streaming else self.bare.run())
        elapsed = time.perf_counter() - started
        if (text, rounds) != (ANSWER, ROUNDS_PER_RUN):
            raise RuntimeError(f"the bare loop answered {text!r} after {rounds} rounds")
        return {BARE_STREAM if streaming else BARE: elapsed}

    def loop_only_run(self) -> dict[str, float]:
        from agents.runtime.loop import run_agent
        from agents.runtime.spec import RunStatus

        self.server.script_run()
        started = time.perf_counter()
        outcome = self.runner.run(
            run_agent(
                spec=self.loop.spec, adapter=self.loop.adapter, registry=self.loop.registry,
                ctx=self.loop.ctx, input=INPUT, sink=DroppingSink(),
            )
        )  # fmt: skip
        elapsed = time.perf_counter() - started
        if (outcome.status, outcome.output) != (RunStatus.SUCCEEDED, ANSWER):
            raise RuntimeError(f"run_agent ended {outcome.status}: {outcome.error}")
        return {LOOP_ONLY: elapsed}

    def inline_run(self) -> dict[str, float]:
        from agents.runs import run_inline

        self.server.script_run()
        started = time.perf_counter()
        run = run_inline(tenant=self.fixture.tenant, agent=self.fixture.agent, input=INPUT)
        elapsed = time.perf_counter() - started
        self.check(run)
        self.stamps[INLINE].append(run_stamps(run))
        return {INLINE: elapsed}

    def chat_with_history(self, turns: int):
        """A conversation with `turns` earlier turns, each a run of the agent."""
        from agents.models import Conversation
        from agents.runs import run_inline

        chat = Conversation.objects.create(
            tenant=self.fixture.tenant, agent=self.fixture.agent, title="Bench chat"
        )
        for _ in range(turns):
            self.server.script_run()
            self.check(
                run_inline(
                    tenant=self.fixture.tenant,
                    agent=self.fixture.agent,
                    input=INPUT,
                    conversation=chat,
                )
            )
        return chat

    def celery_run(self) -> dict[str, float]:
        from agents.models import Run
        from agents.runs import run_start

        self.server.script_run()
        started = time.perf_counter()
        run = run_start(tenant=self.fixture.tenant, agent=self.fixture.agent, input=INPUT)
        event = self.runner.run(asyncio.wait_for(terminal_event(run), RUN_TIMEOUT_S))
        to_event = time.perf_counter() - started
        while not Run.objects.get(pk=run.pk).is_terminal:
            if time.perf_counter() - started > RUN_TIMEOUT_S:
                raise RuntimeError(f"run {run.pk} did not finish")
            time.sleep(POLL_S)
        to_row = time.perf_counter() - started
        run.refresh_from_db()
        if event != "run.completed":
            raise RuntimeError(f"run {run.pk} ended with {event}")
        self.check(run)
        self.stamps[CELERY_ROW].append(run_stamps(run))
        return {CELERY_EVENT: to_event, CELERY_ROW: to_row}

    def check(self, run) -> None:
        try:
            check_run(run)
        except RuntimeError as exc:
            recent = "; ".join(self.server.ask("recent"))
            raise RuntimeError(f"{exc}; the model's last requests: {recent}") from None

    def all(self) -> list[Callable[[], dict[str, float]]]:
        return [
            self.bare_run,
            functools.partial(self.bare_run, streaming=True),
            self.loop_only_run,
            self.inline_run,
            self.celery_run,
        ]

    def close(self) -> None:
        self.runner.run(self.bare.client.close())
        self.runner.close()


async def terminal_event(run) -> str:
    from agents.runs import TERMINAL_EVENTS, iter_run_events

    async for event in iter_run_events(run):
        if event.get("type") in TERMINAL_EVENTS:
            return event["type"]
    raise RuntimeError(f"the events of run {run.pk} ended without a terminal event")


def run_stamps(run) -> tuple[float, float]:
    """ms from the Run INSERT to its claim (queue latency), and from the claim to finalize."""
    queued = (run.started_at - run.created_at).total_seconds() * 1000
    return queued, (run.finished_at - run.started_at).total_seconds() * 1000


def check_run(run) -> None:
    state = run.state or {}
    if run.status != "succeeded" or run.output != ANSWER or state.get("rounds") != 3:
        raise RuntimeError(
            f"run {run.pk}: {run.status}, {run.output!r}, {state.get('rounds')} rounds, "
            f"{run.error!r}"
        )


# -- checks: the same conversation on the wire ----------------------------------------------
def request_differences(ours: Any, theirs: Any, where: str = "") -> list[str]:
    """Where two JSON values differ (dict key order ignored)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        found = []
        for key in sorted(set(ours) | set(theirs)):
            here = f"{where}.{key}" if where else key
            if key not in ours:
                found.append(f"{here}: only the bare loop sends it")
            elif key not in theirs:
                found.append(f"{here}: only the platform sends it")
            else:
                found += request_differences(ours[key], theirs[key], here)
        return found
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        pairs = enumerate(zip(ours, theirs, strict=True))
        return [d for i, (a, b) in pairs for d in request_differences(a, b, f"{where}[{i}]")]
    return [] if ours == theirs else [f"{where}: {ours!r} != {theirs!r}"]


def check_requests(sides: Sides) -> list[str]:
    """The last (round 3) request of the bare loop vs that of the inline platform path."""
    sides.bare_run()
    bare = sides.server.ask("last")
    sides.inline_run()
    ours = sides.server.ask("last")
    return request_differences(ours, bare)


def check_events(run_id: int) -> list[str]:
    from agents.models import RunEvent

    events = list(RunEvent.objects.filter(run_id=run_id).order_by("seq"))
    results = [e.payload.get("result") for e in events if e.type == "tool.completed"]
    if results != [{"result": 4}, {"result": 9}]:
        raise RuntimeError(f"unexpected tool results {results}")
    return [e.type for e in events]


# -- timing ----------------------------------------------------------------------------------
def interleaved_rounds(sides: Sides, peers: Peers) -> dict[str, list[float]]:
    """ms per run of each side: BLOCK_RUNS runs of a side in a row, every side once per
    round, the side that goes first rotating."""
    runs = sides.all() + peers.all()
    for run in runs:  # warm-up: clients, connections, caches, the worker's imports
        for _ in range(WARMUP_RUNS):
            run()
    for stamps in sides.stamps.values():
        stamps.clear()
    times: dict[str, list[float]] = {name: [] for name in SIDES}
    rounds = RUNS // BLOCK_RUNS
    for index in range(rounds):
        sides.server.ask("clear")  # keep the server's request log short
        gc.collect()
        shift = index % len(runs)
        for run in runs[shift:] + runs[:shift]:
            for _ in range(BLOCK_RUNS):
                for name, seconds in run().items():
                    times[name].append(seconds * 1000)
        print(f"  round {index + 1}/{rounds} done", file=sys.stderr, flush=True)
    return times


@dataclass
class SideFigure:
    side: str
    ms_per_run: float
    ms_per_round: float
    overhead_ms_per_round: float  # over the bare (non-streaming) loop
    overhead_over_streaming_ms_per_round: float  # over the streaming bare loop
    ratio: float
    runs_ms: list[float]
    target_overhead_ms: float | None
    meets_target: bool | None
    overhead_vs_best_peer: float | None = None  # platform sides: ÷ the best durable peer's
    meets_peer_target: bool | None = None


def figures(times: dict[str, list[float]]) -> list[SideFigure]:
    bare = statistics.median(times[BARE])
    bare_stream = statistics.median(times[BARE_STREAM])
    best_peer = min(
        (statistics.median(times[side]) - bare) / ROUNDS_PER_RUN for side in DURABLE_PEERS
    )
    found = []
    for side in SIDES:
        ms = statistics.median(times[side])
        overhead = (ms - bare) / ROUNDS_PER_RUN
        platform_side = side not in REFERENCE_SIDES
        vs_peer = overhead / best_peer if platform_side and best_peer > 0 else None
        found.append(
            SideFigure(
                side=side,
                ms_per_run=ms,
                ms_per_round=ms / ROUNDS_PER_RUN,
                overhead_ms_per_round=overhead,
                overhead_over_streaming_ms_per_round=(ms - bare_stream) / ROUNDS_PER_RUN,
                ratio=ms / bare,
                runs_ms=times[side],
                target_overhead_ms=TARGET_OVERHEAD_MS if platform_side else None,
                meets_target=overhead < TARGET_OVERHEAD_MS if platform_side else None,
                overhead_vs_best_peer=vs_peer,
                meets_peer_target=None if vs_peer is None else vs_peer <= TARGET_PEER_RATIO,
            )
        )
    return found


# -- what one inline run asks of PostgreSQL and Redis ----------------------------------------
_TABLE = re.compile(r'(?:FROM|INTO|UPDATE)\s+"([^"]+)"', re.IGNORECASE)


def count_queries(sides: Sides, conversation=None) -> dict[str, Any]:
    """Queries of inline runs on this thread's connection (every ORM call of run_inline
    lands there: sync_to_async under async_to_sync comes back to the calling thread); with
    `conversation`, of runs that each continue it (a chat's turns)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agents.runs import run_inline

    totals = []
    for _ in range(QUERY_RUNS):
        sides.server.script_run()
        with CaptureQueriesContext(connection) as captured:
            run = run_inline(
                tenant=sides.fixture.tenant,
                agent=sides.fixture.agent,
                input=INPUT,
                conversation=conversation,
            )
        sides.check(run)
        totals.append(len(captured.captured_queries))
    kinds: Counter[str] = Counter()
    tables: Counter[str] = Counter()
    statements: Counter[str] = Counter()
    for query in captured.captured_queries:
        sql = query["sql"]
        kind = sql.split(None, 1)[0].upper()
        table = (_TABLE.search(sql) or [None, "-"])[1]
        kinds[kind] += 1
        tables[table] += 1
        statements[f"{kind} {table}"] += 1
    event_types = check_events(run.pk)
    return {
        "per_run": totals,
        "by_kind": dict(kinds.most_common()),
        "by_statement": dict(statements.most_common()),
        "events_per_run": len(event_types),
        "event_types": event_types,
    }


def count_redis_commands(sides: Sides) -> dict[str, int]:
    """Redis commands of one inline run (server-wide counters; run before the worker starts,
    so nothing else talks to Redis)."""
    from agents.runs import publisher

    client = publisher()

    def stats() -> dict[str, int]:
        return {k: v["calls"] for k, v in client.info("commandstats").items()}

    before = stats()
    sides.inline_run()
    after = stats()
    diff = {k.removeprefix("cmdstat_"): after[k] - before.get(k, 0) for k in after}
    diff["info"] = diff.get("info", 1) - 1  # the INFO that read `before`
    return {k: v for k, v in sorted(diff.items(), key=lambda kv: -kv[1]) if v}


# -- what the pieces cost in isolation --------------------------------------------------------
@dataclass
class UnitCost:
    what: str
    ms: float  # per operation: mean of a batch, median over COST_REPEATS interleaved batches


def unit_costs(fixture: Fixture) -> list[UnitCost]:
    """The statements a tool round writes, as today and grouped; an SSL context; the
    thread hops; a request's budgets counted. On a scratch Run of the bench tenant."""
    import ssl

    from asgiref.sync import async_to_sync, sync_to_async
    from django.db import transaction
    from django.utils import timezone

    from agents.models import Run, RunEvent
    from agents.runs import bridge
    from agents.runs.writer import Batch, StoredEvent, write_batch
    from tenancy.policy import Principal
    from tenancy.request_budgets import budget_refusal
    from tenancy.services import api_key_create
    from tools.runtime.egress import EgressPolicy, GuardedBackend, GuardedTransport

    state = Run.objects.filter(status="succeeded").values_list("state", flat=True).first()
    run = Run.objects.create(
        tenant=fixture.tenant, agent=fixture.agent, input=INPUT, correlation_id="bench-costs",
        lease_owner="bench",
    )  # fmt: skip
    seq = iter(range(1, 1_000_000))
    payload = {"call_id": "c1", "name": "calculator", "result": {"result": 4}, "error": None}

    def checkpoint() -> None:
        Run.objects.filter(pk=run.pk).update(
            state=state, input_tokens=20, output_tokens=10, last_seq=1,
            lease_expires_at=timezone.now(),
        )  # fmt: skip

    def event() -> None:
        RunEvent.objects.create(
            tenant_id=run.tenant_id, run_id=run.pk, seq=next(seq), type="tool.completed",
            payload=payload,
        )  # fmt: skip

    def event_atomic() -> None:
        with transaction.atomic():
            event()

    def round_separately() -> None:  # a tool round before RunWriter: 8 statements
        for _ in range(4):
            checkpoint()
            event()

    def batch(*types: str, fields: bool = False) -> Batch:
        stored = [StoredEvent(next(seq), t, payload) for t in types]
        return Batch(
            events=[(e, json.dumps(e.payload)) for e in stored],
            fields={"state": state, "input_tokens": 20, "output_tokens": 10} if fields else {},
        )

    def round_writer() -> None:  # the same rows as RunWriter writes them: 3 statements
        write_batch(run, "bench", batch("inference.completed", "tool.started", fields=True))
        write_batch(run, "bench", batch(fields=True))
        write_batch(run, "bench", batch("tool.completed", "inference.started"))

    policy = EgressPolicy(allowlist=("127.0.0.1/32",))
    context = ssl.create_default_context()

    def guarded_client(ssl_context: ssl.SSLContext | None = None) -> None:
        """What guarded_async_client builds (a new SSL context unless one is given)."""
        ssl_context = ssl_context or ssl.create_default_context()
        transport = GuardedTransport(backend=GuardedBackend(policy), ssl_context=ssl_context)
        httpx2.AsyncClient(transport=transport, trust_env=False, follow_redirects=False)

    def nothing() -> None:
        return None

    async def hops() -> None:
        for _ in range(20):
            await sync_to_async(nothing)()

    async def empty() -> None:
        return None

    key, _ = api_key_create(tenant=fixture.tenant, name="bench-budgets", scopes=["run"])
    caller = Principal.of_key(key)

    def budgets_counted() -> None:  # (the key's and the tenant's, as REST, /v1 and MCP count)
        budget_refusal(caller)

    cases: list[tuple[str, Callable[[], Any], int, int]] = [  # what, call, calls, ops per call
        ("checkpoint UPDATE agents_run (autocommit)", checkpoint, 40, 1),
        ("RunEvent INSERT (autocommit)", event, 40, 1),
        ("RunEvent INSERT in atomic()", event_atomic, 40, 1),
        ("a tool round's rows as 8 statements (before RunWriter)", round_separately, 10, 1),
        ("the same rows as RunWriter writes them: 3 statements", round_writer, 10, 1),
        ("ssl.create_default_context()", ssl.create_default_context, 5, 1),
        ("guarded httpx2 client, new SSL context", guarded_client, 5, 1),
        ("guarded httpx2 client, shared SSL context", lambda: guarded_client(context), 40, 1),
        ("sync_to_async hop under async_to_sync", lambda: async_to_sync(hops)(), 5, 20),
        ("async_to_sync(empty coroutine): thread+loop", lambda: async_to_sync(empty)(), 20, 1),
        ("bridge.call(empty coroutine): the kept loop", lambda: bridge.call(empty), 20, 1),
        ("a request's budgets counted: one Redis round trip", budgets_counted, 40, 1),
    ]
    found: dict[str, list[float]] = defaultdict(list)
    for _what, call, *_ in cases:
        call()  # warm-up
    for _ in range(COST_REPEATS):
        gc.collect()
        for what, call, calls, ops in cases:
            started = time.perf_counter()
            for _ in range(calls):
                call()
            found[what].append((time.perf_counter() - started) / (calls * ops) * 1000)
    run.delete()
    return [UnitCost(what, statistics.median(found[what])) for what, *_ in cases]


# -- where the inline path's time goes ------------------------------------------------------
class Probe:
    """Wall time of named platform functions, wrapped in place for the instrumented runs
    only (the timed rounds run unwrapped)."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = defaultdict(list)
        self._patches: list[tuple[Any, str, Any]] = []

    def _patch(self, owner: Any, attr: str, replacement: Any) -> None:
        self._patches.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, replacement)

    def sync(self, owner: Any, attr: str, name: str) -> None:
        original, times = getattr(owner, attr), self.times[name]

        @functools.wraps(original)
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                times.append(time.perf_counter() - started)

        self._patch(owner, attr, timed)

    def coroutine(self, owner: Any, attr: str, name: str) -> None:
        original, times = getattr(owner, attr), self.times[name]

        @functools.wraps(original)
        async def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                times.append(time.perf_counter() - started)

        self._patch(owner, attr, timed)

    def take(self) -> dict[str, tuple[int, float]]:
        """(calls, seconds) per name since the last take."""
        taken = {name: (len(times), sum(times)) for name, times in self.times.items()}
        for times in self.times.values():
            times.clear()
        return taken

    def restore(self) -> None:
        for owner, attr, original in reversed(self._patches):
            setattr(owner, attr, original)
        self._patches.clear()


# (row label, probe name; "~name" for a row measured by difference, indent)
BREAKDOWN_ROWS = [
    ("run_inline total", "total", 0),
    ("run_start: INSERT Run, already claimed", "run_start", 1),
    ("execute_run", "execute_run", 1),
    ("bridge: onto the process's loop and back", "~bridge", 2),
    ("execute_run_async", "execute_run_async", 2),
    ("_prepare_agent (sync part)", "prepare", 3),
    ("default_connection: SELECT", "default_connection", 4),
    ("agent_spec", "agent_spec", 4),
    ("adapter_for", "adapter_for", 4),
    ("tenant_tools (cache GET)", "tenant_tools", 4),
    ("effective_tools (the tool sources)", "effective_tools", 4),
    ("run_tool_context", "run_tool_context", 4),
    ("instructions_digest", "instructions_digest", 4),
    ("tools_digest", "tools_digest", 4),
    ("run_config_versions (2 SELECTs when changed)", "run_config_versions", 4),
    ("conversation: history, attachments, frame", "~conversation", 4),
    ("tool_routing", "tool_routing", 4),
    ("_context_blocks (agent_registry)", "_context_blocks", 4),
    ("rest (quota meter, secrets; approvals when resuming)", "~prepare rest", 4),
    ("model calls (quota hold, stream, parse, SDK)", "model_call", 3),
    ("of which: quota reserve", "quota reserve", 4),
    ("of which: quota settle", "quota settle", 4),
    ("tool calls (registry.execute)", "tool_execute", 3),
    ("checkpoints (waiting only where durable)", "checkpoint", 3),
    ("cancel + steering checks (one MGET a round)", "cancel check", 3),
    ("finalize: one statement, PUBLISH, DELETE cancel key", "finalize", 3),
    ("rest: thread hops, loop, prompt, requests", "~execute rest", 3),
    ("writes in the DB thread (overlap the calls above)", "write", 2),
    ("of which: events + Run fields, one statement", "write_batch", 3),
    ("of which: PUBLISH, pipelined", "publish", 3),
    ("rest (no refresh: finalize returns the row)", "~run_inline rest", 1),
]


@dataclass
class BreakdownRow:
    label: str
    indent: int
    calls_per_run: float
    ms_per_run: float  # median over the instrumented runs
    ms_per_call: float | None
    # The same, for runs that each continue a conversation (a chat's turn): its history,
    # attachments and frame read, its message and its answer written.
    chat_calls_per_run: float = 0
    chat_ms_per_run: float = 0.0


# The parts of _prepare_agent timed one by one: the names it calls in agents.runs.engine.
PREPARE_PARTS = (
    "default_connection", "agent_spec", "adapter_for", "tenant_tools", "effective_tools",
    "run_tool_context", "instructions_digest", "tools_digest", "run_config_versions",
    "run_history", "run_attachments", "conversation_frame", "tool_routing", "_context_blocks",
)  # fmt: skip
HISTORY_TURNS = sized(4, smoke=1)  # the earlier turns the chat breakdown's runs continue


def instrumented_breakdown(sides: Sides) -> list[BreakdownRow]:
    """The inline path's parts, for a run alone and for a chat's turn (a run continuing a
    conversation of HISTORY_TURNS turns): INSTRUMENTED_RUNS of each."""
    # The probes replace each name where its caller looks it up: the inner modules of
    # agents.runs, not its facade.
    import agents.quotas
    import agents.runs.engine
    import agents.runs.inline
    import agents.runs.writer
    from agents.runtime.loop import _Loop
    from base.redis_wire import Batched
    from tools.runtime.registry import ToolRegistry

    probe = Probe()
    ex = agents.runs.engine
    probe.sync(agents.runs.inline, "run_start", "run_start")
    probe.sync(agents.runs.inline, "execute_run", "execute_run")
    probe.coroutine(ex, "execute_run_async", "execute_run_async")
    probe.sync(ex, "_prepare_agent", "prepare")
    for name in PREPARE_PARTS:
        probe.sync(ex, name, name)
    probe.coroutine(agents.quotas, "reserve_request", "quota reserve")
    probe.coroutine(agents.quotas, "settle_usage", "quota settle")
    probe.coroutine(ex._Checkpoint, "save", "checkpoint")
    probe.sync(agents.runs.writer.RunWriter, "_write", "write")
    probe.sync(agents.runs.writer, "write_batch", "write_batch")
    probe.sync(agents.runs.writer, "publish", "publish")
    # (only the cancel checks inline; a round's steering flag rides in the same MGET, and its
    # messages are read only when some wait: never here)
    probe.coroutine(Batched, "ask", "cancel check")
    probe.coroutine(_Loop, "_call_model", "model_call")
    probe.coroutine(ToolRegistry, "execute", "tool_execute")
    probe.sync(ex, "finalize", "finalize")

    def measured(conversation) -> dict[str, tuple[int, float]]:
        from agents.runs import run_inline

        gc.collect()
        sides.server.script_run()
        started = time.perf_counter()
        run = run_inline(
            tenant=sides.fixture.tenant,
            agent=sides.fixture.agent,
            input=INPUT,
            conversation=conversation,
        )
        total = time.perf_counter() - started
        sides.check(run)
        taken = probe.take()
        taken["total"] = (1, total)
        return derive(taken)

    try:
        sides.inline_run()  # warm, and the patches in place
        chat = sides.chat_with_history(HISTORY_TURNS)
        probe.take()
        alone = [measured(None) for _ in range(INSTRUMENTED_RUNS)]
        in_chat = [measured(chat) for _ in range(INSTRUMENTED_RUNS)]
    finally:
        probe.restore()
    # A timed function the inline path no longer calls would show as a row of zeros: the
    # breakdown no longer follows the code, which is a failure, not a figure.
    per_run = alone + in_chat
    uncalled = sorted(n for n in probe.times if not any(r.get(n, (0, 0.0))[0] for r in per_run))
    if uncalled:
        raise RuntimeError(f"the inline path never called {', '.join(uncalled)}: update the probes")

    def median(runs, name: str, index: int) -> float:
        return statistics.median(r.get(name, (0, 0.0))[index] for r in runs)

    rows = []
    for label, name, indent in BREAKDOWN_ROWS:
        calls, ms = median(alone, name, 0), median(alone, name, 1) * 1000
        per_call = ms / calls if calls and not name.startswith("~") else None
        chat_calls, chat_ms = median(in_chat, name, 0), median(in_chat, name, 1) * 1000
        rows.append(BreakdownRow(label, indent, calls, ms, per_call, chat_calls, chat_ms))
    return rows


def derive(t: dict[str, tuple[int, float]]) -> dict[str, tuple[int, float]]:
    """The rows measured by difference (named "~...")."""

    def s(*names: str) -> float:
        return sum(t.get(n, (0, 0.0))[1] for n in names)

    t["~conversation"] = (1, s("run_history", "run_attachments", "conversation_frame"))
    t["~prepare rest"] = (1, s("prepare") - s(*PREPARE_PARTS))
    t["~execute rest"] = (1, s("execute_run_async") - s(
        "prepare", "model_call", "tool_execute", "checkpoint", "cancel check",
        "finalize",
    ))  # fmt: skip
    t["~bridge"] = (1, s("execute_run") - s("execute_run_async"))
    t["~run_inline rest"] = (1, s("total") - s("run_start", "execute_run"))
    return t


# -- output ----------------------------------------------------------------------------------
def verdict(meets: bool | None) -> str:
    return "" if meets is None else ("ok" if meets else "MISSED")


def print_tables(
    sides: list[SideFigure],
    stamps: dict[str, list[tuple[float, float]]],
    queries: dict[str, Any],
    chat_queries: dict[str, Any],
    redis_commands: dict[str, int],
    costs: list[UnitCost],
    breakdown: list[BreakdownRow],
    differences: list[str],
) -> None:
    print(f"fake provider server: {SERVER_MODE}")
    print(
        f"one run = {ROUNDS_PER_RUN} model rounds (tool call, tool call, text); median of "
        f"{RUNS} runs per side in interleaved blocks of {BLOCK_RUNS}, after {WARMUP_RUNS} "
        "warm-up runs per side"
    )
    print()
    print(
        f"{'side':<40}{'ms/run':>8}{'min-max':>13}{'ms/round':>10}{'overhead':>10}"
        f"{'vs stream':>11}{'ratio':>8}  {f'<{TARGET_OVERHEAD_MS:g} ms':<7}"
        f"{'÷ best peer':>12}  <={TARGET_PEER_RATIO:g}"
    )
    for f in sides:
        spread = f"{min(f.runs_ms):.0f}-{max(f.runs_ms):.0f}"
        vs_peer = "" if f.overhead_vs_best_peer is None else f"{f.overhead_vs_best_peer:.2f}"
        print(
            f"{f.side:<40}{f.ms_per_run:>8.2f}{spread:>13}{f.ms_per_round:>10.2f}"
            f"{f.overhead_ms_per_round:>+10.2f}{f.overhead_over_streaming_ms_per_round:>+11.2f}"
            f"{f.ratio:>7.2f}x  {verdict(f.meets_target):<7}{vs_peer:>12}  "
            f"{verdict(f.meets_peer_target)}"
        )
    best = min((f for f in sides if f.side in DURABLE_PEERS), key=lambda f: f.overhead_ms_per_round)
    print(
        "  overhead: (side - bare loop) / 3, ms per round; vs stream: the same over the "
        "streaming bare loop"
    )
    print(
        f"  ÷ best peer: the platform's overhead ÷ the best durable peer's ({best.side}, "
        f"{best.overhead_ms_per_round:+.2f} ms/round); {BARE_PEER}: the bare loop where the "
        "peers run"
    )
    # The platform's model client is not the SDK the bare loop and the peers use (its
    # streams skip the SDK's objects): what the record itself costs is over its own loop.
    by_side = {f.side: f for f in sides}
    for side in (INLINE, CELERY_ROW):
        record = (by_side[side].ms_per_run - by_side[LOOP_ONLY].ms_per_run) / ROUNDS_PER_RUN
        print(f"  {side}: {record:+.2f} ms/round over the platform's own loop without a record")
    for side, label in ((INLINE, "inline"), (CELERY_ROW, "Celery")):
        queued = statistics.median(q for q, _ in stamps[side])
        executing = statistics.median(e for _, e in stamps[side])
        print(
            f"  {label} runs, median: Run INSERT -> claimed {queued:.1f} ms, "
            f"claimed -> finalize {executing:.1f} ms"
        )
    print()
    for what, counted in (("inline run", queries), ("chat turn (inline)", chat_queries)):
        per_run = counted["per_run"]
        print(
            f"DB queries per {what}: {per_run[-1]} (runs: {per_run}); "
            f"{counted['events_per_run']} RunEvent rows"
        )
        print("  " + ", ".join(f"{k} {v}" for k, v in counted["by_kind"].items()))
        for statement, count in counted["by_statement"].items():
            print(f"  {count:>4}  {statement}")
    commands = ", ".join(f"{k} {v}" for k, v in redis_commands.items())
    print(f"Redis commands per inline run: {commands}")
    print()
    print(
        f"Inline path breakdown (median of {INSTRUMENTED_RUNS} instrumented runs each): a run "
        f"alone, and a chat's turn (the run continues a conversation of {HISTORY_TURNS} turns)"
    )
    print(f"{'part':<60}{'calls':>7}{'ms/run':>9}{'ms/call':>9}{'chat: calls':>13}{'ms/run':>9}")
    for row in breakdown:
        label = "  " * row.indent + row.label
        per_call = f"{row.ms_per_call:>9.3f}" if row.ms_per_call is not None else " " * 9
        print(
            f"{label:<60}{row.calls_per_run:>7g}{row.ms_per_run:>9.2f}{per_call}"
            f"{row.chat_calls_per_run:>13g}{row.chat_ms_per_run:>9.2f}"
        )
    print()
    print(f"Unit costs in isolation (ms per operation, median of {COST_REPEATS} batches)")
    for cost in costs:
        print(f"  {cost.what:<56}{cost.ms:>9.3f}")
    print()
    print("Round-3 request, platform vs bare loop (JSON body, key order ignored):")
    for difference in differences or ["same body"]:
        print(f"  {difference}")


def main() -> None:
    load_at_start = os.getloadavg()
    configure_django("bench-agents-")
    import celery
    import django
    from django.conf import settings

    from tenancy import rls

    worker_env = child_env()  # the owner's URL, as serve gives it: the worker logs in itself
    # This process measures what a web process does (the inline side): the app role and the
    # bench tenant's scope, as a request has, unless DB_ROW_LEVEL_SECURITY=false.
    rls.assume_app_role()
    server = RemoteServer()
    worker: Child | None = None
    sides: Sides | None = None
    peers: Peers | None = None
    try:
        with rls.owner():  # the fixture: the app login acting for every tenant
            fixture = create_fixture(server)
        rls.set_request_tenants([fixture.tenant.pk])
        sides = Sides(fixture, server, BareLoop(server.openai_base_url, fixture))
        differences = [
            d for d in check_requests(sides) if d.split(":")[0] not in ("stream", "stream_options")
        ]
        queries = count_queries(sides)
        chat_queries = count_queries(sides, sides.chat_with_history(HISTORY_TURNS))
        redis_commands = count_redis_commands(sides)  # before the worker talks to Redis
        worker_log = Path(settings.DATA_DIR) / "worker.log"
        worker = Child("worker", WORKER_COMMAND, worker_log, env=worker_env)
        worker_ready_s = wait_worker(worker)
        peers = Peers(
            script_run=server.script_run, database_url=worker_env["DATABASE_URL"],
            log_dir=Path(settings.DATA_DIR), base_url=server.openai_base_url, model=MODEL,
            system=fixture.system, tools=fixture.tools, input=INPUT, answer=ANSWER,
            rounds=ROUNDS_PER_RUN, max_tokens=MAX_TOKENS,
        )  # fmt: skip
        times = interleaved_rounds(sides, peers)
        stamps = {side: list(values) for side, values in sides.stamps.items()}
        breakdown = instrumented_breakdown(sides)
        costs = unit_costs(fixture)
        stats = server.ask("stats")
        if stats["errors"] or stats["pending"]:
            raise RuntimeError(f"the provider server had trouble: {stats}")
    except BaseException:
        if worker is not None:  # its account of what went wrong (its log goes with DATA_DIR)
            print(f"the worker's log, last lines:\n{worker.tail()}", file=sys.stderr)
        raise
    finally:
        if sides is not None:
            sides.close()
        if peers is not None:
            peers.close()
        if worker is not None:
            worker.stop()
        server.close()
    side_figures = figures(times)
    print_tables(
        side_figures, stamps, queries, chat_queries, redis_commands, costs, breakdown, differences
    )
    document = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_start_end": [load_at_start, os.getloadavg()],
            "django": django.__version__,
            "celery": celery.__version__,
            "openai": openai.__version__,
        },
        "setup": {
            "server": SERVER_MODE,
            "runs": RUNS,
            "warmup_runs_per_side": WARMUP_RUNS,
            "rounds_per_run": ROUNDS_PER_RUN,
            "script": "calculator 2+2, calculator 3*3, text 'done' (OpenAI wire format)",
            "bare_loop": "one AsyncOpenAI(httpx2.AsyncClient(), max_retries=0) and one event "
            "loop for all runs; tool definitions prebuilt; evaluate() called directly",
            "platform_streams": "yes: RunEventSink wants text deltas, so the adapter streams",
            "celery_worker": " ".join(["python", *WORKER_COMMAND]),
            "celery_worker_ready_s": worker_ready_s,
            "celery_wait": "iter_run_events to the terminal event, then the Run row polled "
            f"every {POLL_S * 1000:g} ms",
            "server_stats": stats,
            "peers": peers.describe(),
        },
        "target_overhead_ms_per_round": TARGET_OVERHEAD_MS,
        "sides": [asdict(f) for f in side_figures],
        "run_timestamps_ms": {
            side: {
                "insert_to_claim": statistics.median(q for q, _ in values),
                "claim_to_finalize": statistics.median(e for _, e in values),
            }
            for side, values in stamps.items()
        },
        "queries_per_inline_run": queries,
        "queries_per_chat_turn": chat_queries,
        "redis_commands_per_inline_run": redis_commands,
        "inline_breakdown_ms": [asdict(row) for row in breakdown],
        "unit_costs_ms": [asdict(cost) for cost in costs],
        "request_differences_round_3": differences,
    }
    by_side = {f.side: f for f in side_figures}
    total = next(row for row in breakdown if row.label == "run_inline total")
    headline = {
        "bare loop ms/run": by_side[BARE].ms_per_run,
        "inline ms/run": by_side[INLINE].ms_per_run,
        "inline overhead ms/round": by_side[INLINE].overhead_ms_per_round,
        "Celery (row) overhead ms/round": by_side[CELERY_ROW].overhead_ms_per_round,
        "best peer overhead ms/round": min(by_side[p].overhead_ms_per_round for p in DURABLE_PEERS),
        "inline overhead / best peer's": by_side[INLINE].overhead_vs_best_peer,
        "Celery (row) overhead / best peer's": by_side[CELERY_ROW].overhead_vs_best_peer,
        "instrumented inline ms/run": total.ms_per_run,
        "instrumented chat turn ms/run": total.chat_ms_per_run,
        "DB queries per inline run": queries["per_run"][-1],
        "DB queries per chat turn": chat_queries["per_run"][-1],
    }
    write_results("agents", document, headline=headline)


if __name__ == "__main__":
    main()
