"""SVG chart geometry computed on the server. Templates draw the shapes with SVG
attributes (x, y, width, height) and colour them with classes from activity.css: the
CSP allows no inline style. Pure Python; no Django."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date

PALETTE_SIZE = 8


@dataclass
class Rect:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str


@dataclass
class Label:
    x: float
    y: float
    text: str


@dataclass
class Chart:
    title: str
    description: str
    width: int
    height: int
    left: float
    top: float
    plot_width: float
    plot_height: float
    bars: list[Rect] = field(default_factory=list)
    y_ticks: list[Label] = field(default_factory=list)
    x_labels: list[Label] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)

    @property
    def bottom(self) -> float:
        return self.top + self.plot_height

    @property
    def right(self) -> float:
        return self.left + self.plot_width


def series_css(index: int) -> str:
    return f"series-{index % PALETTE_SIZE}"


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten that is >= value (1 for 0)."""
    if value <= 0:
        return 1
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * power:
            return step * power
    return 10 * power


def whole_tick(value: float) -> int:
    """The smallest 1, 2 or 5 times a power of ten that is >= value (at least 1): a tick
    step for counts, so that every tick is a whole number."""
    power = 1
    while True:
        for step in (1, 2, 5):
            if step * power >= value:
                return step * power
        power *= 10


def compact(value: float) -> str:
    """1234 -> 1.2k, 2500000 -> 2.5M; small numbers as they are."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.1f}".rstrip("0").rstrip(".") + suffix
    return f"{value:g}"


def stacked_daily_bars(
    *,
    title: str,
    description: str,
    dates: Sequence[date],
    labels: Sequence[str],
    values: Sequence[Sequence[int]],
    unit: str,
    width: int = 720,
    height: int = 240,
) -> Chart:
    """One bar per day, one segment per series (values[series][day])."""
    chart = Chart(title, description, width, height, left=48, top=10,
                  plot_width=width - 56, plot_height=height - 40)  # fmt: skip
    totals = [sum(series[d] for series in values) for d in range(len(dates))]
    top = 4 * whole_tick(max(totals, default=0) / 4)  # four whole steps
    scale = chart.plot_height / top
    slot = chart.plot_width / max(len(dates), 1)
    bar_width = max(slot * 0.7, 1.0)
    for d, day in enumerate(dates):
        x = chart.left + d * slot + (slot - bar_width) / 2
        base = chart.bottom
        for s, series in enumerate(values):
            value = series[d]
            if not value:
                continue
            h = value * scale
            base -= h
            title = f"{day:%a %d %b}, {labels[s]}: {value:,} {unit}"
            geometry = (round(x, 2), round(base, 2), round(bar_width, 2), round(h, 2))
            chart.bars.append(Rect(*geometry, series_css(s), title))
    for i in range(5):
        value = top * i / 4
        y = round(chart.bottom - value * scale, 2)
        chart.y_ticks.append(Label(chart.left - 6, y, compact(value)))
    every = max(1, math.ceil(len(dates) / 7))
    for d in range(0, len(dates), every):
        x = chart.left + d * slot + slot / 2
        chart.x_labels.append(Label(round(x, 2), chart.bottom + 16, f"{dates[d]:%d %b}"))
    chart.legend = [(label, series_css(s)) for s, label in enumerate(labels)]
    return chart


@dataclass
class HBarRow:
    label: str
    values: list[float]  # one per measure


def horizontal_bars(
    *,
    title: str,
    description: str,
    rows: Sequence[HBarRow],
    measures: Sequence[str],
    fmt: Callable[[float], str],
    maximum: float | None = None,
    width: int = 720,
) -> Chart:
    """One group per row, one thin bar per measure (grouped), labelled with its value."""
    bar_h, gap = 14, 10
    group_h = bar_h * len(measures) + gap
    height = int(20 + group_h * max(len(rows), 1))
    chart = Chart(title, description, width, height, left=160, top=10,
                  plot_width=width - 160 - 70, plot_height=height - 20)  # fmt: skip
    top = maximum or nice_ceiling(max((v for r in rows for v in r.values), default=0))
    for r, row in enumerate(rows):
        y0 = chart.top + r * group_h
        chart.y_ticks.append(Label(chart.left - 8, y0 + bar_h * len(measures) / 2, row.label))
        for m, value in enumerate(row.values):
            w = max(chart.plot_width * value / top, 1 if value else 0)
            y = y0 + m * bar_h
            title = f"{row.label}, {measures[m]}: {fmt(value)}"
            chart.bars.append(Rect(chart.left, y, round(w, 2), bar_h - 2, series_css(m), title))
            chart.x_labels.append(Label(round(chart.left + w + 4, 2), y + bar_h - 4, fmt(value)))
    chart.legend = [(label, series_css(m)) for m, label in enumerate(measures)]
    return chart
