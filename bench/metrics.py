"""What one scrape of GET /metrics costs as the runs table grows: every figure is read at
scrape time (agentplatform/web/metrics.py), so this is the price of that choice.

Run: cd /work/main && .venv/bin/python bench/metrics.py
(prints a table, writes bench/results/metrics.json; BENCH_SMOKE=1: small sizes, 2 scrapes).
Takes a minute or two: it starts the embedded PostgreSQL and Redis in a temporary DATA_DIR
(removed at exit) and fills them.

Data: TENANTS tenants; at each size, that many runs in total (statuses, tokens and
durations varied), EVENTS_PER_RUN events a run of which one in TOOL_ERROR_EVERY is a
failed `tool.completed`. Runs and events are copied from a template row with
generate_series (INSERT ... SELECT), then ANALYZEd, over a connection of the owner. Figures:
the median of SCRAPES scrapes (the view called with the token, through Django's test client),
in milliseconds. The scrapes log in as the app role, as a web process does (agentplatform/asgi.py;
the tenant policies apply), unless DB_ROW_LEVEL_SECURITY=false.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# bench/ (the script's directory, first on sys.path) holds agents.py and mcp.py, which would
# shadow the packages: the repo root replaces it.
sys.path[0] = str(ROOT)

import psycopg  # noqa: E402

from bench.common import configure_django, sized, write_results  # noqa: E402

SIZES = sized((1_000, 10_000, 100_000), smoke=(100, 1_000))
TENANTS = 5
EVENTS_PER_RUN = 6
TOOL_ERROR_EVERY = 20  # one failed tool call per this many events
SCRAPES = sized(5, smoke=2)
TOKEN = "bench-metrics-token"  # noqa: S105 (the bench's own throwaway server)


def fill(
    owner: psycopg.Connection, total_runs: int, template_run: int, template_event: int
) -> None:
    """Add runs (and their events) until there are `total_runs`, on the owner's connection."""
    from agents.models import Run, RunEvent

    have = owner.execute("SELECT count(*) FROM agents_run").fetchone()[0]
    more = total_runs - have
    if more <= 0:
        return
    run_columns = [f.column for f in Run._meta.concrete_fields if f.column != "id"]
    varied = {
        "status": "(ARRAY['succeeded','failed','succeeded','cancelled','running'])[1 + mod(n, 5)]",
        "input_tokens": "100 + mod(n, 900)",
        "output_tokens": "20 + mod(n, 200)",
        "started_at": "now() - interval '1 day'",
        "finished_at": "now() - interval '1 day' + mod(n, 120) * interval '1 second'",
        # (constants of this file only, no input)
        "tenant_id": "(SELECT id FROM tenancy_tenant ORDER BY id LIMIT 1 "  # noqa: S608
        f"OFFSET mod(n, {TENANTS}))",
        "correlation_id": "md5(n::text)",
    }
    select = ", ".join(varied.get(c, f'"{c}"') for c in run_columns)
    columns = ", ".join(f'"{c}"' for c in run_columns)
    event_columns = [f.column for f in RunEvent._meta.concrete_fields if f.column != "id"]
    event_varied = {
        "run_id": "r.id",
        "tenant_id": "r.tenant_id",
        "seq": "s",
        "type": f"CASE WHEN mod(r.id * {EVENTS_PER_RUN} + s, {TOOL_ERROR_EVERY}) = 0 "
        "THEN 'tool.completed' ELSE 'text.delta' END",
        "payload": f"CASE WHEN mod(r.id * {EVENTS_PER_RUN} + s, {TOOL_ERROR_EVERY}) = 0 "
        """THEN '{"name": "calculator", "error": "division by zero"}'::jsonb """
        """ELSE '{"text": "hello"}'::jsonb END""",
    }
    event_select = ", ".join(event_varied.get(c, f'e."{c}"') for c in event_columns)
    with owner.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO agents_run ({columns}) SELECT {select} FROM agents_run, "  # noqa: S608
            f"generate_series({have}, {total_runs - 1}) AS n WHERE agents_run.id = %s",
            [template_run],
        )
        cursor.execute(
            f"INSERT INTO agents_runevent ({', '.join(event_columns)}) "  # noqa: S608
            f"SELECT {event_select} FROM agents_run r, agents_runevent e, "
            f"generate_series(1, {EVENTS_PER_RUN}) AS s "
            "WHERE e.id = %s AND r.id > %s AND NOT EXISTS "
            "(SELECT 1 FROM agents_runevent x WHERE x.run_id = r.id)",
            [template_event, template_run],
        )
        cursor.execute("ANALYZE agents_run")
        cursor.execute("ANALYZE agents_runevent")


def main() -> None:
    configure_django("bench-metrics-")
    from django.conf import settings
    from django.test import Client

    from agents.models import Agent, Run, RunEvent
    from tenancy import rls, services

    settings.METRICS_TOKEN = TOKEN
    settings.ALLOWED_HOSTS = ["*"]
    tenants = [
        services.tenant_create(slug=f"tenant{i}", name=f"Tenant {i}") for i in range(TENANTS)
    ]
    agent = Agent.objects.create(tenant=tenants[0], slug="assistant", name="Assistant")
    template = Run.objects.create(tenant=tenants[0], agent=agent, correlation_id="template")
    event = RunEvent.objects.create(tenant=tenants[0], run=template, seq=1, type="run.started")
    login = settings.DATABASES["default"]  # the owner's, until assume_app_role
    owner = psycopg.connect(
        host=login["HOST"], port=login["PORT"] or None, user=login["USER"],
        password=login["PASSWORD"] or None, dbname=login["NAME"], autocommit=True,
    )  # fmt: skip
    rls.assume_app_role()
    client = Client()
    figures = []
    for size in SIZES:
        fill(owner, size, template.pk, event.pk)
        timings = []
        for _ in range(SCRAPES + 1):  # the first one warms up (the import, the plans)
            started = time.perf_counter()
            response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
            timings.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, response.status_code
        runs, events = owner.execute(
            "SELECT (SELECT count(*) FROM agents_run), (SELECT count(*) FROM agents_runevent)"
        ).fetchone()
        figures.append(
            {
                "runs": runs,
                "events": events,
                "scrape_ms": statistics.median(timings[1:]),
                "bytes": len(response.content),
            }
        )
        print(
            f"{figures[-1]['runs']:>9} runs {events:>9} events: "
            f"{figures[-1]['scrape_ms']:8.1f} ms a scrape ({len(response.content)} bytes)"
        )
    owner.close()
    print(f"load average: {os.getloadavg()[0]:.1f}")
    document = {
        "python": platform.python_version(),
        "load_average": os.getloadavg()[0],
        "figures": figures,
    }
    headline = {f"scrape ms at {f['runs']} runs": f["scrape_ms"] for f in figures}
    write_results("metrics", document, headline=headline)


if __name__ == "__main__":
    main()
