"""The slowest test modules start first, one per xdist worker (tests/conftest.py applies it).

`--dist worksteal` hands each worker a contiguous chunk of the collection (a quarter each in
four workers) and lets an idle worker take the back half of the longest queue. A module of
a minute and more (`manage.py serve` on a fresh data dir, migrate as a plain user) that
happens to sit late in its chunk starts when the others are nearly done: the tier then ends
a minute after them on one worker. Here the modules `tests/slowest.txt` names go to the
heads of the chunks, the longest to the emptiest chunk, so they start at once, side by
side, and the rest fill in behind them in collection order; work stealing then takes only
short tests from the back. A module moves whole: its module-scoped fixtures (a browser, a
deployment) are still made once.

tests/slowest.txt is `make test`'s `--durations` lists pasted in (both tiers); a module it
names that is gone, or not in this run, is passed over.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

RECORDED = Path(__file__).with_name("slowest.txt")
_LINE = re.compile(r"^\s*([0-9.]+)s\s+(?:setup|call|teardown)\s+(\S+?)(?:::|\s|$)")


def recorded_seconds(path: Path = RECORDED) -> dict[str, float]:
    """Seconds per test file (relative to the project), summed over its recorded lines."""
    seconds: dict[str, float] = defaultdict(float)
    for line in path.read_text().splitlines():
        if match := _LINE.match(line):
            seconds[match.group(2)] += float(match.group(1))
    return dict(seconds)


def chunk_sizes(count: int, workers: int) -> list[int]:
    """How many tests worksteal's first distribution gives each worker (xdist's
    `WorkStealingScheduling.check_schedule`: the pending tests over the idle workers)."""
    sizes = []
    for i in range(workers):
        sizes.append(count // (workers - i))
        count -= sizes[-1]
    return sizes


def ordered(items: list[pytest.Item], workers: int, seconds: dict[str, float]) -> list[pytest.Item]:
    """`items` with the recorded modules moved to the heads of the workers' chunks."""
    if workers < 2:
        return items
    modules: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        modules[item.nodeid.split("::")[0]].append(item)
    slow = sorted((m for m in modules if m in seconds), key=lambda m: -seconds[m])
    heads: list[list[pytest.Item]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for module in slow:  # longest first, each to the chunk with the least so far
        chunk = load.index(min(load))
        heads[chunk] += modules[module]
        load[chunk] += seconds[module]
    moved = {id(item) for head in heads for item in head}
    rest = iter([item for item in items if id(item) not in moved])
    result: list[pytest.Item] = []
    end = 0
    for head, size in zip(heads, chunk_sizes(len(items), workers), strict=True):
        end += size
        result += head
        while len(result) < end and (item := next(rest, None)) is not None:
            result.append(item)
    result += rest
    return result
