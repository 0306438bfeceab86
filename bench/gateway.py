"""What a gateway model (`/v1/chat/completions` with `<connection>/<model>`, no agent) adds
over calling the provider directly, side by side against the local fake provider, in one
run (the gateway part of bench/api.py's comparison; issue #17's targets: p50 added ≤ 3 ms
non-streaming and to the first token, ≥ 350 requests/s per web process with 50 clients),
beside LiteLLM's proxy measured the same way in the same run (issue #35: the gateway stays
ahead of it).

Run: cd /work/main && .venv/bin/python bench/gateway.py   (about a minute; no network)
Prints a table and writes bench/results/gateway.json (BENCH_SMOKE=1: a few samples, 5
clients for a second). The platform runs as `make run` runs
it (the processes of `manage.py serve`; one uvicorn process), the fake provider in its own
process (bench/api.py's RemoteServer, every reply the same TextReply). LiteLLM's proxy
(.venv-litellm: `make py-litellm`) runs as one process (`litellm --num_workers 1`) with a
master key and no database, its one model `openai/<MODEL>` at the fake provider; nothing it
does leaves loopback (the bundled price list, telemetry off). Its start, about 9 s of
which most is import, is most of a smoke run's cost.

1. Latency, non-streaming: the `openai` SDK's `chat.completions.create`, through the gateway,
   through LiteLLM and directly, interleaved, SAMPLES each after WARMUP; p50 and p99, and
   the added p50.
2. Time to first token, streaming: the same, to the first chunk with text.
3. Throughput: CLIENTS concurrent loops of raw httpx2 POSTs (the SDK's own CPU would take
   the cores the server needs) for DURATION_S, non-streaming, through the gateway, through
   LiteLLM, then directly: requests/s, errors, p50/p99; and the web process's (LiteLLM's
   process's) CPU time per request (from /proc: on a machine busy with other work, the
   figure that moves least).
4. Translated: the `anthropic` SDK's `messages.create` to the same OpenAI model through
   `/v1/messages` (Messages -> Chat Completions and back), of the gateway and LiteLLM
   interleaved, SAMPLES each after WARMUP, p50, beside the direct p50 of (1).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import statistics
import sys
import tempfile
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
    cpu_seconds,
    free_port,
    request_budgets_unlimited,
    sized,
    wait_web,
    wait_worker,
    write_results,
)

GATEWAY_MODEL = f"fake-openai/{MODEL}"  # bench.api's connection "Fake OpenAI"
LITELLM_PYTHON = ROOT / ".venv-litellm" / "bin" / "python"
LITELLM_MODEL = MODEL  # the proxy's name for openai/<MODEL> at the fake provider
SIDES = ("gateway", "litellm", "direct")
SIDE_NAMES = {"gateway": "gateway", "litellm": "LiteLLM proxy", "direct": "direct"}
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


async def latency_rounds(sides: list[tuple[str, openai.AsyncOpenAI, str]]) -> dict:
    """`sides`: (name, client, model); each round asks each side once, in an order that
    turns by one every round (so none always follows another)."""
    found: dict[str, dict[str, list[float]]] = {
        side: {"complete": [], "ttft": []} for side, _, _ in sides
    }
    for index in range(WARMUP + SAMPLES):
        turn = index % len(sides)
        for side, sdk, model in sides[turn:] + sides[:turn]:
            complete = await timed_create(sdk, model)
            chat = await stream_chat(sdk, model)
            if index >= WARMUP:
                found[side]["complete"].append(ms(complete))
                if chat.error is None and chat.ttft_s is not None:
                    found[side]["ttft"].append(ms(chat.ttft_s))
    return found


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of the process group `pid` leads (a Child: the server)."""
    return cpu_seconds({"server": [pid]})["server"]


async def translated_p50(sides: list[tuple[str, str, str, str]]) -> dict[str, float]:
    """(4): through /v1/messages to the OpenAI model; `sides`: (name, base URL, key,
    model), interleaved as in latency_rounds."""
    clients = [
        (side, anthropic.AsyncAnthropic(api_key=key, base_url=url, max_retries=0, timeout=30), m)
        for side, url, key, m in sides
    ]
    found: dict[str, list[float]] = {side: [] for side, _, _, _ in sides}
    try:
        for index in range(WARMUP + SAMPLES):
            turn = index % len(clients)
            for side, claude, model in clients[turn:] + clients[:turn]:
                started = time.perf_counter()
                await claude.messages.create(model=model, max_tokens=50, messages=HELLO)
                if index >= WARMUP:
                    found[side].append(ms(time.perf_counter() - started))
    finally:
        for _, claude, _ in clients:
            await claude.close()
    return {side: statistics.median(times) for side, times in found.items()}


