"""MCP `tools/call` throughput: the platform's `/mcp` (API-key auth, the tenant's registry,
a Run recorded per call) vs a bare SDK `MCPServer` exposing the same trivial tool, side by
side in one run, driven by the SDK's own client.

Run: cd /work/main && .venv/bin/python bench/mcp.py
(prints a table, writes bench/results/mcp.json; BENCH_SMOKE=1: 2 callers, one short round
per side). Takes about a minute. Needs no network and
no configuration: the embedded PostgreSQL and Redis start in a temporary DATA_DIR (removed at
exit); each server is one `uvicorn` process (stateless Streamable HTTP, JSON responses,
DNS-rebinding protection on), started with the environment `manage.py serve` gives its
children.

The tool: `calculator` with {"expression": "6*7"} — on the platform the built-in (validated
arguments, the registry's execute path, a Run and its two events stored per call); on the
bare server an SDK tool calling the same `tools.runtime.calculator.evaluate`.

Load: CALLERS concurrent clients (each `streamable_http_client` + `ClientSession`, initialized
once), each calling in a loop for ROUND_S seconds; ROUNDS rounds per side, interleaved
(bare, platform, bare, platform...). Figures: calls/s (median of the rounds), per-call
latency p50/p99 over all rounds, errors, and the throughput ratio platform / bare (target:
at least 0.7). The platform's server assumes the app role (row-level security on) unless
DB_ROW_LEVEL_SECURITY=false is set, for a comparison.

The other direction, the platform as a client of a remote MCP server behind OAuth: what a
tool call pays for the account's token. The server: tests/fakes/oauth_mcp_server.py (the
SDK's server auth; authorization and resource server in one, on a thread of this process),
its `add` tool. The tenant's account is connected through the platform's own flow
(`connect_begin`, the server's consent, `connect_complete`: dynamic registration, PKCE),
and a second connection to the same server carries that access token as a static
`auth_header`. OAUTH_CALLS calls per side, interleaved call by call, one at a time, in one
event loop:
1. bare SDK client: `streamable_http_client` + `ClientSession`, initialize, `call_tool`,
   with the token in the header: one session per call, as the platform opens one per call
   (no DELETE at its end either: `terminate_on_close=False`), over one `httpx2.AsyncClient`
   kept for all of them;
2. platform, static header: the tenant's registry (`tools.loader.tenant_tools`),
   `registry.execute` of `static__add` (the header a tenant secret, guarded egress);
3. platform, OAuth: the same of `oauth__add`, whose header is looked up per call
   (tools/mcp_oauth/credentials.py: the connection, the token row and its client in one
   query, decrypted, checked for expiry; no refresh: it is fresh).
Figures: p50 ms per call of each side, OAuth - static (the token's cost per call), static
- bare (the registry's and egress guard's), and `access_token` alone (p50 of OAUTH_CALLS).
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
    sys.path.pop(0)  # bench/mcp.py would shadow the `mcp` SDK
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402

from bench.common import sized  # noqa: E402

CALLERS = sized(8, smoke=2)
ROUND_S = sized(5.0, smoke=0.5)
ROUNDS = sized(3, smoke=1)
WARMUP_S = sized(1.0, smoke=0.3)
TARGET_RATIO = 0.7
ARGUMENTS = {"expression": "6*7"}
OAUTH_CALLS = sized(200, smoke=5)
OAUTH_WARMUP = sized(10, smoke=1)


def bare_app():
    """The bare side (`uvicorn bench.mcp:bare_app --factory`): an SDK MCPServer with one tool."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.transport_security import TransportSecuritySettings

    from tools.runtime.calculator import evaluate

    server = MCPServer("bare")

    @server.tool(name="calculator", description="Evaluate an arithmetic expression.")
    def calculator(expression: str) -> dict:
        return {"result": evaluate(expression)}

    return server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(
            allowed_hosts=["127.0.0.1:*"], allowed_origins=["http://127.0.0.1:*"]
        ),
    )


async def caller(url: str, headers: dict, until: float, latencies: list, errors: list) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tried = False  # one call at least, however short the round and busy the machine
        while not tried or time.perf_counter() < until:
            tried = True
            started = time.perf_counter()
            try:
                result = await session.call_tool("calculator", ARGUMENTS)
                if result.is_error:
                    errors.append(str(result.content)[:200])
                    continue
            except Exception as exc:  # counted, not fatal: the figures say how many
                errors.append(f"{type(exc).__name__}: {exc}"[:200])
                continue
            latencies.append(time.perf_counter() - started)


async def load(url: str, headers: dict, seconds: float) -> tuple[float, list[float], list[str]]:
    latencies: list[float] = []
    errors: list[str] = []
    started = time.perf_counter()
    until = started + seconds
    await asyncio.gather(*(caller(url, headers, until, latencies, errors) for _ in range(CALLERS)))
    wall = time.perf_counter() - started
    return len(latencies) / wall, latencies, errors


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


