"""Hostile load (issue 26): many concurrent worst-case searches, the kind a filter can still express
after validation (a 10-star glob over every error text, a recursive jsonpath regex over every
args, each with a count), against a seeded table, while this node's workers drain a queue and an
observer runs. Before the API had its own pool and limits, a dozen such searches made /status
answer 503 and the node's heartbeat fail, so the node stopped its observers.

Run against the engine App itself (no API pool, no limits, as before), this test fails: the node
heartbeat falls 5 s behind and crashes (NodeLost), the node stops being live, /status answers 503
and a search takes 15 s.

Checked: the drain keeps going during the burst and finishes; /status stays 200; the node's
heartbeat is never older than its bound (DL_NODE_DEAD_AFTER_SEC); the observer keeps running on
this node (same epoch) and no background duty crashes; every search ends by its time limit with a
clear answer (200, or 503 `query_timeout`), the ones past the cap at once with 429.

The suite's run seeds 60,000 rows and sends 30 searches (~20 s). The issue's size, as a documented
long run (longer: seeding and every scan grow with the rows; not timed here):

    DL_HOSTILE_ROWS=300000 DL_HOSTILE_SEARCHES=60 .venv/bin/python -m pytest -q tests/api/test_hostile_load.py
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time

import asyncpg
import httpx
import pytest

import tests.support.observers  # noqa: F401  (registers the test.* observer kinds)
from dataloader.api import create_app
from dataloader.app import App
from dataloader.model.observer import ObserverState
from tests.api.v1.conftest import api_settings, client_for
from tests.conftest import wait_until

ROWS = int(os.environ.get("DL_HOSTILE_ROWS", "60000"))
SEARCHES = int(os.environ.get("DL_HOSTILE_SEARCHES", "30"))
DRAIN_JOBS = 300
# The API's statement timeout: half of what one hostile scan takes alone on this machine (measured
# first), so the searches reach it on a fast machine too; at most 0.5 s, at least 0.1 s.
MAX_STATEMENT_TIMEOUT_SEC = 0.5
DEAD_AFTER_SEC = 3.0
# A search is two statements (the page and the count), each bounded by the timeout; the rest is
# this loaded 2-core machine's scheduling.
SEARCH_BOUND_SEC = 2 * MAX_STATEMENT_TIMEOUT_SEC + 3.0

SEED = """
INSERT INTO dl_jobs (job_id, queue, task, lock_key, status, attempt, error, args, created_at, finished_at)
SELECT gen_random_uuid(), 'seeded', 'load.rows', 'seed-' || n, 'failed', 5,
       'Traceback (most recent call last): ' || repeat('File "/srv/app/load.py", line 42, in load_rows ', 12) || n,
       jsonb_build_object('rows', n, 'source', jsonb_build_object('name', 'abcdefghij' || n, 'tags',
                          jsonb_build_array('alpha', 'beta', 'gamma' || n))),
       now() - interval '2 hours', now() - interval '1 hour'