def _figure(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def litellm_version() -> str:
    found = sorted(
        LITELLM_PYTHON.parent.parent.glob("lib/python*/site-packages/litellm-*.dist-info")
    )
    return found[0].name.removeprefix("litellm-").removesuffix(".dist-info") if found else "?"


def start_litellm(api_base: str, folder: Path) -> tuple[Child, str, str, float]:
    """LiteLLM's proxy as one process on a free loopback port, routing LITELLM_MODEL to
    `api_base` (an OpenAI-compatible provider); (the child, its /v1 URL, its master key,
    seconds until it answered). Its environment is its own, not the platform's: it must not
    see DATABASE_URL (it would then want its own database). Costs about 9 s, mostly import."""
    if not LITELLM_PYTHON.exists():
        raise RuntimeError(
            f"{LITELLM_PYTHON.relative_to(ROOT)} is missing: `make py-litellm` makes it"
        )
    key = f"sk-{secrets.token_hex(32)}"  # it refuses to start with no or a weak master key
    config = folder / "litellm.yaml"
    config.write_text(json.dumps({  # JSON is YAML
        "model_list": [{
            "model_name": LITELLM_MODEL,
            "litellm_params": {"model": f"openai/{MODEL}", "api_base": api_base, "api_key": "fake"},
        }],
        "litellm_settings": {"telemetry": False},
        "general_settings": {"master_key": key},
    }))  # fmt: skip
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(folder),
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOG": "ERROR",
        "LITELLM_MODE": "PRODUCTION",  # reads no .env from its working directory
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # the bundled price list: no download at import
        "DISABLE_ADMIN_UI": "True",
        "NO_DOCS": "True",
        "NO_REDOC": "True",
        # /v1/messages to an OpenAI model through Chat Completions, as the gateway translates
        # (by default it goes to the Responses API, which the fake provider does not serve)
        "LITELLM_USE_CHAT_COMPLETIONS_URL_FOR_ANTHROPIC_MESSAGES": "True",
    }
    port = free_port()
    started = time.perf_counter()
    proxy = Child(
        "litellm",
        [str(LITELLM_PYTHON.parent / "litellm"), "--config", str(config), "--host", "127.0.0.1",
         "--port", str(port), "--num_workers", "1"],
        folder / "litellm.log",
        env=env,
        python=LITELLM_PYTHON,
        cwd=folder,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    while True:
        try:
            if httpx2.get(f"{url}/health/liveliness", timeout=2).status_code == 200:
                return proxy, f"{url}/v1", key, time.perf_counter() - started
        except httpx2.HTTPError:
            pass
        if proxy.process.poll() is not None or time.perf_counter() - started > 180:
            proxy.stop()
            raise RuntimeError(f"LiteLLM's proxy did not start:\n{proxy.tail()}")
        time.sleep(0.1)


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
    request_budgets_unlimited()
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
        proxy, proxy_url, proxy_key, proxy_start_s = start_litellm(
            server.openai_base_url, Path(tempfile.mkdtemp(prefix="litellm-", dir=data_dir))
        )
        children.append(proxy)

        async def measure() -> tuple[dict, dict, dict]:
            sdks = [
                ("gateway", client(url, secret), GATEWAY_MODEL),
                ("litellm", client(proxy_url, proxy_key), LITELLM_MODEL),
                ("direct", client(server.openai_base_url, "fake"), MODEL),
            ]
            try:
                rounds = await latency_rounds(sdks)
            finally:
                for _, sdk, _ in sdks:
                    await sdk.close()
            through = {
                "gateway": await throughput(url, secret, GATEWAY_MODEL, children[0].process.pid),
                "litellm": await throughput(proxy_url, proxy_key, LITELLM_MODEL, proxy.process.pid),
                "direct": await throughput(server.openai_base_url, "fake", MODEL),
            }
            translated = await translated_p50([
                ("gateway", url.removesuffix("/v1"), secret, GATEWAY_MODEL),
                ("litellm", proxy_url.removesuffix("/v1"), proxy_key, LITELLM_MODEL),
            ])  # fmt: skip
            return rounds, through, translated

        rounds, through, translated = asyncio.run(measure())
        from agents.models import Run

        recorded = Run.objects.filter(gateway_model=GATEWAY_MODEL).count()
    finally:
        for child in reversed(children):
            child.stop()
        server.close()

    def p50(side: str, what: str) -> float:
        return statistics.median(rounds[side][what])

    def added(side: str, what: str) -> float:
        return p50(side, what) - p50("direct", what)

    result = {
        "cpus": os.cpu_count(),
        "samples": SAMPLES,
        "litellm_version": litellm_version(),
        "litellm_start_s": proxy_start_s,
        "complete_p50_ms": {side: p50(side, "complete") for side in SIDES},
        "complete_p99_ms": {side: pct(rounds[side]["complete"], 99) for side in SIDES},
        "ttft_p50_ms": {side: p50(side, "ttft") for side in SIDES},
        "added_complete_p50_ms": added("gateway", "complete"),
        "added_ttft_p50_ms": added("gateway", "ttft"),
        "litellm_added_complete_p50_ms": added("litellm", "complete"),
        "litellm_added_ttft_p50_ms": added("litellm", "ttft"),
        "throughput": {**through, "clients": CLIENTS},
        "translated_messages_p50_ms": translated["gateway"],
        "litellm_translated_messages_p50_ms": translated["litellm"],
        "recorded_runs": recorded,
    }
    print(
        f"gateway model {GATEWAY_MODEL!r} and LiteLLM {result['litellm_version']}'s proxy (one "
        f"process, openai/{MODEL}) vs the fake provider directly; {os.cpu_count()} CPUs"
    )
    print(f"LiteLLM's proxy answered {proxy_start_s:.1f} s after its start")  # fmt: skip

    def row(label: str, figures: dict[str, str]) -> None:
        print(f"{label:<50}" + "".join(f"{figures.get(side, ''):>15}" for side in SIDES))

    row("", SIDE_NAMES)
    row(f"1. non-streaming p50 of {SAMPLES}, ms", {s: f"{p50(s, 'complete'):.2f}" for s in SIDES})
    row("   p99, ms", {s: f"{result['complete_p99_ms'][s]:.2f}" for s in SIDES})
    row(
        "   added p50, ms (gateway's target ≤ 3)",
        {s: f"{added(s, 'complete'):+.2f}" for s in SIDES[:2]},
    )
    row("2. first token p50, ms", {s: f"{p50(s, 'ttft'):.2f}" for s in SIDES})
    row(
        "   added p50, ms (gateway's target ≤ 3)",
        {s: f"{added(s, 'ttft'):+.2f}" for s in SIDES[:2]},
    )
    row(f"3. {CLIENTS} clients, {DURATION_S:g} s: requests/s (gateway's ≥ 350)",
        {s: f"{through[s]['requests_per_s']:.0f}" for s in SIDES})  # fmt: skip
    row(
        "   errors",
        {s: f"{through[s]['errors']} {through[s]['error_statuses'] or ''}".strip() for s in SIDES},
    )
    row("   p50, ms", {s: _figure(through[s]["p50_ms"], ".1f") for s in SIDES})
    row("   p99, ms", {s: _figure(through[s]["p99_ms"], ".1f") for s in SIDES})
    row("   server process CPU per request, ms",
        {s: _figure(through[s]["server_cpu_ms_per_request"]) for s in SIDES[:2]})  # fmt: skip
    row("4. translated /v1/messages p50, ms", {s: f"{translated[s]:.2f}" for s in SIDES[:2]})
    row("   added over the direct call (1), ms",
        {s: f"{translated[s] - p50('direct', 'complete'):+.2f}" for s in SIDES[:2]})  # fmt: skip
    print(f"gateway runs recorded: {recorded}")
    headline = {
        "added complete p50 ms": result["added_complete_p50_ms"],
        "added TTFT p50 ms": result["added_ttft_p50_ms"],
        "gateway requests/s": through["gateway"]["requests_per_s"],
        "translated p50 ms": translated["gateway"],
        "LiteLLM added complete p50 ms": result["litellm_added_complete_p50_ms"],
        "LiteLLM added TTFT p50 ms": result["litellm_added_ttft_p50_ms"],
        "LiteLLM requests/s": through["litellm"]["requests_per_s"],
        "LiteLLM translated p50 ms": translated["litellm"],
        "LiteLLM start s": proxy_start_s,
    }
    write_results("gateway", result, headline=headline)


if __name__ == "__main__":
    main()