def connect_oauth_account(server) -> tuple:
    """The bench tenant's account at `server`, connected through the platform's flow; its
    connections: (oauth, static header), both refreshed (their tools listed)."""
    from urllib.parse import parse_qs, urlsplit

    from django.contrib.auth import get_user_model

    from tenancy.models import Role
    from tenancy.services import membership_set, tenant_create
    from tools.mcp_connections import mcp_connection_refresh
    from tools.mcp_oauth import connect_begin, connect_complete
    from tools.models import McpOAuthToken, McpServerConnection

    tenant = tenant_create(slug="bench-oauth", name="Bench OAuth")
    admin = get_user_model().objects.create_user(username="bench-oauth-admin")
    membership_set(tenant=tenant, user=admin, role=Role.OWNER)
    oauth = McpServerConnection.objects.create(
        tenant=tenant, name="oauth", url=server.url, auth_mode="oauth_tenant"
    )
    session: dict = {}
    location = connect_begin(
        connection=oauth, user=admin, session=session, for_tenant=True,
        redirect_uri="http://127.0.0.1/mcp-oauth/callback",
        client_metadata_url="http://127.0.0.1/mcp-oauth/client",
    )  # fmt: skip
    back = httpx2.get(location, follow_redirects=False).headers["location"]
    query = {k: v[0] for k, v in parse_qs(urlsplit(back).query).items()}
    connect_complete(session=session, user=admin, state=query["state"], code=query["code"],
                     iss=query.get("iss", ""))  # fmt: skip
    token = McpOAuthToken.objects.get(connection=oauth).access_token
    static = McpServerConnection.objects.create(
        tenant=tenant, name="static", url=server.url, auth_header=f"Bearer {token}"
    )
    return tenant, mcp_connection_refresh(oauth), mcp_connection_refresh(static), token


