"""GET /metrics: the platform's figures in Prometheus' text format, for a scraper holding
METRICS_TOKEN (sent as `Authorization: Bearer <token>`).

No token configured: 404, as if there were no such page. No or another token: 401.

Every figure is read at scrape time from where every process already writes it — runs and
their events in PostgreSQL, the Celery queues in Redis — so the numbers are right however
many web and worker processes, on however many machines, there are, with nothing added to a
run's path and no shared multiprocess directory (prometheus_client's multiprocess mode only
joins processes of one machine). The cost is a few aggregate queries per scrape over the
runs table, and a count of tool errors on a partial index of the events; docs/observability.md
has the figures (bench/metrics.py).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from agents import selectors
from agents.runtime.spec import RunStatus
from base.versions import shared_redis
from tenancy import rls
from tenancy.selectors import tenant_slugs

# Seconds from a run's first start to its end (an approval's wait included).
LATENCY_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)
TOKEN_FIELDS = {
    "input": "input_tokens",
    "output": "output_tokens",
    "cache_read": "cache_read_tokens",
    "cache_write": "cache_write_tokens",
}


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    token = settings.METRICS_TOKEN
    if not token:
        raise Http404("No such page.")
    given = request.headers.get("Authorization", "")
    scheme, _, credential = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        credential.strip().encode("utf-8", "replace"), token.encode()
    ):  # (bytes: compare_digest refuses str with non-ASCII characters)
        response = HttpResponse("a valid metrics token is required\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    from prometheus_client.exposition import choose_encoder  # (45 ms to import)

    # The text format the scraper asks for (its Accept header); OpenMetrics when it says so.
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encode(_Figures()), content_type=content_type)


class _Figures:
    """What generate_latest reads: `collect()` yields the metric families, read now."""

    def collect(self) -> Iterator:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        with rls.owner():  # the figures of every tenant: the token is the platform operator's
            by_status = selectors.run_totals_by_tenant(sums=TOKEN_FIELDS)
            cost = selectors.run_cost_by_tenant()
            latency = _latency_by_tenant()
            tool_errors = list(selectors.tool_errors_by_tenant())
            ids = {r["tenant_id"] for r in by_status} | {r["tenant_id"] for r in tool_errors}
            slugs = tenant_slugs(ids=ids)

        runs = GaugeMetricFamily(
            "agentplatform_runs",
            "Runs recorded, by tenant and status.",
            labels=["tenant", "status"],
        )
        in_flight = GaugeMetricFamily(
            "agentplatform_runs_in_flight", "Runs executing now.", labels=["tenant"]
        )
        tokens = CounterMetricFamily(
            "agentplatform_tokens", "Model tokens used by runs.", labels=["tenant", "type"]
        )
        token_totals: dict[tuple[str, str], int] = {}
        running: dict[str, int] = {}
        for row in by_status:
            tenant = slugs.get(row["tenant_id"], str(row["tenant_id"]))
            runs.add_metric([tenant, row["status"]], row["n"])
            if row["status"] == RunStatus.RUNNING:
                running[tenant] = running.get(tenant, 0) + row["n"]
            for kind in TOKEN_FIELDS:
                key = (tenant, kind)
                token_totals[key] = token_totals.get(key, 0) + (row[kind] or 0)
        for tenant, n in sorted(running.items()):
            in_flight.add_metric([tenant], n)
        for (tenant, kind), n in sorted(token_totals.items()):
            tokens.add_metric([tenant, kind], n)
        yield runs
        yield in_flight
        yield tokens

        if cost is not None:
            family = CounterMetricFamily(
                "agentplatform_cost_usd", "What runs cost, in US dollars.", labels=["tenant"]
            )
            for tenant_id, value in sorted(cost.items()):
                family.add_metric([slugs.get(tenant_id, str(tenant_id))], float(value or 0))
            yield family

        histogram = HistogramMetricFamily(
            "agentplatform_run_duration_seconds",
            "Seconds from a run's start to its end, of finished runs.",
            labels=["tenant"],
        )
        for tenant_id, (buckets, total) in sorted(latency.items()):
            histogram.add_metric([slugs.get(tenant_id, str(tenant_id))], buckets, total)
        yield histogram

        errors = CounterMetricFamily(
            "agentplatform_tool_errors",
            "Tool calls that ended in an error (failed, refused, rate limited).",
            labels=["tenant", "tool"],
        )
        for row in tool_errors:
            errors.add_metric(
                [slugs.get(row["tenant_id"], str(row["tenant_id"])), row["tool"]], row["n"]
            )
        yield errors

        depth = GaugeMetricFamily(
            "agentplatform_queue_depth", "Tasks waiting in each Celery queue.", labels=["queue"]
        )
        for queue, n in queue_depths().items():
            depth.add_metric([queue], n)
        yield depth


def _latency_by_tenant() -> dict[int, tuple[list[tuple[str, int]], float]]:
    """Per tenant, the cumulative bucket counts and the sum of finished runs' durations."""
    result = {}
    for row in selectors.run_durations_by_tenant(bounds=LATENCY_BUCKETS):
        buckets = [(str(b), row[f"le{i}"]) for i, b in enumerate(LATENCY_BUCKETS)]
        buckets.append(("+Inf", row["total"]))
        seconds = row["seconds"].total_seconds() if row["seconds"] else 0.0
        result[row["tenant_id"]] = (buckets, seconds)
    return result


def queue_depths() -> dict[str, int]:
    """Messages waiting in the runs, batch and housekeeping queues (kombu's Redis transport
    keeps each queue as a list named after it, with priority lists beside it)."""
    queues = (settings.RUNS_QUEUE, settings.BATCH_QUEUE, settings.HOUSEKEEPING_QUEUE)
    pipe = shared_redis().pipeline(transaction=False)  # (the broker's database: config.py)
    for queue in queues:
        for name in _priority_lists(queue):
            pipe.llen(name)
    lengths = iter(pipe.execute())
    return {queue: sum(next(lengths) for _ in _priority_lists(queue)) for queue in queues}


def _priority_lists(queue: str) -> list[str]:
    """kombu's lists for one queue: the queue's name, then one per priority step (3, 6, 9)
    named with its separator."""
    return [queue, *(f"{queue}\x06\x16{step}" for step in (3, 6, 9))]