FROM generate_series(1, $1::int) AS n
"""
HOSTILE = [
    {"error": "*a*b*c*d*e*f*g*h*i*Z", "count": True},
    {"args_path": '$.** ? (@ like_regex "a.*b.*c.*d.*e.*f.*g.*h.*z" flag "i")', "count": True},
    {"statuses": ["failed"], "error": "*?*?*?*?*?*?*?*?*?*?*?*?*?*?*?*?*?*?*?*?Z", "count": True},
]
TABLES = "dl_jobs, dl_job_events, dl_observers, dl_nodes"


@pytest.mark.slow  # seeds 60,000 rows and runs 30 worst-case scans: a load test
# alone on the machine: it proves the node's own limits keep its heartbeat going under its own API's
# worst load; three other test workers saturating the 2 cores starved a heartbeat past its 2 s fence
@pytest.mark.exclusive
async def test_worst_case_searches_cannot_stall_the_node(pool: asyncpg.Pool, dsn: str) -> None:
    await pool.execute(f"TRUNCATE {TABLES} CASCADE")
    await pool.execute(SEED, ROWS)
    await pool.execute("ANALYZE dl_jobs")
    started = time.perf_counter()
    await pool.fetchval("SELECT count(*) FROM dl_jobs WHERE error ILIKE $1", "%a%b%c%d%e%f%g%h%i%Z")
    timeout = min(MAX_STATEMENT_TIMEOUT_SEC, max(0.1, (time.perf_counter() - started) / 2))
    settings = api_settings(
        dsn, workers_json='[{"queue": "drain", "concurrency": 4}]', node_name="hostile",
        node_heartbeat_sec=0.5, node_dead_after_sec=DEAD_AFTER_SEC, observer_capacity=2,
        observer_stop_grace_sec=0.5, retention_enabled=False, stats_enabled=False,
        api_pool_size=8, api_max_expensive_queries=4, api_statement_timeout_sec=timeout,
        api_count_timeout_sec=timeout)
    engine = await App(settings).open()
    try:
        async with engine.running() as manager:
            api = await engine.api_app()
            try:
                async with client_for(create_app(settings, context=api, manager=manager)) as http:
                    await _burst(engine, manager, http, pool, dsn)
            finally:
                await api.close()
    finally:
        await engine.close()
        await pool.execute(f"TRUNCATE {TABLES} CASCADE")


async def _burst(engine: App, manager, http: httpx.AsyncClient, pool: asyncpg.Pool, dsn: str) -> None:
    watch = await engine.observers.create(engine.observers.spec(name="hostile-watch", kind="test.stubborn"))
    await wait_until(lambda: _processing(engine, watch.name), timeout=15, message="the observer running")
    epoch = (await engine.observers.get(watch.name)).epoch
    await engine.enqueue_many([{"task": "dl.sleep", "queue": "drain", "args": {"seconds": 0.05, "chunks": 1}}
                               for _ in range(DRAIN_JOBS)])

    done = asyncio.Event()
    heartbeat_ages: list[float] = []
    statuses: list[tuple[int, str | None]] = []

    async def heartbeat_monitor() -> None:
        # Its own connection: what another node sees of this one.
        conn = await asyncpg.connect(dsn)
        try:
            while not done.is_set():
                heartbeat_ages.append(await conn.fetchval(
                    "SELECT extract(epoch FROM clock_timestamp() - heartbeat_at)::float8 FROM dl_nodes "
                    "WHERE name = 'hostile' AND state = 'live'"))
                await asyncio.sleep(0.1)
        finally:
            await conn.close()

    async def status_monitor() -> None:
        while not done.is_set():
            answer = await http.get("/status")
            statuses.append((answer.status_code, answer.json()["database"].get("error")))
            await asyncio.sleep(0.2)

    async def searcher(n: int) -> tuple[int, str | None, float, int]:
        refused = 0
        while True:
            started = time.perf_counter()
            answer = await http.post("/api/v1/search", json=HOSTILE[n % len(HOSTILE)])
            took = time.perf_counter() - started
            if answer.status_code != 429:
                error = answer.json().get("error") if answer.status_code != 200 else None
                return answer.status_code, error, took, refused
            # refused at once, not queued behind the running searches; the bound leaves room for a
            # loaded 2-core machine (CI runs four test workers), where the answer alone took 2.5 s
            assert answer.json()["error"] == "too_many_queries" and took < 5.0
            refused += 1
            await asyncio.sleep(0.05)  # an impatient client: Retry-After is 1 s

    monitors = [asyncio.create_task(heartbeat_monitor()), asyncio.create_task(status_monitor())]
    drained_before = await _succeeded(pool)
    answers = await asyncio.gather(*(searcher(n) for n in range(SEARCHES)))
    drained_during = await _succeeded(pool) - drained_before
    await wait_until(lambda: _all_drained(pool), timeout=120, message="the drain finished")
    done.set()
    await asyncio.gather(*monitors)

    # The node first: what a request must never take from it.
    assert heartbeat_ages and None not in heartbeat_ages, "the node was not live throughout"
    assert max(heartbeat_ages) < DEAD_AFTER_SEC, f"heartbeat {max(heartbeat_ages):.2f} s old"
    crashed = [(s.name, s.restarts, s.last_error) for s in manager.services_status() if s.restarts or s.last_error]
    assert not crashed, crashed
    observer = await engine.observers.get(watch.name)
    assert (observer.state, observer.node, observer.epoch) == (ObserverState.PROCESSING, "hostile", epoch)
    # Readiness is never taken from the node: before the API had its own pool, /status answered 503
    # for the whole burst. One probe past its 2 s bound, alone between answers of 200, was seen
    # once in a full-suite run on this 2-core VM (the test alone, and beside three CPU hogs, never):
    # a stall of the machine, not of the node; a readiness probe takes a node out only after
    # consecutive failures (Kubernetes: failureThreshold 3), so two in a row fail this test.
    codes = [code for code, _ in statuses]
    assert 200 in codes and all(a == 200 or b == 200 for a, b in itertools.pairwise(codes)), statuses
    # A lone probe past its bound ends either way: the probe's own deadline (TimeoutError) or the
    # server's statement_timeout under the same stall (seen once in a full-suite run).
    timeouts = {"TimeoutError", "QueryCanceledError: canceling statement due to statement timeout"}
    assert {error for code, error in statuses if code != 200} <= timeouts, statuses
    assert drained_during > 0, "no job finished while the searches ran"
    # Then the searches: each ended by its limits, with a clear answer.
    outcomes = sorted({(status, error) for status, error, _, _ in answers}, key=str)
    assert set(outcomes) <= {(200, None), (503, "query_timeout")}, outcomes
    assert (503, "query_timeout") in outcomes, "no search reached its time limit: the load was not hostile"
    slowest = max(took for _, _, took, _ in answers)
    assert slowest < SEARCH_BOUND_SEC, f"a search took {slowest:.2f} s, past its limits"
    assert sum(refused for *_, refused in answers) > 0, "the cap on expensive queries never engaged"
    await engine.observers.stop(watch.name, wait=10)


async def _processing(engine: App, name: str) -> bool:
    return (await engine.observers.get(name)).state is ObserverState.PROCESSING


async def _succeeded(pool: asyncpg.Pool) -> int:
    return await pool.fetchval("SELECT count(*) FROM dl_jobs WHERE queue = 'drain' AND status = 'succeeded'")


async def _all_drained(pool: asyncpg.Pool) -> bool:
    return await _succeeded(pool) == DRAIN_JOBS
