"""Every change made through the Python API writes exactly one audit row, in its transaction, naming
who (the principal in force), what (the action and its target) and how it ended; a refusal by a
rule leaves one `refused` row with the error's code; reads, enqueues, claims and finishes write
none (DESIGN.md promise 14)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from dataloader import metrics
from dataloader.app import App
from dataloader.config import Queue
from dataloader.exceptions import (
    JobAlreadyFinished,
    ProcessWrongStatus,
    ScheduleExists,
    ScheduleNotFound,
    ValidationFailed,
)
from dataloader.model.principal import Principal, PrincipalKind, Role, acting_as
from tests.audit.conftest import audit_settings, rows
from tests.conftest import wait_until
from tests.processes.processors import register

ALICE = Principal.with_role(PrincipalKind.USER, "alice", Role.ADMIN, address="10.1.2.3")
Mark = Callable[[], Awaitable[None]]
Case = Callable[[App, str, Mark], Awaitable[tuple[str, str, str | None]]]


async def job_cancel(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    job = await app.enqueue("test.async_sleep", {}, queue=name)
    await mark()
    await app.cancel(job.id)
    return "job.cancel", "job", str(job.id)


async def job_retry(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    job = await app.enqueue("test.async_sleep", {}, queue=name)
    await app.cancel(job.id)
    await mark()
    await app.retry(job.id)
    return "job.retry", "job", str(job.id)


async def job_set_priority(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    job = await app.enqueue("test.async_sleep", {}, queue=name)
    await mark()
    await app.set_job_priority(job.id, 7)
    return "job.set_priority", "job", str(job.id)


async def job_delete(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    job = await app.enqueue("test.async_sleep", {}, queue=name)
    await app.cancel(job.id)
    await mark()
    await app.delete_job(job.id)
    return "job.delete", "job", str(job.id)


async def queue_pause(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    await app.pause_queue(name)
    return "queue.pause", "queue", name


async def queue_resume(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    await app.pause_queue(name)
    await mark()
    await app.resume_queue(name)
    return "queue.resume", "queue", name


async def task_pause(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    await app.pause_queue(name, task="test.async_sleep")
    return "task.pause", "queue", name


async def task_resume(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    await app.resume_queue(name, task="test.async_sleep")
    return "task.resume", "queue", name


async def limits_set(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    await app.configure_queue(name, concurrency=3)
    return "limits.set", "queue", name


async def limits_set_task(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    await app.configure_task(name, "test.async_sleep", concurrency=2)
    return "limits.set_task", "queue", name


def _schedule(app: App, name: str) -> Any:
    return app.schedules.spec(name=name, task="test.async_sleep", every_sec=3600, queue=name, args={"secret": 1})


async def schedule_create(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    await app.schedules.create(_schedule(app, name))
    return "schedule.create", "schedule", name


async def schedule_pause(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    await app.schedules.create(_schedule(app, name))
    await mark()
    await app.schedules.pause(name)
    return "schedule.pause", "schedule", name


async def schedule_resume(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    await app.schedules.create(_schedule(app, name))
    await app.schedules.pause(name)
    await mark()
    await app.schedules.resume(name)
    return "schedule.resume", "schedule", name


async def schedule_delete(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    await app.schedules.create(_schedule(app, name))
    await mark()
    await app.schedules.delete(name)
    return "schedule.delete", "schedule", name


async def observer_create(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    await app.observers.create(app.observers.spec(name=name, kind="test.probe"))
    return "observer.create", "observer", name


async def observer_stop(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    await app.observers.create(app.observers.spec(name=name, kind="test.probe"))
    await mark()
    await app.observers.stop(name)
    return "observer.stop", "observer", name


async def operation_start(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    op = await app.operations.start("cancel", {"queues": [name]}, started_by="alice")
    return "operation.start", "operation", str(op.id)


async def operation_pause(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    op = await app.operations.start("cancel", {"queues": [name]}, started_by="alice")
    await mark()
    await app.operations.pause(op.id, actor="alice")
    return "operation.pause", "operation", str(op.id)


async def operation_cancel(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    op = await app.operations.start("cancel", {"queues": [name]}, started_by="alice")
    await mark()
    await app.operations.cancel(op.id, actor="alice")
    return "operation.cancel", "operation", str(op.id)


async def process_put(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    register(name)
    await app.processes.put(name, {"id": "p1", "history": [{"payload": {"x": 1}}]})
    return "process.put", "process", f"{name}/p1"


async def process_remove(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    register(name)
    await app.processes.put(name, {"id": "p1"})
    await mark()
    await app.processes.remove(name, "p1")
    return "process.remove", "process", f"{name}/p1"


async def process_simple_repair(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    register(name)
    await app.processes.put(name, {"id": "p1", "status": "error"})
    await mark()
    await app.processes.simple_repair(name, "p1")
    return "process.simple_repair", "process", f"{name}/p1"


async def workflow_cancel(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    run_id = await app.workflows.start("t.steps", {"dsn": "unused"}, queue=name)
    await mark()
    await app.workflows.cancel(run_id)
    return "workflow.cancel", "workflow_run", str(run_id)


async def workflow_restart(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    run_id = await app.workflows.start("t.steps", {"dsn": "unused"}, queue=name)
    await app.workflows.cancel(run_id)
    await mark()
    await app.workflows.restart(run_id)
    return "workflow.restart", "workflow_run", str(run_id)


async def jobs_prune(app: App, name: str, mark: Mark) -> tuple[str, str, str | None]:
    await app.prune(older_than="7d", queues=[name])
    return "jobs.prune", "jobs", None


CASES: list[Case] = [
    job_cancel, job_retry, job_set_priority, job_delete, queue_pause, queue_resume, task_pause, task_resume,
    limits_set, limits_set_task, schedule_create, schedule_pause, schedule_resume, schedule_delete,
    observer_create, observer_stop, operation_start, operation_pause, operation_cancel, process_put,
    process_remove, process_simple_repair, workflow_cancel, workflow_restart, jobs_prune,
]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
async def test_each_change_writes_exactly_one_row_naming_who_what_and_its_target(case, audit_app, trail, name):
    async def mark() -> None:  # what the setup changed is not the case's: forget its rows
        await trail.execute("TRUNCATE dl_audit")

    with acting_as(ALICE):
        action, kind, target_id = await case(audit_app, name, mark)
    found = await rows(trail)
    assert [(r["action"], r["target_kind"], r["target_id"]) for r in found] == [(action, kind, target_id)]
    row = found[0]
    assert (row["actor"], row["actor_kind"], row["address"]) == ("user:alice", "user", "10.1.2.3")
    assert (row["outcome"], row["error_code"], row["face"]) == ("ok", None, None)
    assert "secret" not in str(row["details"])  # a schedule's args are a payload: never in the trail


async def test_a_library_caller_is_named_as_such_and_counted_in_the_metric(audit_app, trail, name):
    before = metrics.AUDIT_ROWS.labels("queue.pause", "ok")._value.get()
    await audit_app.pause_queue(name)
    [row] = await rows(trail)
    assert (row["actor"], row["face"], row["action"]) == ("library:python", "python", "queue.pause")
    assert metrics.AUDIT_ROWS.labels("queue.pause", "ok")._value.get() == before + 1


async def test_a_refusal_by_a_rule_is_one_refused_row_and_bad_input_writes_none(audit_app, trail, name):
    job = await audit_app.enqueue("test.async_sleep", {}, queue=name)
    await audit_app.cancel(job.id)
    await trail.execute("TRUNCATE dl_audit")
    with acting_as(ALICE):
        with pytest.raises(JobAlreadyFinished):
            await audit_app.cancel(job.id)
        await audit_app.schedules.create(audit_app.schedules.spec(name=name, task="test.async_sleep", every_sec=60))
        await trail.execute("DELETE FROM dl_audit WHERE action = 'schedule.create' AND outcome = 'ok'")
        with pytest.raises(ScheduleExists):
            await audit_app.schedules.create(audit_app.schedules.spec(name=name, task="test.async_sleep",
                                                                      every_sec=60))
        with pytest.raises(ScheduleNotFound):  # no such thing: names nothing, no row
            await audit_app.schedules.pause(f"{name}-none")
        with pytest.raises(ValidationFailed):  # refused before anything was asked of the database
            await audit_app.set_job_priority(job.id, -1)
    found = await rows(trail)
    assert [(r["action"], r["target_id"], r["outcome"], r["error_code"], r["actor"]) for r in found] == [
        ("job.cancel", str(job.id), "refused", "job_already_finished", "user:alice"),
        ("schedule.create", name, "refused", "schedule_exists", "user:alice"),
    ]


async def test_enqueue_claims_heartbeats_and_finishes_write_no_row(audit_app, trail, name):
    """The hot path stays as it was: a producer's enqueue and a worker's claim and finish write nothing."""
    job = await audit_app.enqueue("test.async_sleep", {"seconds": 0.01}, queue=name)
    await audit_app.enqueue_many([{"task": "test.async_sleep", "queue": name, "args": {"seconds": 0}}] * 3)
    async with audit_app.running(queues=[Queue(name, concurrency=2)]):
        await wait_until(lambda: _finished(audit_app, job.id), message="the job did not finish")
    assert await rows(trail) == []


async def _finished(app: App, job_id: uuid.UUID) -> bool:
    return (await app.get(job_id)).status.value == "succeeded"


async def test_dl_audit_enqueue_writes_a_row_per_enqueue_in_its_transaction(dsn, trail, name):
    async with App(audit_settings(dsn, audit_enqueue=True)) as app:
        job = await app.enqueue("test.async_sleep", {"card": "4111"}, queue=name)
        ids = await app.enqueue_many([{"task": "test.async_sleep", "queue": name}] * 2)
        async with app.pool.acquire() as conn:
            tx = conn.transaction()
            await tx.start()
            await app.enqueue("test.async_sleep", {}, queue=name, conn=conn)
            await tx.rollback()  # the caller's transaction: the job and its row go together
    found = await rows(trail)
    assert [(r["action"], r["target_id"]) for r in found] == [("job.enqueue", str(job.id)),
                                                             ("job.enqueue_many", None)]
    assert found[0]["details"] == {"queue": name, "task": "test.async_sleep", "created": True}
    assert found[1]["details"]["inserted"] == len(ids) == 2
    assert await trail.fetchval("SELECT count(*) FROM dl_jobs WHERE queue = $1", name) == 3


async def test_the_principal_follows_tasks_the_action_starts(audit_app, trail, name):
    async def pause() -> None:
        await audit_app.pause_queue(name)

    with acting_as(ALICE):
        await asyncio.create_task(pause())
    [row] = await rows(trail)
    assert row["actor"] == "user:alice"


async def test_a_process_restart_and_a_refused_repair_are_recorded(audit_app, trail, name):
    register(name)
    async with audit_app.running(queues=[f"process:{name}"]):
        await audit_app.processes.init(name, "p1", {"n": 1})
        await trail.execute("TRUNCATE dl_audit")
        with acting_as(ALICE):
            await audit_app.processes.restart(name, "p1", "start")
            with pytest.raises(ProcessWrongStatus):  # a repair needs the process in error: refused, queued nothing
                await audit_app.processes.repair(name, "p1", {}, timeout=5)
    found = await rows(trail)
    assert [(r["action"], r["target_id"], r["outcome"], r["error_code"]) for r in found] == [
        ("process.restart", f"{name}/p1", "ok", None),
        ("process.repair", f"{name}/p1", "refused", "process_wrong_status")]
    assert found[0]["details"]["from"] == "start"
