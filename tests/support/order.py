"""The run's order: the longest tests first, one share per xdist worker, so none is left for the end.

Most of the suite's wall time is CPU on two cores; its longest tests (chaos, topology, a million-row
plan, the browser's fifty viewers) mostly wait. Collected in file order, the topology tests came
last, and the run ended with four workers waiting on five minutes of nodes and failovers while the
CPU idled. xdist's worksteal first cuts the collection into one contiguous chunk per worker
(pending // nodes_remaining each) and later steals from the chunks' tails, so each chunk here
starts with its share of the long tests (dealt longest first to the chunk with the least so far)
and the rest keeps its collected order behind them. Nothing is skipped or shortened: only the order
changes, and only under xdist.

LONG (long_tests.txt): seconds per test measured in a full run (`--junitxml`, a loaded machine: their ratio matters,
not their size). A renamed test simply keeps its place; tests/unit/test_order.py checks that every
name here is still a test."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

LIST = Path(__file__).with_name("long_tests.txt")

LONG: list[tuple[str, int]] = [
    (nodeid, int(seconds))
    for seconds, _, nodeid in (line.partition("\t") for line in LIST.read_text(encoding="utf-8").splitlines())
    if seconds and not seconds.startswith("#")
]


def chunk_sizes(total: int, workers: int) -> list[int]:
    """The sizes of worksteal's first split (xdist/scheduler/worksteal.py check_schedule)."""
    sizes = []
    for i in range(workers):
        sizes.append(total // (workers - i))
        total -= sizes[-1]
    return sizes


def front_loaded(items: list, workers: int, long: dict[str, int]) -> list:
    """`items` with the long ones at the heads of the workers' first chunks."""
    known = [item for item in items if item.nodeid in long]
    if workers < 2 or not known:
        return items
    known.sort(key=lambda item: -long[item.nodeid])
    rest = iter([item for item in items if item.nodeid not in long])
    sizes = chunk_sizes(len(items), workers)
    heads: list[list] = [[] for _ in range(workers)]
    loads = [0] * workers
    for item in known:
        i = min(range(workers), key=lambda w: (loads[w], len(heads[w])))
        heads[i].append(item)
        loads[i] += long[item.nodeid]
    ordered = []
    for head, size in zip(heads, sizes, strict=True):
        ordered += head + list(itertools.islice(rest, max(size - len(head), 0)))
    return ordered + list(rest)


class FrontLoad:
    @pytest.hookimpl(trylast=True)  # after the tiers' deselection (-m), on the tests that will run
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list) -> None:
        workers = getattr(config, "workerinput", {}).get("workercount", 0)
        items[:] = front_loaded(items, workers, dict(LONG))
