"""No request can hurt the node, round two (issue 35): what an attacker from outside found after
issue 26's limits. The console's requests get the API's body time limit and are cancelled with
their queries when the browser leaves; a request whose client left is counted as 499 at info
level, never as the server's 500 or 503.

Slow queries wait on a lock, as in test_request_limits.py: another session holds dl_jobs in
ACCESS EXCLUSIVE mode, so a search runs exactly as long as the test wants, on any machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import asyncpg
import httpx
import pytest
from fastapi import FastAPI

from dataloader import metrics
from dataloader.api import create_app
from dataloader.api.middleware import ApiGuardMiddleware, RequestContextMiddleware
from dataloader.api.v1.exceptions import install_exception_handlers
from dataloader.app import App
from dataloader.exceptions import InvalidJobRequest, InvalidProcessRequest
from dataloader.model.process import MAX_EVENT_ID, HistoryRange
from tests.api.test_request_limits import _call, _scope, api_node, jobs_locked, running_searches
from tests.api.v1.conftest import client_for
from tests.conftest import wait_until


def _get_scope(path: str, query: str = "") -> dict:
    scope = _scope(path, b"")
    scope.update(method="GET", query_string=query.encode(), headers=[(b"host", b"t")])
    return scope


def _status(sent: list[dict]) -> int | None:
    return next((m["status"] for m in sent if m["type"] == "http.response.start"), None)


def _counted(method: str, route: str, status: int) -> float:
    return metrics.HTTP_REQUESTS.labels(method, route, str(status))._value.get()


class _Hangup:
    """An ASGI receive: the request's body, then nothing until `leave()`, then http.disconnect."""

    def __init__(self, body: bytes = b"") -> None:
        self.body = body
        self.delivered = False
        self.gone = asyncio.Event()

    def leave(self) -> None:
        self.gone.set()

    async def __call__(self) -> dict:
        if not self.delivered:
            self.delivered = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}


async def test_a_console_body_that_never_arrives_is_a_408(db: asyncpg.Pool, dsn: str) -> None:
    # Before: the console was outside the body time limit, and this call never ended (the issue's
    # attacker held the connection past 300 s; here wait_for gave up after 5 s).
    async with api_node(dsn, api_body_timeout_sec=0.3) as (_, api):
        parts = [{"type": "http.request", "body": b"token=", "more_body": True}]

        async def receive() -> dict:
            if parts:
                return parts.pop()
            await asyncio.Event().wait()  # the rest of the declared Content-Length never comes
            raise AssertionError("unreachable")

        scope = _scope("/ui/login", b"x" * 1000)
        scope["headers"] = [(b"host", b"t"), (b"content-type", b"application/x-www-form-urlencoded"),
                            (b"content-length", b"1000")]
        sent = await asyncio.wait_for(_call(create_app(api.settings, context=api), scope, receive), 5)
        start = next(m for m in sent if m["type"] == "http.response.start")
        assert start["status"] == 408
        assert (b"connection", b"close") in start["headers"]


