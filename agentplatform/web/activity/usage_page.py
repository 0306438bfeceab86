"""The usage page: a period of 7, 30 or 90 days, charts drawn as SVG on the server with a
data table beside each, and cost per agent, member, API key and day (agents.usage_report);
its figures as CSV. Figures cover the runs the user may see (see visibility.py)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from agentplatform.web.activity.charts import HBarRow, horizontal_bars, stacked_daily_bars
from agentplatform.web.activity.usage import PERIODS, Period, usage_for
from agentplatform.web.activity.visibility import sees_whole_tenant, visible_runs
from agents.selectors import runs_since
from agents.usage_report import cost_lines, total_cost, usage_csv, usage_rows
from agents.verification import rates_by_agent
from tenancy.policy import Action
from tenancy.resolution import tenant_member_required


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value < 60 else f"{value / 60:.1f} min"


def _days(request: HttpRequest) -> int:
    try:
        days = int(request.GET.get("days", 30))
    except ValueError:
        days = 30
    return days if days in PERIODS else 30


@tenant_member_required(Action.READ_USAGE)
def usage_export(request: HttpRequest) -> HttpResponse:
    """The period's usage as CSV: a row per day x agent x member x API key."""
    days = _days(request)
    period = Period.ending_today(days)
    rows = usage_rows(runs_since(principal=request.principal, since=period.start))
    response = HttpResponse(usage_csv(rows), content_type="text/csv; charset=utf-8")
    name = f"usage-{request.tenant.slug}-{timezone.localdate():%Y-%m-%d}-{days}d.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@tenant_member_required(Action.READ_USAGE)
def usage_page(request: HttpRequest) -> HttpResponse:
    days = _days(request)
    period = Period.ending_today(days)
    usage = usage_for(visible_runs(request), period)
    outcomes = rates_by_agent(runs_since(principal=request.principal, since=period.start))
    span = f"the last {days} days"
    runs_chart = stacked_daily_bars(
        title=f"Runs per day, {span}",
        description=f"{usage.runs.total} runs, stacked by agent.",
        dates=usage.period.dates, labels=usage.runs.labels, values=usage.runs.values, unit="runs",
    )  # fmt: skip
    tokens_chart = stacked_daily_bars(
        title=f"Tokens per day, {span}",
        description=f"{usage.tokens.total} tokens (input and output), stacked by agent.",
        dates=usage.period.dates, labels=usage.tokens.labels, values=usage.tokens.values,
        unit="tokens",
    )  # fmt: skip
    latency_chart = horizontal_bars(
        title=f"Run latency per agent, {span}",
        description="Median (p50) and 95th percentile (p95) of finished minus started.",
        rows=[HBarRow(item.label[:24], [item.p50_s, item.p95_s]) for item in usage.latency],
        measures=["p50", "p95"],
        fmt=_seconds,
    )
    errors_chart = horizontal_bars(
        title=f"Tool error rate, {span}",
        description="Share of completed tool calls that returned an error, per tool.",
        rows=[HBarRow(item.name[:24], [item.rate * 100]) for item in usage.tools],
        measures=["error rate"],
        fmt=lambda value: f"{value:.1f}%",
        maximum=100,
    )
    in_period = runs_since(principal=request.principal, since=period.start)
    costs = {group: cost_lines(in_period, group) for group in ("agent", "member", "api_key", "day")}
    context = {
        "cost_tables": [
            ("agent", "Per agent", "Agent", costs["agent"]),
            ("member", "Per member", "Member", costs["member"]),
            ("api_key", "Per API key", "API key", costs["api_key"]),
            ("day", "Per day", "Day", costs["day"]),
        ],
        "total_cost": total_cost(costs["day"]),
        "usage": usage,
        "days": days,
        "periods": PERIODS,
        "whole_tenant": sees_whole_tenant(request),
        "runs_chart": runs_chart,
        "tokens_chart": tokens_chart,
        "latency_chart": latency_chart,
        "errors_chart": errors_chart,
        "outcomes": outcomes,
    }
    return render(request, "web/activity/usage.html", context)
