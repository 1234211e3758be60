"""A change and its audit row commit together or not at all (DESIGN.md promise 14), shown with faults
planted in the database itself: a trigger that refuses the audit row (the change after it must roll
back too) and a trigger that makes the change's own statement fail (no `ok` row may be left)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest

from dataloader.app import App
from tests.audit.conftest import rows

FAIL_FUNCTION = """
CREATE OR REPLACE FUNCTION dl_test_fail() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'planted fault on %', TG_TABLE_NAME;
END $$"""


@asynccontextmanager
async def planted(pool: asyncpg.Pool, table: str, when: str = "true", events: str = "INSERT OR UPDATE"
                  ) -> AsyncIterator[None]:
    """A trigger on `table` that raises for the rows `when` (a WHEN condition) matches."""
    await pool.execute(FAIL_FUNCTION)
    await pool.execute(f"CREATE TRIGGER dl_test_fault BEFORE {events} ON {table} "
                       f"FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION dl_test_fail()")
    try:
        yield
    finally:
        await pool.execute(f"DROP TRIGGER dl_test_fault ON {table}")


Change = Callable[[App, str], Awaitable[Any]]
State = Callable[[asyncpg.Pool, str], Awaitable[Any]]


async def cancel_job(app: App, name: str) -> None:
    job = (await app.list(queue=name)).jobs[0]
    await app.cancel(job.id)


async def job_status(pool: asyncpg.Pool, name: str) -> Any:
    return await pool.fetchval("SELECT status FROM dl_jobs WHERE queue = $1", name)


async def pause_queue(app: App, name: str) -> None:
    await app.pause_queue(name)


async def paused(pool: asyncpg.Pool, name: str) -> Any:
    return await pool.fetchval("SELECT paused FROM dl_queue_flow WHERE queue = $1", name)


async def create_schedule(app: App, name: str) -> None:
    await app.schedules.create(app.schedules.spec(name=name, task="test.async_sleep", every_sec=60, queue=name))


async def schedule_exists(pool: asyncpg.Pool, name: str) -> Any:
    return await pool.fetchval("SELECT count(*) FROM dl_schedules WHERE name = $1", name)


async def start_operation(app: App, name: str) -> None:
    await app.operations.start("cancel", {"queues": [name]}, started_by=name)


async def operations_of(pool: asyncpg.Pool, name: str) -> Any:
    return await pool.fetchval("SELECT count(*) FROM dl_operations WHERE started_by = $1", name)


# (the change, what it changes, the table its statement writes, the action's audit row)
CASES = [
    (cancel_job, job_status, "dl_jobs", "job.cancel"),
    (pause_queue, paused, "dl_queue_flow", "queue.pause"),
    (create_schedule, schedule_exists, "dl_schedules", "schedule.create"),
    (start_operation, operations_of, "dl_operations", "operation.start"),
]
IDS = [case[3] for case in CASES]


@pytest.mark.parametrize(("change", "state", "table", "action"), CASES, ids=IDS)
async def test_an_audit_row_that_cannot_be_written_rolls_the_change_back(audit_app, trail, name, change, state,
                                                                         table, action):
    await audit_app.enqueue("test.async_sleep", {}, queue=name)
    before = await state(trail, name)
    async with planted(trail, "dl_audit", f"NEW.action = '{action}'", "INSERT"):
        with pytest.raises(asyncpg.RaiseError, match="planted fault on dl_audit"):
            await change(audit_app, name)
    assert await state(trail, name) == before  # the change went with its row
    assert await rows(trail) == []
    await change(audit_app, name)  # without the fault: the change and its row, once
    assert await state(trail, name) != before
    assert [r["action"] for r in await rows(trail)] == [action]


@pytest.mark.parametrize(("change", "state", "table", "action"), CASES, ids=IDS)
async def test_a_change_whose_statement_fails_leaves_no_row(audit_app, trail, name, change, state, table, action):
    await audit_app.enqueue("test.async_sleep", {}, queue=name)
    before = await state(trail, name)
    async with planted(trail, table):
        with pytest.raises(asyncpg.RaiseError, match=f"planted fault on {table}"):
            await change(audit_app, name)
    assert await state(trail, name) == before
    assert await rows(trail) == []