async def test_a_console_search_is_cancelled_with_its_query_when_the_browser_leaves(
        db: asyncpg.Pool, dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    # Before: the console's search went on in PostgreSQL after the browser left (the wait for
    # "the search's query cancelled" timed out with the query still active), holding an
    # expensive slot, and the request ended as a 500 for the metrics.
    route = "/ui/jobs"
    before = (_counted("GET", route, 499), _counted("GET", route, 500))
    async with api_node(dsn, api_statement_timeout_sec=60) as (_, api), jobs_locked(dsn):
        hangup = _Hangup()
        request = asyncio.create_task(_call(create_app(api.settings, context=api),
                                            _get_scope(route, "error=*boom*"), hangup))
        await wait_until(lambda: _searching(db, 1), timeout=10, message="the console's search running")
        caplog.set_level(logging.INFO)
        hangup.leave()
        sent = await asyncio.wait_for(request, 5)
        assert _status(sent) is None
        await wait_until(lambda: _searching(db, 0), timeout=5, message="the search's query cancelled")
        assert api._managers.expensive is not None and api._managers.expensive.running == 0  # its slot given back
    assert (_counted("GET", route, 499), _counted("GET", route, 500)) == (before[0] + 1, before[1])
    access = [r for r in caplog.records if r.name == "dataloader.access"]
    assert [(r.levelno, r.status) for r in access] == [(logging.INFO, 499)]  # type: ignore[attr-defined]


async def _searching(pool: asyncpg.Pool, n: int) -> bool:
    return await running_searches(pool) == n


async def test_an_api_request_whose_client_left_counts_499_at_info(
        db: asyncpg.Pool, dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    # Before: 500 in dl_http_requests_total (the request was cancelled before any status was
    # sent) and the access line at ERROR level.
    route = "/api/v1/search"
    before = (_counted("POST", route, 499), _counted("POST", route, 500))
    async with api_node(dsn, api_statement_timeout_sec=60) as (_, api), jobs_locked(dsn):
        body = json.dumps({"count": True}).encode()
        hangup = _Hangup(body)
        request = asyncio.create_task(_call(create_app(api.settings, context=api), _scope(route, body), hangup))
        await wait_until(lambda: _searching(db, 1), timeout=10, message="the search running")
        caplog.set_level(logging.INFO)
        hangup.leave()
        await asyncio.wait_for(request, 5)
    assert (_counted("POST", route, 499), _counted("POST", route, 500)) == (before[0] + 1, before[1])
    access = [r for r in caplog.records if r.name == "dataloader.access"]
    assert [(r.levelno, r.status) for r in access] == [(logging.INFO, 499)]  # type: ignore[attr-defined]


@pytest.mark.parametrize("raised", [asyncpg.exceptions.ConnectionDoesNotExistError("connection is closed"),
                                    asyncpg.exceptions.InterfaceError("connection is closed")])
async def test_a_connection_closed_by_the_cancel_of_a_gone_client_is_499_not_503(
        raised: Exception, caplog: pytest.LogCaptureFixture) -> None:
    # What asyncpg may raise instead of CancelledError when a request is cancelled mid-statement
    # (the pool's release of the interrupted connection). Before: a 503 `database_unavailable`
    # counted and logged as a WARNING "database unavailable ... connection is closed".
    app = FastAPI()
    install_exception_handlers(app)
    reached = asyncio.Event()

    @app.post("/api/v1/slow")
    async def slow() -> None:
        reached.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise raised from None

    guarded = RequestContextMiddleware(ApiGuardMiddleware(app, max_body_bytes=1000))
    before = (_counted("POST", "/api/v1/slow", 499), _counted("POST", "/api/v1/slow", 503))
    caplog.set_level(logging.INFO)
    hangup = _Hangup(b"{}")
    request = asyncio.create_task(_call(guarded, _scope("/api/v1/slow", b"{}"), hangup))
    await asyncio.wait_for(reached.wait(), 5)
    hangup.leave()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(request, 5)
    assert (_counted("POST", "/api/v1/slow", 499), _counted("POST", "/api/v1/slow", 503)) == (before[0] + 1,
                                                                                            before[1])
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.records


def _nested(levels: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


DEEP = _nested(300)


@pytest.mark.parametrize(("method", "path", "payload"), [
    ("POST", "/api/v1/search", {"args_contains": DEEP}),
    ("POST", "/api/v1/search", {"args_contains": DEEP, "count": True}),
    ("POST", "/api/v1/operations", {"kind": "requeue", "dry_run": True, "filter": {"args_contains": DEEP}}),
    ("POST", "/api/v1/operations", {"kind": "cancel", "filter": {"args_contains": DEEP}}),
    ("GET", "/ui/jobs", {"args_contains": json.dumps(DEEP)}),
    ("GET", "/ui/jobs/count", {"args_contains": json.dumps(DEEP)}),
])
async def test_a_filter_nested_past_the_args_rule_is_422_before_any_query(
        db: asyncpg.Pool, http: httpx.AsyncClient, method: str, path: str, payload: dict) -> None:
    # Before: 500 internal_error, "Maximum serialization depth exceeded" in JobFilter.describe()
    # after the search had run (the console's count fragment ran the filter and answered 200).
    operations = await db.fetchval("SELECT count(*) FROM dl_operations")
    if method == "GET":
        answer = await http.get(path, params=payload)
    else:
        answer = await http.post(path, json=payload)
    assert answer.status_code == 422, answer.text[:500]
    assert "nests deeper than 64 levels" in answer.text
    assert await db.fetchval("SELECT count(*) FROM dl_operations") == operations


async def test_a_filter_one_level_inside_the_rule_still_runs(db: asyncpg.Pool, http: httpx.AsyncClient) -> None:
    answer = await http.post("/api/v1/search", json={"args_contains": _nested(64)})
    assert answer.status_code == 200, answer.text[:500]
    assert answer.json()["filter"]["args_contains"] == _nested(64)


async def test_every_face_refuses_a_filter_nested_too_deep(db: asyncpg.Pool, hardening_ctx: App) -> None:
    with pytest.raises(InvalidJobRequest, match="nests deeper than 64 levels"):
        await hardening_ctx.search({"args_contains": DEEP})
    with pytest.raises(InvalidJobRequest, match="nests deeper than 64 levels"):
        await hardening_ctx.operations.start("requeue", {"args_contains": DEEP}, dry_run=True)
    with pytest.raises(InvalidJobRequest, match="nests deeper than 64 levels"):
        await hardening_ctx.count_jobs({"args_contains": DEEP})


@pytest.mark.parametrize(("payload", "field", "why"), [
    # Before: 1 and "false" were read as true and false (dry_run refuses them).
    ({"held": 1}, "held", "boolean"),
    ({"held": "false"}, "held", "boolean"),
    ({"held": "true"}, "held", "boolean"),
    # Before: 1.8e-294 was Unix seconds, 1970-01-01: "created before 1970" (or after) in a real operation.
    ({"created_to": 1.8e-294}, "created_to", "not a number"),
    ({"created_from": 0}, "created_from", "not a number"),
    ({"finished_to": "1700000000"}, "finished_to", "not a number"),
])
async def test_held_is_strict_and_a_time_is_never_a_number(db: asyncpg.Pool, http: httpx.AsyncClient,
                                                           hardening_ctx: App, payload: dict, field: str,
                                                           why: str) -> None:
    await db.execute("INSERT INTO dl_jobs (job_id, queue, task, lock_key, status) "
                     "VALUES (gen_random_uuid(), 'q', 't', 'k', 'failed')")
    operations = await db.fetchval("SELECT count(*) FROM dl_operations")
    searched = await http.post("/api/v1/search", json=payload)
    started = await http.post("/api/v1/operations", json={"kind": "delete", "filter": payload})
    for answer in (searched, started):
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"] == "validation_error" and field in answer.text and why in answer.text
    assert await db.fetchval("SELECT count(*) FROM dl_operations") == operations
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == 1
    with pytest.raises(InvalidJobRequest):
        await hardening_ctx.search(payload)


STREAMS = 30


async def _sessions(pool: asyncpg.Pool) -> tuple[int, int]:
    """(every session of the test database but this one, the listening ones: those whose last
    statement was a LISTEN, an UNLISTEN or the listener's probe — a listening session only ever
    runs those, and which came last depends on when the node's duties subscribed or the probe ran)."""
    row = await pool.fetchrow(
        "SELECT count(*) AS total, count(*) FILTER (WHERE query ILIKE 'LISTEN%' OR query ILIKE 'UNLISTEN%' "
        "OR query ILIKE '%Probe of the LISTEN connection%') AS feed "
        "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
    return row["total"], row["feed"]


async def test_held_feed_streams_share_one_listening_session(db: asyncpg.Pool, dsn: str, ns: str) -> None:
    # Before: each stream opened a session of its own: 30 held streams were 30 more sessions (the
    # issue's 50 -> 80; with 100, "too many clients already"), 30 of them listening.
    from tests.processes.processors import register

    register(ns)
    _, listening_before = await _sessions(db)  # other tests' Apps on this database may listen too
    async with api_node(dsn, api_pool_size=3, api_max_expensive_queries=2) as (engine, api), engine.running():
        app = create_app(api.settings, context=api)
        await api.processes.init(ns, "p1", {})
        leaving: list[_Hangup] = []
        streams: list[tuple[asyncio.Task, list[dict]]] = []

        async def open_stream() -> None:
            hangup = _Hangup()
            sent: list[dict] = []

            async def send(message: dict) -> None:
                sent.append(message)

            scope = _get_scope(f"/api/v1/processes/{ns}/events/stream", "max_sec=60")
            streams.append((asyncio.create_task(app(scope, hangup, send)), sent))
            leaving.append(hangup)

        def items(sent: list[dict]) -> bytes:
            return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")

        try:
            await open_stream()
            await wait_until(lambda: b"event: init" in items(streams[0][1]), timeout=10, message="the first stream")
            total_one, listening_one = await _sessions(db)
            for _ in range(STREAMS - 1):
                await open_stream()
            await wait_until(lambda: all(b"event: init" in items(sent) for _, sent in streams), timeout=20,
                             message="every stream following")
            total, listening = await _sessions(db)
            # One listening session for the node, whatever the streams; the rest is the API's pool
            # (3 connections at most) reading pages for them, and room for the engine's own work
            # meanwhile (its pool may open a connection or two): far below one session per stream.
            assert listening_one - listening_before == listening - listening_before == 1
            assert total <= total_one + 3 + 4, (total_one, total)
            assert api.processes.waiter.feed_followers == STREAMS
            # Every stream still hears new rows at once.
            await api.processes.call(ns, "p1", {})
            await wait_until(lambda: all(b"event: event" in items(sent) for _, sent in streams), timeout=10,
                             message="every stream told of the call's event")
        finally:
            for hangup in leaving:
                hangup.leave()
            await asyncio.wait_for(asyncio.gather(*(task for task, _ in streams), return_exceptions=True), 10)
        assert api.processes.waiter.feed_followers == 0


async def test_an_offset_past_int32_is_read_and_one_past_the_bound_is_422(db: asyncpg.Pool, dsn: str, ns: str) -> None:
    # Before: a backward page from offset=305432586942480 reached PostgreSQL as an int4 parameter,
    # "out of int32 range": a 422 invalid_request from the database, not from validation.
    from tests.processes.processors import register

    register(ns)
    async with api_node(dsn) as (engine, api), engine.running(), \
            client_for(create_app(api.settings, context=api)) as http:
        await api.processes.init(ns, "p1", {})
        path = f"/api/v1/processes/{ns}/p1"
        for offset in (305432586942480, MAX_EVENT_ID):
            for direction in ("forward", "backward"):
                answer = await http.get(path, params={"offset": offset, "direction": direction, "limit": 5})
                assert answer.status_code == 200, answer.text
                assert len(answer.json()["history"]) == (1 if direction == "backward" else 0)
        past = await http.get(path, params={"offset": MAX_EVENT_ID + 1, "direction": "backward"})
        assert past.status_code == 422 and past.json()["error"] == "validation_error", past.text
        with pytest.raises(InvalidProcessRequest):
            await api.processes.call(ns, "p1", {}, range={"offset": MAX_EVENT_ID + 1})
        with pytest.raises(ValueError, match="offset"):
            HistoryRange(offset=2**63)


async def test_openapi_integer_bounds_are_the_exact_integers_the_server_enforces(db: asyncpg.Pool,
                                                                                 http: httpx.AsyncClient) -> None:
    # Before: every component's integer bound was a float (2147483647.0), and 2^62 - 1 read
    # 4.611686018427388e+18: as a decimal, above the bound the server enforces.
    schema = (await http.get("/openapi.json")).json()
    raw = (await http.get("/openapi.json")).text
    assert "e+18" not in raw
    floats: list[str] = []

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            if node.get("type") == "integer":
                floats.extend(f"{where}.{k}" for k in ("maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum")
                              if isinstance(node.get(k), float))
            for key, value in node.items():
                walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")

    walk(schema, "")
    assert floats == []
    components = schema["components"]["schemas"]
    assert components["RangeBody"]["properties"]["offset"]["maximum"] == MAX_EVENT_ID
    assert components["PutEvent"]["properties"]["event_id"]["anyOf"][0]["maximum"] == MAX_EVENT_ID
    assert components["TriggerRequest"]["properties"]["priority"]["maximum"] == 2**31 - 1
    offset = next(p for p in schema["paths"]["/api/v1/processes/{ns}/{id}"]["get"]["parameters"]
                  if p["name"] == "offset")
    assert offset["schema"]["maximum"] == MAX_EVENT_ID


@pytest.mark.parametrize(("path", "allowed"), [
    ("/api/v1/jobs/trigger", {"POST"}),
    ("/api/v1/jobs/batch", {"POST"}),
    ("/api/v1/jobs", {"GET"}),
    ("/api/v1/jobs/7c3e0c8a-3c7e-4a39-9d3b-2d1a1f0e0e0e", {"PATCH", "DELETE"}),
    ("/api/v1/search", {"POST"}),
])
async def test_options_answers_the_methods_of_the_path(db: asyncpg.Pool, http: httpx.AsyncClient, path: str,
                                                       allowed: set[str]) -> None:
    # Before: OPTIONS was a 405, and /api/v1/jobs/trigger listed DELETE and PATCH (the methods of
    # /api/v1/jobs/{job_id}, whose job_id "trigger" can never be).
    answer = await http.options(path)
    assert answer.status_code == 204, answer.text
    assert {m.strip() for m in answer.headers["allow"].split(",")} == allowed | {"OPTIONS"}
    wrong = await http.put(path)
    assert wrong.status_code == 405
    assert {m.strip() for m in wrong.headers["allow"].split(",")} == allowed | {"OPTIONS"}


async def test_a_process_call_on_a_paused_queue_is_refused_at_once(db: asyncpg.Pool, dsn: str, ns: str) -> None:
    # Before: the call waited its whole timeout (30 s by default) for a task no worker could
    # start, then a 504 process_timeout, its task left queued.
    from dataloader.exceptions import QueuePaused
    from dataloader.processes.registry import queue_of
    from tests.processes.processors import register

    register(ns)
    async with api_node(dsn) as (engine, api), engine.running(), \
            client_for(create_app(api.settings, context=api)) as http:
        await api.processes.init(ns, "p1", {})
        loop = asyncio.get_running_loop()
        for paused in (f"/api/v1/queues/{queue_of(ns)}/pause",
                       f"/api/v1/queues/{queue_of(ns)}/pause?task=dl.process"):
            assert (await http.post(paused)).status_code == 200
            tasks = await db.fetchval("SELECT count(*) FROM dl_process_tasks WHERE ns = $1", ns)
            started = loop.time()
            call = await http.post(f"/api/v1/processes/{ns}/p1/call", json={"args": {}, "timeout_sec": 20})
            init = await http.post(f"/api/v1/processes/{ns}", json={"id": "p2", "args": {}, "timeout_sec": 20})
            assert loop.time() - started < 5
            for answer in (call, init):
                assert answer.status_code == 409, answer.text
                assert answer.json()["error"] == "queue_paused" and "paused" in answer.json()["detail"]
            with pytest.raises(QueuePaused) as refused:
                await api.processes.call(ns, "p1", {}, timeout=20)
            assert refused.value.queue == queue_of(ns)
            # Nothing was written: no task, no job, no process p2.
            assert await db.fetchval("SELECT count(*) FROM dl_process_tasks WHERE ns = $1", ns) == tasks
            assert await db.fetchval("SELECT count(*) FROM dl_processes WHERE ns = $1 AND id = 'p2'", ns) == 0
            # The other refusals keep their codes; resumed, the call runs.
            missing = await http.post(f"/api/v1/processes/{ns}/nobody/call", json={"args": {}})
            assert missing.status_code == 404 and missing.json()["error"] == "process_not_found"
            resume = paused.replace("/pause", "/resume")
            assert (await http.post(resume)).status_code == 200
            ran = await http.post(f"/api/v1/processes/{ns}/p1/call", json={"args": {}, "timeout_sec": 20})
            assert ran.status_code == 200, ran.text


async def test_a_follower_left_over_never_reopens_a_closed_apps_listener(db: asyncpg.Pool, dsn: str) -> None:
    # A stream still open as its App closes (a shutdown's grace period) asks the listener to start
    # again when it finds it down; a closed App's listener stays closed (no session opened for nobody).
    from dataloader.processes.waiter import TaskWaiter

    waiter = TaskWaiter(dsn)
    await waiter.start()
    assert waiter.listening
    await waiter.close()
    await waiter.start()
    assert not waiter.listening
