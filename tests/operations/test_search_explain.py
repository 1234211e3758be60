"""Plan shape (not wall time) of the operator's search on a realistic table: 1M jobs over 20
queues — mostly succeeded, 5 % failed, some canceled, lost, queued and running — with the search
run as the repository runs it (custom plans). The bound each check states: the page is read
through an index in the page's order and stops at the page (a Limit over an ordered index scan,
never a sequential scan or a sort of every match)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from dataloader.model.job_filter import JobFilter
from dataloader.storage.queries import sql
from dataloader.storage.search_repository import filter_params

ROWS = 1_000_000


async def fill(db, rows: int) -> None:
    await db.execute(
        "INSERT INTO dl_jobs (job_id, queue, task, lock_key, status, attempt, args, created_at, available_at, "
        "started_at, finished_at, error) "
        "SELECT gen_random_uuid(), 'q' || (g % 20), 't' || (g % 7), 'k' || g, "
        "(CASE WHEN g % 20 = 3 THEN 'failed' WHEN g % 100 = 7 THEN 'canceled' WHEN g % 1000 = 9 THEN 'lost' "
        "      WHEN g % 100 = 11 THEN 'queued' WHEN g % 1000 = 13 THEN 'running' ELSE 'succeeded' END)::dl_status, "
        "1, jsonb_build_object('customer', 'c' || (g % 1000)), "
        "now() - make_interval(secs => g), now() - make_interval(secs => g), "
        "now() - make_interval(secs => g), now() - make_interval(secs => g - 1), "
        "CASE WHEN g % 20 = 3 THEN 'ValueError: bad row ' || (g % 13) END "
        f"FROM generate_series(1, {rows}) g")
    await db.execute("ANALYZE dl_jobs")


@pytest.fixture
async def big(db):
    await fill(db, ROWS)
    yield db, datetime.now(UTC)


@pytest.fixture
async def medium(db):
    """Enough rows for many pages, without the million the plans need."""
    await fill(db, 60_000)
    yield db, datetime.now(UTC)


def nodes(plan: dict) -> list[dict]:
    found = [plan]
    for child in plan.get("Plans", []):
        found.extend(nodes(child))
    return found


async def explain(pool, name: str, *args: object) -> list[dict]:
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(sql("search/custom_plans"))
        raw = await conn.fetchval("EXPLAIN (FORMAT JSON) " + sql(name), *args)
    data = json.loads(raw) if isinstance(raw, str) else raw
    return nodes(data[0]["Plan"])


def page_args(f: JobFilter, limit: int = 101, before=(None, None)) -> tuple:
    return (*filter_params(f), *before, limit)


def job_scans(plan: list[dict]) -> list[tuple[str, str | None]]:
    return [(n["Node Type"], n.get("Index Name")) for n in plan if n.get("Relation Name") == "dl_jobs"]


def assert_filter_range(plan: list[dict], status: str) -> None:
    """Either an ordered page (as below), or dl_jobs read only through index ranges bounded by the
    filter's status (and queue), sorted: the cost is the filter's own matches, never the table.
    Which of the two the planner takes depends on how many rows it expects; both are bounded."""
    scans = job_scans(plan)
    assert scans and all(kind != "Seq Scan" for kind, _ in scans), scans
    conds = [n.get("Index Cond", "") for n in plan if n.get("Index Name", "").startswith(("ix_dl_jobs", "dl_jobs"))]
    assert conds and all(f"status = '{status}'" in c for c in conds), conds
    assert plan[0]["Node Type"] == "Limit", plan[0]


def assert_ordered_page(plan: list[dict], index: str) -> None:
    """A Limit on top, dl_jobs read only by an (ordered) index scan of `index`, and no Sort: the
    page costs its own rows, whatever the table holds."""
    assert plan[0]["Node Type"] == "Limit", plan[0]
    assert not any(n["Node Type"] == "Sort" for n in plan), plan
    scans = job_scans(plan)
    assert scans and all(kind in ("Index Scan", "Index Only Scan") and name == index for kind, name in scans), scans


@pytest.mark.slow  # a million rows to insert and analyze
async def test_search_plans_on_a_million_jobs(big):
    pool, _ = big
    week_ago = datetime.now(UTC) - timedelta(days=7)
    # the 3 a.m. query: failed jobs of one queue with an error pattern, newest first
    failed = JobFilter(statuses=["failed"], queues=["q3"], error="ValueError*")
    assert_filter_range(await explain(pool, "search/jobs", *page_args(failed)), "failed")
    # every failed job, newest first: an ordered walk of the partial index that stops at the page
    every_failed = JobFilter(statuses=["failed"])
    assert_ordered_page(await explain(pool, "search/jobs", *page_args(every_failed)), "ix_dl_jobs_trouble")
    # the next page: the cursor is part of the index condition, not a filter over skipped rows
    cursor = (datetime.now(UTC) - timedelta(hours=1), "00000000-0000-0000-0000-000000000000")
    plan = await explain(pool, "search/jobs", *page_args(every_failed, before=cursor))
    assert_ordered_page(plan, "ix_dl_jobs_trouble")
    cond = next(n["Index Cond"] for n in plan if n.get("Index Name") == "ix_dl_jobs_trouble")
    assert "created_at" in cond and "job_id" in cond, cond
    # lost jobs created in the last week (a range inside the same index)
    lost = JobFilter(statuses=["lost"], created_from=week_ago)
    assert_ordered_page(await explain(pool, "search/jobs", *page_args(lost)), "ix_dl_jobs_trouble")
    # args, error and lock_key filters are not indexed (a GIN index on args would cost every
    # enqueue): with a trouble status they are filters on that index's walk
    by_args = JobFilter(statuses=["failed"], args_contains={"customer": "c3"})
    assert_filter_range(await explain(pool, "search/jobs", *page_args(by_args)), "failed")

    # counts of trouble statuses read the status's index range (trouble, or the spec's (status, queue)),
    # never the whole table
    for f in (failed, JobFilter(statuses=["failed", "lost"])):
        plan = await explain(pool, "search/count", *filter_params(f), None)
        scans = job_scans(plan) + [(n["Node Type"], n.get("Index Name")) for n in plan
                                   if n["Node Type"] == "Bitmap Index Scan"]
        assert scans and not any(kind == "Seq Scan" for kind, _ in scans), scans
        assert {name for _, name in scans} <= {"ix_dl_jobs_trouble", "ix_dl_jobs_status_queue", None}, scans

    # the bulk batch: next ids after the cursor, oldest first, by the same index ...
    plan = await explain(pool, "operations/batch_ids", *filter_params(every_failed), datetime.now(UTC),
                         None, None, 500)
    assert_ordered_page(plan, "ix_dl_jobs_trouble")
    # ... and after a cursor, the cursor is in the index condition
    plan = await explain(pool, "operations/batch_ids", *filter_params(every_failed), datetime.now(UTC), *cursor, 500)
    assert_ordered_page(plan, "ix_dl_jobs_trouble")
    # ... or, with a queue too, the planner may read that status and queue's range and sort it:
    # bounded by the filter's own matches, never by the table
    assert_filter_range(await explain(pool, "operations/batch_ids", *filter_params(failed), datetime.now(UTC),
                                      None, None, 500), "failed")
    # several statuses, or none: the (created_at, job_id) index in page order
    for f in (JobFilter(statuses=["failed", "lost"]), JobFilter(queues=["q2"])):
        assert_ordered_page(await explain(pool, "search/jobs", *page_args(f)), "ix_dl_jobs_created")


async def test_search_answers_match_the_filter(medium, app_on_db):
    pool, _ = medium
    app = app_on_db
    page = await app.search({"statuses": ["failed"], "queues": ["q3"], "error": "valueerror: bad row 1?"},
                            limit=50, count=True)
    assert len(page.jobs) == 50 and page.next_cursor
    assert all(j.status == "failed" and j.queue == "q3" and j.error.startswith("ValueError: bad row 1")
               and len(j.error) == len("ValueError: bad row 10") for j in page.jobs)
    expected = await pool.fetchval(
        "SELECT count(*) FROM dl_jobs WHERE status = 'failed' AND queue = 'q3' "
        "AND error ~ '^ValueError: bad row 1[0-9]$'")
    assert page.count == expected > 50
    seen = [j.id for j in page.jobs]
    cursor = page.next_cursor
    while cursor:
        more = await app.search({"statuses": ["failed"], "queues": ["q3"], "error": "valueerror: bad row 1?"},
                                limit=500, cursor=cursor)
        seen += [j.id for j in more.jobs]
        cursor = more.next_cursor
    assert len(seen) == len(set(seen)) == expected
    by_args = await app.search({"args_path": '$.customer ? (@ == "c42")', "lock_key_prefix": "k1"}, count=True)
    assert by_args.count == await pool.fetchval(
        "SELECT count(*) FROM dl_jobs WHERE args->>'customer' = 'c42' AND lock_key LIKE 'k1%'")
