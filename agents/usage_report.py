"""Usage and cost of a tenant's runs over a period, for every face (the usage page, REST,
CSV): grouped per agent (or crew, directly called tool, gateway model), per member, per API
key and per day, and as rows of day x subject x member x key.

`runs` is always the queryset the viewer may see (agents.access.visible_runs). Every run
counts, child runs included. Cost is summed from each run's own `cost_usd`, so a crew's
members are never counted twice; tokens are each run's, and a crew's run carries its
members' tokens too (as on the run's page). One query per grouping.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal

from django.db.models import Count, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from agents.models import Run

MAX_DAYS = 366
GROUPINGS = ("agent", "member", "api_key", "day")
SERIES_FIELDS = ("agent_id", "agent__name", "crew_id", "crew__name", "tool_name", "gateway_model")
_MEMBER_FIELDS = ("initiated_by_user_id", "initiated_by_user__username")
_KEY_FIELDS = ("initiated_by_api_key_id", "initiated_by_api_key__name")


@dataclass(frozen=True)
class Period:
    days: int
    start: datetime  # midnight (current time zone) of the first day
    dates: tuple[date, ...]

    @classmethod
    def ending_today(cls, days: int, now: datetime | None = None) -> Period:
        today = timezone.localdate(now)
        first = today - timedelta(days=days - 1)
        start = datetime.combine(first, time(), timezone.get_current_timezone())
        return cls(days, start, tuple(first + timedelta(days=i) for i in range(days)))


def series_label(row: dict) -> str:
    if row.get("agent__name"):
        return row["agent__name"]
    if row.get("crew__name"):
        return f"Crew: {row['crew__name']}"
    if row.get("tool_name"):
        return f"Tool: {row['tool_name']}"
    if row.get("gateway_model"):
        return f"Model: {row['gateway_model']}"
    return "Deleted agent"


def _series_key(row: dict) -> str:
    if row.get("agent_id"):
        return f"agent:{row['agent_id']}"
    if row.get("crew_id"):
        return f"crew:{row['crew_id']}"
    if row.get("tool_name"):
        return f"tool:{row['tool_name']}"
    if row.get("gateway_model"):
        return f"model:{row['gateway_model']}"
    return "deleted"


def _member(row: dict) -> tuple[str, str]:
    if row.get("initiated_by_user_id"):
        return f"member:{row['initiated_by_user_id']}", row["initiated_by_user__username"]
    return "none", "(no member: API keys)"


def _api_key(row: dict) -> tuple[str, str]:
    if row.get("initiated_by_api_key_id"):
        return f"api_key:{row['initiated_by_api_key_id']}", row["initiated_by_api_key__name"]
    return "none", "(no API key: signed-in members)"


@dataclass(frozen=True)
class CostLine:
    key: str  # "agent:3", "crew:2", "tool:<name>", "model:<id>", "member:5", "api_key:7",
    # the day (YYYY-MM-DD), or "none"/"deleted"
    label: str
    runs: int
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal


_TOTALS = {
    "runs": Count("id"),
    "input": Sum("input_tokens"),
    "output": Sum("output_tokens"),
    "cost": Sum("cost_usd"),
}


def cost_lines(runs: QuerySet[Run], group: str) -> list[CostLine]:
    """Per `group` (one of GROUPINGS): runs, tokens and cost, costliest first (days in
    date order). One query."""
    fields = {
        "agent": SERIES_FIELDS,
        "member": _MEMBER_FIELDS,
        "api_key": _KEY_FIELDS,
        "day": ("day",),
    }[group]
    if group == "day":
        runs = runs.annotate(day=TruncDate("created_at"))
    lines: dict[str, CostLine] = {}
    for row in runs.values(*fields).annotate(**_TOTALS).order_by():
        if group == "agent":
            key, label = _series_key(row), series_label(row)
        elif group == "member":
            key, label = _member(row)
        elif group == "api_key":
            key, label = _api_key(row)
        else:
            key = label = row["day"].isoformat()
        kept = lines.get(key)  # (a deleted agent's rows share one line)
        lines[key] = CostLine(
            key,
            label,
            row["runs"] + (kept.runs if kept else 0),
            (row["input"] or 0) + (kept.input_tokens if kept else 0),
            (row["output"] or 0) + (kept.output_tokens if kept else 0),
            (row["cost"] or Decimal(0)) + (kept.cost_usd if kept else Decimal(0)),
        )
    if group == "day":
        return sorted(lines.values(), key=lambda line: line.key)
    return sorted(lines.values(), key=lambda line: (-line.cost_usd, line.label.lower()))


@dataclass(frozen=True)
class UsageRow:
    day: date
    subject: str
    member: str
    api_key: str
    runs: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: Decimal


def usage_rows(runs: QuerySet[Run]) -> list[UsageRow]:
    """Per day x subject (agent, crew, tool, gateway model) x member x API key. One query."""
    rows = (
        runs.annotate(day=TruncDate("created_at"))
        .values("day", *SERIES_FIELDS, *_MEMBER_FIELDS, *_KEY_FIELDS)
        .annotate(**_TOTALS, read=Sum("cache_read_tokens"), write=Sum("cache_write_tokens"))
        .order_by()
    )
    found = [
        UsageRow(
            day=row["day"],
            subject=series_label(row),
            member=row["initiated_by_user__username"] or "",
            api_key=row["initiated_by_api_key__name"] or "",
            runs=row["runs"],
            input_tokens=row["input"] or 0,
            output_tokens=row["output"] or 0,
            cache_read_tokens=row["read"] or 0,
            cache_write_tokens=row["write"] or 0,
            cost_usd=row["cost"] or Decimal(0),
        )
        for row in rows
    ]
    return sorted(found, key=lambda r: (r.day, r.subject.lower(), r.member, r.api_key))


CSV_HEADER = (
    "date", "subject", "member", "api_key", "runs", "input_tokens", "output_tokens",
    "cache_read_tokens", "cache_write_tokens", "cost_usd",
)  # fmt: skip


def usage_csv(rows: Iterable[UsageRow]) -> str:
    """The rows as CSV text (a header line first). Names that a spreadsheet would read as
    a formula are quoted with a leading apostrophe."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    for row in rows:
        writer.writerow(
            [
                row.day.isoformat(), _cell(row.subject), _cell(row.member), _cell(row.api_key),
                row.runs, row.input_tokens, row.output_tokens, row.cache_read_tokens,
                row.cache_write_tokens, f"{row.cost_usd:.6f}",
            ]
        )  # fmt: skip
    return out.getvalue()


def _cell(text: str) -> str:
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def total_cost(lines: Iterable[CostLine]) -> Decimal:
    return sum((line.cost_usd for line in lines), Decimal(0))
