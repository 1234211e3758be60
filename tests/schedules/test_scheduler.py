"""The scheduler against the real database, time driven by ManualClock: one job per tick with its
key and history row, racing schedulers, the missed-tick policies after an outage, pause/resume,
code-declared schedules, and the NOTIFY that wakes a sleeping scheduler."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from dataloader.model.clock import ManualClock
from dataloader.schedules.manager import ScheduleManager
from dataloader.schedules.scheduler import TICKS, Scheduler, SchedulerSettings
from dataloader.storage.schedule_repository import ScheduleRepository
from tests.conftest import wait_until

START = datetime(2030, 1, 1, tzinfo=UTC)


def parts(pool, clock=None):
    clock = clock or ManualClock(wall_start=START)
    repo = ScheduleRepository(pool)
    return clock, repo, ScheduleManager(repo, clock=clock)


async def jobs_of(pool, name):
    return await pool.fetch("SELECT job_id, idempotency_key, task, queue, args, producer FROM dl_jobs "
                            "WHERE idempotency_key LIKE $1 ORDER BY idempotency_key", f"schedule:{name}:%")


async def test_a_due_tick_enqueues_one_job_with_its_key_and_history(sdb):
    clock, repo, service = parts(sdb)
    created = await service.create(service.spec(name="every-min", task="dl.noop", every=timedelta(minutes=1),
                                                 args={"k": 1}, queue="q1"))
    assert created.next_run_at == START + timedelta(minutes=1) and created.source == "api"
    scheduler = Scheduler(repo, clock=clock)
    assert await scheduler.tick() == pytest.approx(60)
    assert await jobs_of(sdb, "every-min") == []
    before = TICKS.labels("every-min", "enqueued")._value.get()
    clock.advance(60)
    await scheduler.tick()
    [job] = await jobs_of(sdb, "every-min")
    assert job["idempotency_key"] == "schedule:every-min:2030-01-01T00:01:00Z"
    assert (job["task"], job["queue"], job["args"], job["producer"]) == ("dl.noop", "q1", {"k": 1}, "schedule")
    [run] = await service.history("every-min")
    assert (run.tick_at, run.job_id, run.job_status, run.lag_sec) == (START + timedelta(minutes=1), job["job_id"],
                                                                     "queued", 0)
    assert TICKS.labels("every-min", "enqueued")._value.get() == before + 1
    assert (await service.get("every-min")).next_run_at == START + timedelta(minutes=2)


async def test_racing_schedulers_enqueue_exactly_one_job_per_tick(sdb):
    clock, repo, service = parts(sdb)
    await service.create(service.spec(name="race", task="dl.noop", every_sec=1))
    schedulers = [Scheduler(repo, clock=clock) for _ in range(4)]
    lost = 0
    for _ in range(25):
        clock.advance(1)
        due = await repo.due(clock.wall(), 10)  # all four read the same row at the same revision
        results = await asyncio.gather(*(s.fire(due[0], clock.wall()) for s in schedulers))
        assert sum(r is not None for r in results) == 1
        lost += sum(r is None for r in results)
    jobs = await jobs_of(sdb, "race")
    assert len(jobs) == 25 and lost == 75
    ticks = [r.tick_at for r in await service.history("race", limit=100)]
    assert sorted(ticks) == [START + timedelta(seconds=i) for i in range(1, 26)]


@pytest.mark.parametrize(("policy", "expected_ticks", "skipped"), [
    ("skip", [], 10),
    ("run_once", ["00:10"], 9),
    ("catch_up", ["00:08", "00:09", "00:10"], 7),
])
async def test_missed_ticks_after_an_outage_follow_the_policy(sdb, policy, expected_ticks, skipped):
    clock, repo, service = parts(sdb)
    await service.create(service.spec(name=f"m-{policy}", task="dl.noop", every_sec=60, missed=policy,
                                      catch_up_limit=3, grace_sec=5))
    clock.advance(10 * 60 + 20)  # ticks 00:01 .. 00:10 were due while nothing ran; the last is 20 s late
    await Scheduler(repo, clock=clock).tick()
    jobs = await jobs_of(sdb, f"m-{policy}")
    assert [j["idempotency_key"][-9:-4] for j in jobs] == expected_ticks
    runs = await service.history(f"m-{policy}")
    assert sum(r.skipped_before for r in runs) == (skipped if runs else 0)
    assert (await service.get(f"m-{policy}")).next_run_at == START + timedelta(minutes=11)


async def test_pause_stops_ticks_and_resume_starts_from_the_next_future_tick(sdb):
    clock, repo, service = parts(sdb)
    await service.create(service.spec(name="p", task="dl.noop", every_sec=60))
    scheduler = Scheduler(repo, clock=clock)
    paused = await service.pause("p")
    assert paused.paused and service.upcoming(paused) == []
    clock.advance(300)
    await scheduler.tick()
    assert await jobs_of(sdb, "p") == []
    resumed = await service.resume("p")
    assert not resumed.paused and resumed.next_run_at == START + timedelta(minutes=6)
    assert service.upcoming(resumed, 3) == [START + timedelta(minutes=m) for m in (6, 7, 8)]
    clock.advance(60)
    await scheduler.tick()
    assert [j["idempotency_key"] for j in await jobs_of(sdb, "p")] == ["schedule:p:2030-01-01T00:06:00Z"]


async def test_code_declared_schedules_are_upserted_and_keep_an_operators_pause(sdb):
    clock, repo, service = parts(sdb)
    spec = service.spec(name="declared", task="dl.noop", cron="0 2 * * *", tz="Europe/Berlin")
    await Scheduler(repo, clock=clock, declared=[spec]).upsert_declared()
    row = await service.get("declared")
    assert row.source == "code" and row.next_run_at == datetime(2030, 1, 1, 1, 0, tzinfo=UTC)
    await service.pause("declared")
    changed = service.spec(name="declared", task="dl.noop", cron="0 3 * * *", tz="Europe/Berlin", args={"v": 2})
    await Scheduler(repo, clock=clock, declared=[changed]).upsert_declared()
    row = await service.get("declared")
    assert row.paused and row.cron == "0 3 * * *" and row.args == {"v": 2}
    assert row.next_run_at == datetime(2030, 1, 1, 2, 0, tzinfo=UTC)
    # a schedule created through the API is not overwritten by a declaration of the same name
    await service.create(service.spec(name="api-owned", task="dl.noop", every_sec=30))
    await Scheduler(repo, clock=clock, declared=[service.spec(name="api-owned", task="other", every_sec=5)]
                    ).upsert_declared()
    assert (await service.get("api-owned")).task == "dl.noop"


async def test_the_decorator_declares_a_schedule_for_its_pipeline(sdb):
    from dataloader.schedules import schedule
    from dataloader.schedules.declare import declared_schedules
    from dataloader.workers.pipelines.registry import PipelineRegistry

    pipelines = PipelineRegistry()

    @schedule(every=timedelta(minutes=5), args={"a": 1}, missed="catch_up", catch_up_limit=2)
    def nightly(ctx):  # registered below, as @pipeline would
        return None

    pipelines.register("test.sched.nightly", nightly)
    specs, _problems = declared_schedules(
        lambda f: next((n for n in pipelines.names() if pipelines.get(n).func is f), None))
    [spec] = [s for s in specs if s.name == "test.sched.nightly"]
    assert (spec.task, spec.every_sec, spec.args, spec.missed.value) == ("test.sched.nightly", 300, {"a": 1},
                                                                         "catch_up")
    with pytest.raises(ValueError, match="cron"):
        schedule("99 * * * *")


async def test_a_sleeping_scheduler_wakes_on_notify_not_on_a_poll(sdb, dsn):
    clock, repo, service = parts(sdb)
    scheduler = Scheduler(repo, SchedulerSettings(max_sleep_sec=600), dsn=dsn, clock=clock)
    await scheduler.start()
    try:
        deadlines = await clock.parked()
        assert deadlines == [clock.monotonic() + 600]  # nothing scheduled: the bounded backstop only
        passes = scheduler.passes
        await service.create(service.spec(name="wake", task="dl.noop", every_sec=30))
        await wait_until(lambda: scheduler.passes > passes and clock.deadlines() == [clock.monotonic() + 30],
                         timeout=5, message="the scheduler to re-read after the NOTIFY")
        clock.advance(30)
        await wait_until(lambda: scheduler.passes > passes + 1, timeout=5)
        await wait_until(lambda: jobs_of(sdb, "wake"), timeout=5)
    finally:
        await scheduler.stop()
    assert scheduler.last_error is None
