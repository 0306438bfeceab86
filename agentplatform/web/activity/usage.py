"""Usage figures for a period of whole days ending today: runs and tokens per day per
series (agent, crew or directly called tool), p50/p95 run latency per series, and the
error rate per tool. Aggregated in PostgreSQL (TruncDate, Count, Sum, percentile_cont).

`runs` is the queryset of runs the viewer may see (see visibility.py); every run in the
period counts, child runs included (a crew member's run is that agent's usage). Four
queries in all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from django.db.models import QuerySet

from agents import selectors
from agents.models import Run
from agents.usage_report import SERIES_FIELDS, Period, series_label

PERIODS = (7, 30, 90)
MAX_SERIES = 8  # more series than colours: the smallest are summed as "Other"


@dataclass
class DailyTable:
    """values[s][d]: series s (labels[s]) on dates[d]."""

    dates: tuple[date, ...]
    labels: list[str]
    values: list[list[int]]

    @property
    def totals(self) -> list[int]:
        return (
            [sum(column) for column in zip(*self.values, strict=True)]
            if self.values
            else [0 for _ in self.dates]
        )

    @property
    def rows(self) -> list[tuple[date, list[int], int]]:
        """Per date: the series' values and their total (for the data table)."""
        return [
            (day, [series[d] for series in self.values], total)
            for d, (day, total) in enumerate(zip(self.dates, self.totals, strict=True))
        ]

    @property
    def total(self) -> int:
        return sum(self.totals)


@dataclass
class Latency:
    label: str
    runs: int
    p50_s: float
    p95_s: float


@dataclass
class ToolErrors:
    name: str
    calls: int
    errors: int

    @property
    def rate(self) -> float:
        return self.errors / self.calls if self.calls else 0.0

    @property
    def percent(self) -> float:
        return self.rate * 100


@dataclass
class Usage:
    period: Period
    runs: DailyTable
    tokens: DailyTable
    input_tokens: int = 0
    output_tokens: int = 0
    latency: list[Latency] = field(default_factory=list)
    tools: list[ToolErrors] = field(default_factory=list)


def _key(row: dict) -> tuple:
    return (row["agent_id"], row["crew_id"], row["tool_name"], row["gateway_model"])


def usage_for(runs: QuerySet[Run], period: Period) -> Usage:
    daily = selectors.runs_per_day(runs=runs, since=period.start, series=SERIES_FIELDS)
    labels: dict[tuple, str] = {}
    tokens_by_series: dict[tuple, int] = {}
    for row in daily:
        key = _key(row)
        labels[key] = series_label(row)
        tokens_by_series[key] = tokens_by_series.get(key, 0) + row["input"] + row["output"]
    order = sorted(labels, key=lambda k: (-tokens_by_series[k], labels[k]))
    if len(order) > MAX_SERIES:
        kept, folded = order[: MAX_SERIES - 1], set(order[MAX_SERIES - 1 :])
        index = {k: i for i, k in enumerate(kept)} | {k: MAX_SERIES - 1 for k in folded}
        names = [labels[k] for k in kept] + ["Other"]
    else:
        index = {k: i for i, k in enumerate(order)}
        names = [labels[k] for k in order]
    day_index = {day: d for d, day in enumerate(period.dates)}
    run_values = [[0] * len(period.dates) for _ in names]
    token_values = [[0] * len(period.dates) for _ in names]
    usage = Usage(
        period=period,
        runs=DailyTable(period.dates, names, run_values),
        tokens=DailyTable(period.dates, names, token_values),
    )
    for row in daily:
        d = day_index.get(row["day"])
        if d is None:  # created "in the future" of the current zone's today
            continue
        s = index[_key(row)]
        run_values[s][d] += row["count"]
        token_values[s][d] += row["input"] + row["output"]
        usage.input_tokens += row["input"]
        usage.output_tokens += row["output"]
    usage.latency = latency_for(runs, period)
    usage.tools = tool_errors_for(runs, period)
    return usage


def latency_for(runs: QuerySet[Run], period: Period) -> list[Latency]:
    """p50/p95 of finished_at - started_at per series, over the runs that have both."""
    rows = selectors.run_latency_per_series(runs=runs, since=period.start, series=SERIES_FIELDS)
    result = [Latency(series_label(r), r["count"], r["p50"], r["p95"]) for r in rows]
    return sorted(result, key=lambda item: item.label.lower())


def tool_errors_for(runs: QuerySet[Run], period: Period) -> list[ToolErrors]:
    """tool.completed events of `runs` in the period, per tool name: all and with an error."""
    rows = selectors.tool_calls_per_name(runs=runs, since=period.start)
    return [ToolErrors(r["tool"] or "?", r["calls"], r["errors"]) for r in rows]
