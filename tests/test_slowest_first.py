"""The slowest modules start first, one per worker (tests/slowest_first.py)."""

from __future__ import annotations

from dataclasses import dataclass

from xdist.scheduler.worksteal import WorkStealingScheduling

from tests import slowest_first
from tests.conftest import ROOT


@dataclass(frozen=True)
class Item:
    nodeid: str


class Node:
    """What the scheduler sees of an xdist worker: the tests it is sent."""

    shutting_down = False

    def __init__(self, name: str) -> None:
        self.gateway = type("Gateway", (), {"id": name})()
        self.sent: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += indices


def test_the_slowest_modules_head_the_chunks_worksteal_hands_out_and_nothing_is_lost():
    items = [Item(f"tests/test_{m}.py::t{i}") for m in "abcdefgh" for i in range(5)]
    seconds = {"tests/test_c.py": 70, "tests/test_f.py": 60, "tests/test_h.py": 9}
    seconds |= {"tests/test_gone.py": 99}  # no longer collected: passed over
    ordered = slowest_first.ordered(items, 3, seconds)
    assert sorted(ordered, key=items.index) == items

    config = type("Config", (), {"getvalue": lambda self, name: ["3*popen"]})()
    scheduler = WorkStealingScheduling(config)  # xdist's own, given three workers
    nodes = [Node(f"gw{i}") for i in range(3)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, [item.nodeid for item in ordered])
    scheduler.schedule()
    chunks = [[ordered[i].nodeid.split("::")[0] for i in node.sent] for node in nodes]
    assert [len(chunk) for chunk in chunks] == slowest_first.chunk_sizes(len(items), 3)
    # The longest to the first chunk, the next to the second, the third to the emptiest.
    assert chunks[0][:5] == ["tests/test_c.py"] * 5
    assert chunks[1][:5] == ["tests/test_f.py"] * 5
    assert chunks[2][:5] == ["tests/test_h.py"] * 5
    assert chunks[0][5] == "tests/test_a.py"  # then the others, in collection order


def test_the_recorded_durations_name_test_files_that_exist():
    recorded = slowest_first.recorded_seconds()
    assert len(recorded) > 10
    assert [name for name in recorded if not (ROOT / name).is_file()] == []
