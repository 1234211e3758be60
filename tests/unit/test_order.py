"""The run's order (tests/support/order.py): a permutation that puts the long tests at the heads of
the workers' first chunks, and a list of long tests that still names tests."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.support.order import LONG, chunk_sizes, front_loaded

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Item:
    nodeid: str


def test_the_long_tests_lead_the_chunks_and_nothing_is_lost_or_doubled() -> None:
    items = [Item(f"t{i}") for i in range(40)]
    long = {"t39": 100, "t38": 90, "t37": 80, "t36": 70, "t35": 10}
    ordered = front_loaded(items, 4, long)
    assert sorted(i.nodeid for i in ordered) == sorted(i.nodeid for i in items)
    starts = [0]
    for size in chunk_sizes(len(items), 4)[:-1]:
        starts.append(starts[-1] + size)
    assert {ordered[s].nodeid for s in starts} == {"t39", "t38", "t37", "t36"}
    # the fifth goes to the lightest chunk, right behind its head; the rest keep their order
    rest = [i.nodeid for i in ordered if i.nodeid not in long]
    assert rest == [f"t{i}" for i in range(35)]
    assert ordered[starts[3] + 1].nodeid == "t35"


def test_without_workers_the_order_is_the_collected_one() -> None:
    items = [Item(f"t{i}") for i in range(10)]
    assert front_loaded(items, 0, {"t9": 50}) == items


def test_chunk_sizes_are_worksteals() -> None:
    assert chunk_sizes(10, 4) == [2, 2, 3, 3]
    assert sum(chunk_sizes(2391, 4)) == 2391


def test_every_long_test_still_exists() -> None:
    for nodeid, _ in LONG:
        path, _, name = nodeid.partition("::")
        function = name.partition("[")[0]
        source = (ROOT / path).read_text(encoding="utf-8")
        assert re.search(rf"def {re.escape(function)}\(", source), nodeid
