"""Group commit of single enqueues (storage/insert_group.py): concurrent `enqueue` calls share one
statement, and each keeps every promise of a single enqueue — its own job and journal row, its
own idempotency outcome, its own error (a row the database refuses fails only its caller)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from dataloader import App, IdempotencyConflict, Job, Settings
from dataloader.storage.executor import GroupCommit
from dataloader.storage.insert_group import InsertGroup

CALLERS = 40


@pytest.fixture
async def app(db: asyncpg.Pool, dsn: str) -> AsyncIterator[App]:
    async with App(Settings(db_dsn=dsn, workers=[])) as opened:
        yield opened


def group_of(app: App) -> InsertGroup:
    on = app.repo.on  # the App's enqueues run on the group commit in front of its pool
    assert isinstance(on, GroupCommit)
    return on.group


@pytest.fixture
async def poisoned_lock_key(db: asyncpg.Pool) -> AsyncIterator[str]:
    """While inside: the database refuses any dl_jobs row whose lock_key is 'poison'."""
    await db.execute("""
        CREATE FUNCTION dl_test_refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.lock_key = 'poison' THEN RAISE EXCEPTION 'poisoned row'; END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER dl_test_refuse_poison BEFORE INSERT ON dl_jobs
            FOR EACH ROW EXECUTE FUNCTION dl_test_refuse_poison();""")
    try:
        yield "poison"
    finally:
        await db.execute("DROP TRIGGER dl_test_refuse_poison ON dl_jobs; DROP FUNCTION dl_test_refuse_poison()")


async def test_concurrent_enqueues_share_a_statement_and_each_gets_its_own_job_and_journal_row(app, db):
    group = group_of(app)
    before = group.statements

    jobs = await asyncio.gather(*(app.enqueue("dl.noop", {"i": i}, queue="grouped", lock_key=f"k{i}")
                                  for i in range(CALLERS)))

    # The first call's statement is in flight when the others arrive: they go together in one more.
    assert group.statements - before == 2
    assert len({job.id for job in jobs}) == CALLERS
    assert [job.args for job in jobs] == [{"i": i} for i in range(CALLERS)]
    rows = await db.fetch("SELECT j.job_id, j.args, count(e.*) FILTER (WHERE e.kind = 'queued') AS queued "
                          "FROM dl_jobs j LEFT JOIN dl_job_events e USING (job_id) GROUP BY j.job_id, j.args")
    assert {r["job_id"]: r["args"] for r in rows} == {job.id: job.args for job in jobs}
    assert all(r["queued"] == 1 for r in rows)


async def test_one_enqueue_after_another_runs_one_statement_each(app, db):
    group = group_of(app)
    before = group.statements
    for i in range(3):
        await app.enqueue("dl.noop", queue="grouped", lock_key=f"k{i}")
    assert group.statements - before == 3
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == 3


async def test_the_same_idempotency_key_twice_in_one_group_is_one_job(app, db):
    async def call(key: str, args: dict) -> Job:
        return await app.enqueue("dl.noop", args, queue="grouped", idempotency_key=key)

    _, *same = await asyncio.gather(call("lead", {}), *(call("twice", {"a": 1}) for _ in range(3)))
    assert len({job.id for job in same}) == 1
    assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE idempotency_key = 'twice'") == 1

    # ... and a different body under a key taken by a neighbour of the same group is a conflict
    results = await asyncio.gather(call("lead2", {}), call("other", {"a": 1}), call("other", {"a": 2}),
                                   return_exceptions=True)
    assert isinstance(results[1], Job) and isinstance(results[2], IdempotencyConflict)
    assert await db.fetchval("SELECT count(*) FROM dl_job_events e JOIN dl_jobs j USING (job_id) "
                             "WHERE j.idempotency_key IN ('twice', 'other')") == 2


async def test_a_row_the_database_refuses_fails_only_its_own_caller(app, db, poisoned_lock_key):
    group = group_of(app)
    before = group.statements
    keys = ["lead", "a", poisoned_lock_key, "b", "c"]

    results = await asyncio.gather(*(app.enqueue("dl.noop", queue="grouped", lock_key=key) for key in keys),
                                   return_exceptions=True)

    failed = [key for key, result in zip(keys, results, strict=True) if isinstance(result, BaseException)]
    assert failed == [poisoned_lock_key]
    assert isinstance(results[2], asyncpg.RaiseError) and "poisoned row" in str(results[2])
    # the lead alone, the group of four (refused as a whole, nothing written), then each on its own
    assert group.statements - before == 1 + 1 + 4
    stored = await db.fetch("SELECT lock_key FROM dl_jobs")
    assert sorted(r["lock_key"] for r in stored) == ["a", "b", "c", "lead"]
    assert await db.fetchval("SELECT count(*) FROM dl_job_events") == 4


async def test_a_cancelled_caller_does_not_cancel_its_neighbours(app, db):
    lead = asyncio.create_task(app.enqueue("dl.noop", queue="grouped", lock_key="lead"))
    await asyncio.sleep(0)  # the lead's statement is now in flight
    waiting = [asyncio.create_task(app.enqueue("dl.noop", queue="grouped", lock_key=f"k{i}")) for i in range(3)]
    await asyncio.sleep(0)  # all three wait for the next group
    waiting[0].cancel()

    await lead
    done = await asyncio.gather(*waiting[1:])
    assert all(isinstance(job.id, uuid.UUID) for job in done)
    with pytest.raises(asyncio.CancelledError):
        await waiting[0]
    stored = {r["lock_key"] for r in await db.fetch("SELECT lock_key FROM dl_jobs")}
    assert stored == {"lead", "k1", "k2"}  # k0's caller gave up before its statement


async def test_close_answers_every_waiting_caller(dsn, db):
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    calls = [asyncio.create_task(app.enqueue("dl.noop", queue="grouped", lock_key=f"k{i}")) for i in range(5)]
    await asyncio.sleep(0)
    await app.close()
    jobs = await asyncio.gather(*calls)
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == len({job.id for job in jobs}) == 5


def test_the_group_statement_takes_the_single_statements_parameters():
    # test_query_parameters counts the single statement's arguments at the call site; the group
    # statement gets the same ones as columns, so its placeholders must be the same.
    from dataloader.storage.queries import sql
    from tests.unit.test_query_parameters import placeholders

    for single, group in (("insert_job", "insert_job_group"), ("insert_job_unkeyed", "insert_job_group_unkeyed")):
        assert placeholders(sql(group)) == placeholders(sql(single)) == placeholders(sql("insert_job")), group


async def test_a_group_mixing_keyed_and_unkeyed_calls_keeps_each_outcome(app, db):
    """Calls without a key run the statement without ON CONFLICT alone; in a group with a keyed
    call the keyed form runs for all of them, and each call still gets its own outcome."""
    known = await app.enqueue("dl.noop", {"v": 0}, queue="grouped", idempotency_key="known")
    group = group_of(app)
    before = group.statements
    jobs = await asyncio.gather(*(
        app.enqueue("dl.noop", {"v": 0} if i % 3 == 0 else {"i": i}, queue="grouped",
                    **({"idempotency_key": "known"} if i % 3 == 0 else {}))
        for i in range(12)))
    assert group.statements - before == 2
    assert all(jobs[i].id == known.id for i in range(0, 12, 3)), "a known key: the existing job"
    fresh = [jobs[i] for i in range(12) if i % 3]
    assert len({j.id for j in fresh}) == 8 and known.id not in {j.id for j in fresh}
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == 9
    assert await db.fetchval("SELECT count(*) FROM dl_job_events WHERE kind = 'queued'") == 9
