"""The operations CLI as an operator reads it (issue 24): the progress line shows the state, and an
operation that matches nothing neither asks nor starts."""

from __future__ import annotations

import asyncio
import json
import uuid

from rich.text import Text

from dataloader.cli.operations import _progress_line
from dataloader.model.operation import Operation
from tests.support.cli import invoke


async def test_the_progress_line_shows_the_state(app_on_db):
    op = await app_on_db.operations.start("cancel", {"queues": ["nothing-here"]}, started_by="test")
    for state in ("running", "paused", "canceled"):
        shown = Text.from_markup(_progress_line(_with_state(op, state))).plain
        assert f"[{state}]" in shown and str(op.id)[:8] in shown, shown


def _with_state(op: Operation, state: str) -> Operation:
    from dataclasses import replace

    return replace(op, state=state)


async def test_an_operation_that_matches_nothing_neither_asks_nor_starts(app_on_db, db, dsn):
    result = await asyncio.to_thread(invoke, ["ops", "requeue", "--queue", f"none-{uuid.uuid4().hex[:6]}"],
                                     {"DL_DB_DSN": dsn})
    assert result.exit_code == 0, result.output
    assert "start it?" not in result.output
    assert json.loads(result.stdout)["total"] == 0
    assert await db.fetchval("SELECT count(*) FROM dl_operations") == 0
