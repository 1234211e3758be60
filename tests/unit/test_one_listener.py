"""One LISTEN session per node (DESIGN "storage: ... ONE notifier"): asyncpg's `add_listener` is
called in storage/notifier.py and nowhere else in the package. A module that wants a NOTIFY
subscribes to the node's `Notifier`; a LISTEN of its own would be one more session per node
(docs/scaling.md "Connection budget") and one more reconnect loop to get wrong."""

from __future__ import annotations

import ast
from pathlib import Path

import dataloader

PACKAGE_ROOT = Path(dataloader.__file__).parent
THE_NOTIFIER = PACKAGE_ROOT / "storage" / "notifier.py"
LISTENING = frozenset({"add_listener", "remove_listener"})


def listens(source: str) -> list[int]:
    """Lines of `source` that call a LISTEN method of a connection."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LISTENING]


def test_only_the_notifier_listens() -> None:
    found = {str(path.relative_to(PACKAGE_ROOT)): lines for path in sorted(PACKAGE_ROOT.rglob("*.py"))
             if path != THE_NOTIFIER and (lines := listens(path.read_text()))}
    assert not found, f"LISTEN outside storage/notifier.py (subscribe to the node's Notifier instead): {found}"
    assert listens(THE_NOTIFIER.read_text()), "the notifier no longer listens: is this guard still looking?"


def test_the_guard_can_fail() -> None:
    assert listens("async def f(conn):\n    await conn.add_listener('dl_jobs', print)\n") == [2]
    assert listens("def f(conn):\n    return conn.listen\n") == []
