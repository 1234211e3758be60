"""No import cycle inside `dataloader`: a cycle means two modules are one idea split badly (or
one idea in the wrong layer), and it is what makes the engine hard to change. Top-level imports
and those under `if TYPE_CHECKING:` both count; imports inside functions are deferred on purpose
and do not."""

from __future__ import annotations

from pathlib import Path

from tests.support.import_graph import find_cycles, import_graph


def test_dataloader_has_no_import_cycle() -> None:
    graph = import_graph()
    assert "dataloader.workers.queue_worker" in graph, "the walk did not find the package's modules"
    cycles = find_cycles(graph)
    assert not cycles, "import cycles (modules that import each other, directly or not): " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_the_walk_sees_a_cycle_through_type_checking_imports(tmp_path: Path) -> None:
    """The guard can fail: a cycle closed only by a TYPE_CHECKING import is found."""
    pkg = tmp_path / "dataloader"
    (pkg / "workers").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "workers" / "__init__.py").write_text("")
    (pkg / "workers" / "a.py").write_text("from dataloader.workers.b import B\n")
    (pkg / "workers" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dataloader.workers.a import A\n")
    (pkg / "workers" / "c.py").write_text("def f():\n    from dataloader.workers.a import A\n")
    (pkg / "workers" / "d.py").write_text("from . import c\nfrom .c import f\n")
    graph = import_graph(pkg)
    assert graph["dataloader.workers.d"] == {"dataloader.workers.c"}
    assert graph["dataloader.workers.c"] == set()  # a deferred import is not an edge
    assert find_cycles(graph) == [["dataloader.workers.a", "dataloader.workers.b"]]
