"""What a gateway model (`/v1/chat/completions` with `<connection>/<model>`, no agent) adds
over calling the provider directly, side by side against the local fake provider, in one
run (the gateway part of bench/api.py's comparison; issue #17's targets: p50 added ≤ 3 ms
non-streaming and to the first token, ≥ 350 requests/s per web process with 50 clients).

Run: cd /work/main && .venv/bin/python bench/gateway.py   (about a minute; no network)
Prints a table and writes bench/results/gateway.json (BENCH_SMOKE=1: a few samples, 5
clients for a second). The platform runs as `make run` runs
it (the processes of `manage.py serve`; one uvicorn process), the fake provider in its own
process (bench/api.py's RemoteServer, every reply the same TextReply).

1. Latency, non-streaming: the `openai` SDK's `chat.completions.create`, through the gateway
   vs directly, interleaved, SAMPLES each after WARMUP; p50 and p99, and the added p50.
2. Time to first token, streaming: the same, to the first chunk with text.
3. Throughput: CLIENTS concurrent loops of raw httpx2 POSTs (the SDK's own CPU would take
   the cores the server needs) for DURATION_S, non-streaming, through the gateway, then
   directly: requests/s, errors, p50/p99; and the web process's CPU time per request
   (from /proc: on a machine busy with other work, the figure that moves least).
4. Translated: the `anthropic` SDK's `messages.create` to the same OpenAI model through
   `/v1/messages` (Messages -> Chat Completions and back), SAMPLES after WARMUP, p50, beside
   the direct p50 of (1).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0] or ".").resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

import anthropic  # noqa: E402
import httpx2  # noqa: E402
import openai  # noqa: E402

from bench.api import MODEL, RemoteServer, create_fixture, ms, pct, stream_chat  # noqa: E402
from bench.common import (  # noqa: E402
    Child,
    configure_django,
    free_port,
    sized,
    wait_web,
    wait_worker,
    write_results,
)

GATEWAY_MODEL = f"fake-openai/{MODEL}"  # bench.api's connection "Fake OpenAI"
SAMPLES = int(os.environ.get("BENCH_SAMPLES") or sized(200, smoke=5))
WARMUP = sized(20, smoke=2)
CLIENTS = sized(50, smoke=5)
DURATION_S = sized(8.0, smoke=1.0)
HELLO = [{"role": "user", "content": "Say hello."}]


def client(base_url: str, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key=key,
        base_url=base_url,
        max_retries=0,
        timeout=30,
        http_client=httpx2.AsyncClient(limits=httpx2.Limits(max_connections=CLIENTS * 2)),
    )


async def timed_create(sdk: openai.AsyncOpenAI, model: str) -> float:
    started = time.perf_counter()
    await sdk.chat.completions.create(model=model, messages=HELLO)
    return time.perf_counter() - started


async def latency_rounds(gateway: openai.AsyncOpenAI, direct: openai.AsyncOpenAI) -> dict:
    found: dict[str, dict[str, list[float]]] = {
        "gateway": {"complete": [], "ttft": []},
        "direct": {"complete": [], "ttft": []},
    }
    sides = (("gateway", gateway, GATEWAY_MODEL), ("direct", direct, MODEL))
    for index in range(WARMUP + SAMPLES):
        for side, sdk, model in sides if index % 2 else sides[::-1]:
            complete = await timed_create(sdk, model)
            chat = await stream_chat(sdk, model)
            if index >= WARMUP:
                found[side]["complete"].append(ms(complete))
                if chat.error is None and chat.ttft_s is not None:
                    found[side]["ttft"].append(ms(chat.ttft_s))
    return found


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid`, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def translated_p50(base_url: str, key: str) -> float:
    """(4): through /v1/messages to the OpenAI connection's model."""
    claude = anthropic.AsyncAnthropic(api_key=key, base_url=base_url, max_retries=0, timeout=30)
    found = []
    try:
        for index in range(WARMUP + SAMPLES):
            started = time.perf_counter()
            await claude.messages.create(model=GATEWAY_MODEL, max_tokens=50, messages=HELLO)
            if index >= WARMUP:
                found.append(ms(time.perf_counter() - started))
    finally:
        await claude.close()
    return statistics.median(found)


async def throughput(url: str, key: str, model: str, pid: int | None = None) -> dict:
    body = json.dumps({"model": model, "messages": HELLO}).encode()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    latencies: list[float] = []
    errors: list[int] = []
    deadline = time.perf_counter() + DURATION_S
    limits = httpx2.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    async with httpx2.AsyncClient(limits=limits, timeout=30) as http:

        async def loop() -> None:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                response = await http.post(f"{url}/chat/completions", content=body, headers=headers)
                latencies.append(ms(time.perf_counter() - started))
                if response.status_code != 200:
                    errors.append(response.status_code)

        started, cpu = time.perf_counter(), cpu_s(pid) if pid else 0.0
        await asyncio.gather(*(loop() for _ in range(CLIENTS)))
        wall = time.perf_counter() - started
        cpu = cpu_s(pid) - cpu if pid else None
    return {
        "server_cpu_ms_per_request": cpu * 1000 / len(latencies) if cpu else None,
        "requests": len(latencies),
        "requests_per_s": len(latencies) / wall,
        "errors": len(errors),
        "error_statuses": sorted(set(errors)),
        "p50_ms": pct(latencies, 50) if latencies else None,
        "p99_ms": pct(latencies, 99) if latencies else None,
    }