def oauth_calls() -> dict:
    """The OAuth section: p50 per call of each side, interleaved call by call."""
    from asgiref.sync import sync_to_async
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from tests.fakes.oauth_mcp_server import FakeOAuthMcpServer
    from tools.loader import tenant_tools
    from tools.mcp_oauth import access_token
    from tools.runtime.tool import ToolCall
    from tools.services import tool_context

    arguments = {"a": 2, "b": 3}
    with FakeOAuthMcpServer() as server:
        tenant, oauth, _static, token = connect_oauth_account(server)

        http = None  # one HTTP client for all its calls (a new one costs an SSL context)

        async def bare(n: int) -> None:
            nonlocal http
            if http is None:
                http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
            async with (
                streamable_http_client(server.url, http_client=http, terminate_on_close=False) as (
                    read,
                    write,
                    *_,
                ),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                result = await session.call_tool("add", arguments)
            if result.is_error:
                raise RuntimeError(f"the bare call failed: {result.content}")

        def platform_side(name: str):
            async def call(n: int) -> None:
                toolbox = await sync_to_async(tenant_tools)(tenant.pk)
                ctx = tool_context(tenant=tenant, secrets=toolbox.secrets)
                result = await toolbox.registry.execute(ToolCall(f"c{n}", name, arguments), ctx)
                if result.error is not None:
                    raise RuntimeError(f"{name} failed: {result.error}")

            return call

        async def lookup(n: int) -> None:
            await sync_to_async(access_token)(connection=oauth, user_id=None)

        sides = {
            "bare SDK client": bare,
            "platform, static header": platform_side("static__add"),
            "platform, OAuth": platform_side("oauth__add"),
            "access_token alone": lookup,
        }

        async def rounds() -> dict[str, list[float]]:
            took: dict[str, list[float]] = {side: [] for side in sides}
            order = list(sides.items())
            for n in range(-OAUTH_WARMUP, OAUTH_CALLS):
                for side, call in order if n % 2 == 0 else reversed(order):
                    started = time.perf_counter()
                    await call(n)
                    if n >= 0:
                        took[side].append(time.perf_counter() - started)
            await http.aclose()
            return took

        took = asyncio.run(rounds())
        refreshes = server.refreshes
    p50 = {side: round(pct(values, 0.5), 3) for side, values in took.items()}
    return {
        "calls": OAUTH_CALLS,
        "p50_ms": p50,
        "p99_ms": {side: round(pct(values, 0.99), 3) for side, values in took.items()},
        "oauth_minus_static_ms": round(p50["platform, OAuth"] - p50["platform, static header"], 3),
        "static_minus_bare_ms": round(p50["platform, static header"] - p50["bare SDK client"], 3),
        "refreshes": refreshes,
    }


def main() -> None:
    from bench.common import (
        Child,
        configure_django,
        free_port,
        request_budgets_unlimited,
        results_dir,
        wait_web,
        write_results,
    )

    request_budgets_unlimited()
    configure_django("bench-mcp-")
    from agents.models import Run
    from tenancy.services import api_key_create, tenant_create

    tenant = tenant_create(slug="bench", name="Bench")
    _, key = api_key_create(tenant=tenant, name="bench", scopes=["read", "run"])

    logs = results_dir()
    logs.mkdir(parents=True, exist_ok=True)
    ours_port, bare_port = free_port(), free_port()
    uvicorn = ["-m", "uvicorn", "--host", "127.0.0.1", "--log-level", "warning"]
    ours = Child(
        "platform",
        [*uvicorn, "agentplatform.asgi:application", "--port", str(ours_port), "--lifespan", "on"],
        logs / "mcp-platform.log",
    )
    bare = Child(
        "bare",
        [*uvicorn, "bench.mcp:bare_app", "--factory", "--port", str(bare_port)],
        logs / "mcp-bare.log",
    )
    oauth = oauth_calls()  # before the servers start: the machine is this section's alone
    try:
        wait_web(ours, ours_port)
        wait_web(bare, bare_port)
        sides = {
            "bare SDK MCPServer": (f"http://127.0.0.1:{bare_port}/mcp", {}),
            "platform /mcp": (
                f"http://127.0.0.1:{ours_port}/mcp",
                {"Authorization": f"Bearer {key}"},
            ),
        }
        for url, headers in sides.values():  # warm both (imports, pools, caches)
            asyncio.run(load(url, headers, WARMUP_S))
        runs_before = Run.objects.filter(tenant=tenant).count()
        rates: dict[str, list[float]] = {side: [] for side in sides}
        latencies: dict[str, list[float]] = {side: [] for side in sides}
        errors: dict[str, list[str]] = {side: [] for side in sides}
        for _ in range(ROUNDS):
            for side, (url, headers) in sides.items():
                rate, lat, errs = asyncio.run(load(url, headers, ROUND_S))
                rates[side].append(rate)
                latencies[side] += lat
                errors[side] += errs
        recorded = Run.objects.filter(tenant=tenant).count() - runs_before
    finally:
        ours.stop()
        bare.stop()

    rows = []
    print(f"MCP tools/call, {CALLERS} concurrent SDK clients, {ROUNDS} x {ROUND_S:g} s per side")
    print(f"{'side':24} {'calls/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'calls':>7} {'errors':>7}")
    for side in sides:
        row = {
            "side": side,
            "calls_per_s": statistics.median(rates[side]),
            "rounds_calls_per_s": rates[side],
            "p50_ms": pct(latencies[side], 0.5),
            "p99_ms": pct(latencies[side], 0.99),
            "calls": len(latencies[side]),
            "errors": len(errors[side]),
            "first_errors": errors[side][:3],
        }
        rows.append(row)
        print(
            f"{side:24} {row['calls_per_s']:9.1f} {row['p50_ms']:8.1f} {row['p99_ms']:8.1f} "
            f"{row['calls']:7d} {row['errors']:7d}"
        )
    ratio = rows[1]["calls_per_s"] / rows[0]["calls_per_s"] if rows[0]["calls_per_s"] else 0.0
    if any(row["errors"] for row in rows):  # calls that failed measure the failures
        raise RuntimeError(f"calls failed: {[row['first_errors'] for row in rows]}")
    verdict = "ok" if ratio >= TARGET_RATIO else "MISSED"
    print(f"throughput ratio platform / bare: {ratio:.2f}x (target >= {TARGET_RATIO}): {verdict}")
    print(f"runs recorded by the platform during the timed rounds: {recorded}")
    print(
        f"\ntools/call to a remote MCP server behind OAuth, {oauth['calls']} calls per side, "
        "one at a time"
    )
    print(f"{'side':26} {'p50 ms':>8} {'p99 ms':>8}")
    for side, ms in oauth["p50_ms"].items():
        print(f"{side:26} {ms:8.2f} {oauth['p99_ms'][side]:8.2f}")
    print(
        f"the token per call (OAuth - static): {oauth['oauth_minus_static_ms']:.2f} ms; "
        f"registry and guard (static - bare): {oauth['static_minus_bare_ms']:.2f} ms; "
        f"refreshes: {oauth['refreshes']}"
    )
    document = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "setup": {"callers": CALLERS, "round_s": ROUND_S, "rounds": ROUNDS},
        "sides": rows,
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "runs_recorded": recorded,
        "oauth": oauth,
    }
    # A side without one successful call measured nothing.
    headline = {
        f"{row['side']} calls/s": row["calls_per_s"] if row["calls"] else None for row in rows
    }
    headline["ratio platform / bare"] = ratio if all(row["calls"] for row in rows) else None
    headline["oauth client: bare SDK p50 ms"] = oauth["p50_ms"]["bare SDK client"]
    headline["oauth client: static header p50 ms"] = oauth["p50_ms"]["platform, static header"]
    headline["oauth client: OAuth p50 ms"] = oauth["p50_ms"]["platform, OAuth"]
    headline["oauth client: token ms/call"] = oauth["oauth_minus_static_ms"]
    write_results("mcp", document, headline=headline)


if __name__ == "__main__":
    main()
