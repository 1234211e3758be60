"""No request can hurt the node (issue 26): the API runs on its own pool with bounded statements,
a request whose client left is cancelled with its query, expensive queries are capped per node,
a body that never arrives is a 408, and filters that could run for minutes are refused up front.

A slow query here is one that waits for a lock: another session holds dl_jobs in ACCESS EXCLUSIVE
mode, so every search waits exactly as long as the test wants, on any machine, without seeding.
(tests/api/test_hostile_load.py runs genuinely expensive searches against a seeded table.)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import asyncpg
import httpx
import pytest
import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from dataloader.api import create_app
from dataloader.api.server import head_timeout_protocol
from dataloader.app import App
from tests.api.v1.conftest import api_settings, client_for
from tests.conftest import wait_until

# pg_stat_activity keeps the first 1 kB of a statement: its header comment names it.
SEARCH_SQL_MARK = "Search jobs by the operator's filter"


@asynccontextmanager
async def api_node(dsn: str, **settings: object) -> AsyncIterator[tuple[App, App]]:
    """An engine App and the App that serves its HTTP requests (as `dataloader serve` builds them)."""
    engine = await App(api_settings(dsn, **settings)).open()
    try:
        api = await engine.api_app()
        try:
            yield engine, api
        finally:
            await api.close()
    finally:
        await engine.close()


@asynccontextmanager
async def jobs_locked(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """dl_jobs locked against every reader until the block ends."""
    conn = await asyncpg.connect(dsn)
    try:
        tx = conn.transaction()
        await tx.start()
        await conn.execute("LOCK TABLE dl_jobs IN ACCESS EXCLUSIVE MODE")
        try:
            yield conn
        finally:
            await tx.rollback()
    finally:
        await conn.close()


async def running_searches(pool: asyncpg.Pool) -> int:
    return await pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' "
        "AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()", SEARCH_SQL_MARK)


async def test_the_api_has_its_own_pool_with_a_statement_timeout(db: asyncpg.Pool, dsn: str) -> None:
    async with api_node(dsn, api_pool_size=3, api_max_expensive_queries=2,
                        api_statement_timeout_sec=7) as (engine, api):
        assert api.pool is not engine.pool
        assert api.pool.get_max_size() == 3
        assert await api.pool.fetchval("SHOW statement_timeout") == "7s"
        assert await engine.pool.fetchval("SHOW statement_timeout") == "0"
        # Every API connection taken (a burst of slow requests): the engine's pool still answers.
        held = [await api.pool.acquire() for _ in range(3)]
        try:
            async with asyncio.timeout(2):
                assert await engine.pool.fetchval("SELECT 1") == 1
        finally:
            for conn in held:
                await api.pool.release(conn)


async def test_a_search_past_its_time_limit_is_a_clear_503_and_counts_have_their_own_limit(
        db: asyncpg.Pool, dsn: str) -> None:
    async with api_node(dsn, api_statement_timeout_sec=0.3, api_count_timeout_sec=0.6) as (_, api), \
            client_for(create_app(api.settings, context=api)) as http, jobs_locked(dsn):
        loop = asyncio.get_running_loop()
        started = loop.time()
        slow = await http.post("/api/v1/search", json={"queues": ["q"]})
        took = loop.time() - started
        assert slow.status_code == 503, slow.text
        assert slow.json()["error"] == "query_timeout"
        assert "DL_API_STATEMENT_TIMEOUT_SEC" in slow.json()["detail"]
        assert 0.25 < took < 3
        # An operation's dry run counts under DL_API_COUNT_TIMEOUT_SEC (here longer than the rest).
        started = loop.time()
        counted = await http.post("/api/v1/operations", json={"kind": "requeue", "dry_run": True,
                                                              "filter": {"statuses": ["failed"]}})
        took = loop.time() - started
        assert counted.status_code == 503 and counted.json()["error"] == "query_timeout", counted.text
        assert 0.55 < took < 3


async def test_expensive_queries_past_the_cap_are_429_and_cheap_requests_still_answer(
        db: asyncpg.Pool, dsn: str) -> None:
    async with api_node(dsn, api_pool_size=3, api_max_expensive_queries=2, api_statement_timeout_sec=5) as (_, api), \
            client_for(create_app(api.settings, context=api)) as http:
        async with jobs_locked(dsn):
            slow = [asyncio.create_task(http.post("/api/v1/search", json={"count": True}))
                    for _ in range(2)]
            await wait_until(lambda: _searches_waiting(db, 2), timeout=10, message="two searches running")
            refused = await http.post("/api/v1/search", json={})
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"] == "too_many_queries" and refused.headers["retry-after"] == "1"
            dry = await http.post("/api/v1/operations", json={"kind": "cancel", "dry_run": True, "filter": {}})
            assert dry.status_code == 429 and dry.json()["error"] == "too_many_queries"
            # Cheap requests keep the pool's last connection.
            ops = await http.get("/api/v1/operations")
            assert ops.status_code == 200, ops.text
        assert [r.status_code for r in await asyncio.gather(*slow)] == [200, 200]
        assert (await http.post("/api/v1/search", json={})).status_code == 200


async def _searches_waiting(pool: asyncpg.Pool, n: int) -> bool:
    return await running_searches(pool) >= n


async def _call(app: Callable[..., Awaitable[None]], scope: dict, receive: Callable[[], Awaitable[dict]]
                ) -> list[dict]:
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def _scope(path: str, body: bytes) -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": [(b"host", b"t"), (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())],
            "client": ("127.0.0.1", 1), "server": ("t", 80)}


async def test_a_client_that_hangs_up_cancels_its_request_and_its_query(db: asyncpg.Pool, dsn: str) -> None:
    async with api_node(dsn, api_statement_timeout_sec=60) as (_, api), jobs_locked(dsn):
        body = json.dumps({"count": True}).encode()
        gone = asyncio.Event()
        delivered = False

        async def receive() -> dict:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        request = asyncio.create_task(_call(create_app(api.settings, context=api), _scope("/api/v1/search", body),
                                            receive))
        await wait_until(lambda: _searches_waiting(db, 1), timeout=10, message="the search running")
        gone.set()
        # The request ends at once, and PostgreSQL no longer runs its query (60 s of timeout left).
        sent = await asyncio.wait_for(request, 5)
        assert not any(m["type"] == "http.response.start" and m["status"] == 200 for m in sent)
        await wait_until(lambda: _no_search(db), timeout=5, message="the search's query cancelled")


async def _no_search(pool: asyncpg.Pool) -> bool:
    return await running_searches(pool) == 0


async def test_a_body_that_never_arrives_is_a_408(db: asyncpg.Pool, dsn: str) -> None:
    async with api_node(dsn, api_body_timeout_sec=0.3) as (_, api):
        parts = [{"type": "http.request", "body": b'{"task": ', "more_body": True}]

        async def receive() -> dict:
            if parts:
                return parts.pop()
            await asyncio.Event().wait()  # the rest of the declared Content-Length never comes
            raise AssertionError("unreachable")

        scope = _scope("/api/v1/jobs/trigger", b"x" * 100)
        sent = await asyncio.wait_for(_call(create_app(api.settings, context=api), scope, receive), 5)
        start = next(m for m in sent if m["type"] == "http.response.start")
        assert start["status"] == 408
        assert (b"connection", b"close") in start["headers"]
        body = json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))
        assert body["error"] == "request_timeout"


@pytest.mark.parametrize(("where", "payload"), [
    ("search", {"args_path": "$ ? (@ == $var)"}),
    ("search", {"args_path": '$.a ? (@ == $"quoted var")'}),
    ("search", {"args_path": '$.** ? (@ like_regex "(.*a){25}c")', "count": True}),
    ("search", {"args_path": '$.a ? (@ like_regex "^(([a-z])+.)+[A-Z]([a-z])+$")'}),
    ("search", {"error": "*a" * 11}),
    ("operations", {"kind": "requeue", "dry_run": True, "filter": {"args_path": "$ ? (@ == $var)"}}),
    ("operations", {"kind": "requeue", "filter": {"args_path": '$ ? (@ like_regex "(a+)+")'}}),
])
async def test_filters_that_cannot_run_are_422_before_any_query(db: asyncpg.Pool, http: httpx.AsyncClient,
                                                                where: str, payload: dict) -> None:
    await db.execute("INSERT INTO dl_jobs (job_id, queue, task, lock_key, args) "
                     "VALUES (gen_random_uuid(), 'q', 't', 'k', '{\"a\": 1}')")
    operations = await db.fetchval("SELECT count(*) FROM dl_operations")
    answer = await http.post(f"/api/v1/{where}", json=payload)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] in ("invalid_request", "validation_error")
    assert await db.fetchval("SELECT count(*) FROM dl_operations") == operations


async def test_runs_of_wildcards_match_as_before(db: asyncpg.Pool, http: httpx.AsyncClient) -> None:
    await db.execute("INSERT INTO dl_jobs (job_id, queue, task, lock_key, status, error) "
                     "VALUES (gen_random_uuid(), 'q', 't', 'k1', 'failed', 'ab Z'), "
                     "(gen_random_uuid(), 'q', 't', 'k2', 'failed', 'aZ')")
    found = await http.post("/api/v1/search", json={"error": "*?*?*?Z"})
    assert found.status_code == 200, found.text
    assert [j["error"] for j in found.json()["jobs"]] == ["ab Z"]


async def test_a_request_head_that_never_completes_is_closed() -> None:
    async def hello(scope: dict, receive: Callable[[], Awaitable[dict]], send: Callable[[dict], Awaitable[None]]
                    ) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    config = uvicorn.Config(hello, host="127.0.0.1", port=0, lifespan="off", log_config=None,
                            http=head_timeout_protocol(AutoHTTPProtocol, 0.3))
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    try:
        await wait_until(lambda: server.started, timeout=10, message="the server started")
        port = server.servers[0].sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()

        # A head that stops short (no blank line), then trickles a byte at a time: closed anyway.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        started = loop.time()
        writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n")
        for _ in range(5):
            await asyncio.sleep(0.1)
            if not writer.is_closing():
                writer.write(b"X")
        try:
            rest = await asyncio.wait_for(reader.read(), 5)
        except ConnectionError:  # a byte written after the close: the same answer
            rest = b""
        assert rest == b""
        assert loop.time() - started < 2
        writer.close()

        # A whole request is served, and the next one on the same connection too.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(2):
            writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200") and await reader.readexactly(2) == b"ok"
            await asyncio.sleep(0.4)  # past the head timeout while idle: keep-alive's business
        writer.close()
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)


async def test_every_face_refuses_the_filters_that_cannot_run(db: asyncpg.Pool, hardening_ctx: App,
                                                              subprocess_env: dict[str, str]) -> None:
    from dataloader.exceptions import InvalidJobRequest
    from tests.operations.test_search_faces import ops_cli

    for bad in ({"args_path": "$ ? (@ == $var)"}, {"error": "*a" * 11},
                {"args_path": '$ ? (@ like_regex "(a+)+")'}):
        with pytest.raises(InvalidJobRequest):
            await hardening_ctx.search(bad)
        with pytest.raises(InvalidJobRequest):
            await hardening_ctx.operations.start("cancel", bad, dry_run=True)
    cli = ops_cli(subprocess_env, "search", "--args-path", "$ ? (@ == $var)")
    assert cli.returncode == 2 and "variable" in cli.stderr, cli.stderr