def main() -> None:
    os.environ["API_RATE_PER_KEY"] = "1000000/min"  # measure the gateway, not its throttle
    os.environ["API_RATE_PER_TENANT"] = "1000000/min"
    configure_django("bench-gateway-")
    from django.conf import settings

    from agentplatform.management.commands.serve import platform_commands

    data_dir = Path(settings.DATA_DIR)
    server = RemoteServer()
    children: list[Child] = []
    try:
        secret = create_fixture(server)
        port = free_port()
        for name, command in platform_commands("127.0.0.1", port).items():
            children.append(Child(name, command[1:], data_dir / f"{name.replace(' ', '-')}.log"))
        wait_web(children[0], port)
        wait_worker(children[1])
        url = f"http://127.0.0.1:{port}/v1"

        async def measure() -> tuple[dict, dict, dict]:
            gateway, direct = client(url, secret), client(server.openai_base_url, "fake")
            try:
                rounds = await latency_rounds(gateway, direct)
            finally:
                await gateway.close()
                await direct.close()
            through = await throughput(url, secret, GATEWAY_MODEL, children[0].process.pid)
            alone = await throughput(server.openai_base_url, "fake", MODEL)
            translated = await translated_p50(url.removesuffix("/v1"), secret)
            return rounds, through, alone, translated

        rounds, through, alone, translated = asyncio.run(measure())
        from agents.models import Run

        recorded = Run.objects.filter(gateway_model=GATEWAY_MODEL).count()
    finally:
        for child in reversed(children):
            child.stop()
        server.close()

    def p50(side: str, what: str) -> float:
        return statistics.median(rounds[side][what])

    result = {
        "cpus": os.cpu_count(),
        "samples": SAMPLES,
        "complete_p50_ms": {
            "gateway": p50("gateway", "complete"),
            "direct": p50("direct", "complete"),
        },
        "complete_p99_ms": {
            side: pct(rounds[side]["complete"], 99) for side in ("gateway", "direct")
        },
        "ttft_p50_ms": {"gateway": p50("gateway", "ttft"), "direct": p50("direct", "ttft")},
        "added_complete_p50_ms": p50("gateway", "complete") - p50("direct", "complete"),
        "added_ttft_p50_ms": p50("gateway", "ttft") - p50("direct", "ttft"),
        "throughput": {"gateway": through, "direct": alone, "clients": CLIENTS},
        "translated_messages_p50_ms": translated,
        "recorded_runs": recorded,
    }
    print(f"gateway model {GATEWAY_MODEL!r} vs the fake provider directly; {os.cpu_count()} CPUs")
    complete = result["complete_p50_ms"]
    print(f"1. non-streaming, p50 of {SAMPLES}: gateway {complete['gateway']:.2f} ms, "
          f"direct {complete['direct']:.2f} ms, added "
          f"{result['added_complete_p50_ms']:.2f} ms (target ≤ 3)")  # fmt: skip
    print(f"2. first token, p50: gateway {result['ttft_p50_ms']['gateway']:.2f} ms, direct "
          f"{result['ttft_p50_ms']['direct']:.2f} ms, added {result['added_ttft_p50_ms']:.2f} ms "
          "(target ≤ 3)")  # fmt: skip
    for side, found in (("gateway", through), ("direct", alone)):
        print(f"3. {CLIENTS} clients, {DURATION_S:g} s, {side}: {found['requests_per_s']:.0f} "
              f"requests/s, {found['errors']} errors {found['error_statuses']}, p50 "
              f"{found['p50_ms']:.1f} ms, p99 {found['p99_ms']:.1f} ms")  # fmt: skip
    print(f"   web process CPU per gateway request: {through['server_cpu_ms_per_request']:.2f} ms")
    print(f"   (target ≥ 350 requests/s through one web process); runs recorded: {recorded}")
    print(f"4. translated (/v1/messages to the OpenAI model), p50: {translated:.2f} ms, added "
          f"{translated - complete['direct']:.2f} ms over the direct call")  # fmt: skip
    headline = {
        "added complete p50 ms": result["added_complete_p50_ms"],
        "added TTFT p50 ms": result["added_ttft_p50_ms"],
        "gateway requests/s": through["requests_per_s"],
        "translated p50 ms": translated,
    }
    write_results("gateway", result, headline=headline)


if __name__ == "__main__":
    main()
