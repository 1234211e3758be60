"""Console sessions held by the database (issue 35, ui/auth.py, migration 0028): a sign-in is a new
session that expires, "Sign out" ends it on the server for every node (a cookie copied before is
refused when replayed), a cookie that is not a live session signs nobody in, and every console POST
without a session is refused and writes nothing, even with the browser's right CSRF token. Wrong
tokens are throttled per client address, at the login page and at the API's bearer check."""

from __future__ import annotations

import uuid

import httpx
import pytest
from starlette.routing import Mount, Route

from dataloader.auth_throttle import AuthThrottle
from dataloader.model.clock import ManualClock
from dataloader.ui import auth
from dataloader.ui.pages import PAGES
from tests.support.engine import enqueue
from tests.ui.conftest import TOKEN, console_client, csrf_of, signed_in


async def paused(db, queue: str) -> bool:
    return bool(await db.fetchval("SELECT paused FROM dl_queue_flow WHERE queue = $1", queue))


async def refused_everywhere(client: httpx.AsyncClient, db, queue: str) -> None:
    """The browser of `client` is not signed in: a page sends it to the login page, the live stream
    and an action (with the browser's right CSRF token) get 401, and the action wrote nothing."""
    page = await client.get("/ui/")
    assert page.status_code == 303 and page.headers["location"].startswith("/ui/login"), page.status_code
    assert (await client.get("/ui/live?topic=overview")).status_code == 401
    csrf = csrf_of((await client.get("/ui/login")).text)
    action = await client.post("/ui/queues/pause", data={"queue": queue, "csrf": csrf})
    assert action.status_code == 401, action.status_code
    assert not await paused(db, queue)


def copy_of(client: httpx.AsyncClient) -> str:
    return client.cookies[auth.SESSION_COOKIE]


async def test_a_cookie_replayed_after_sign_out_is_refused_on_every_node(db, dsn):
    """The report of issue 35: a cookie copied before "Sign out", replayed with curl, paused a queue.
    Signed in on node A, signed out on node B (another App on the same database, as a replica or a
    restarted service is), then replayed on A and on B: refused, and nothing is paused."""
    queue = f"replay-{uuid.uuid4().hex[:8]}"
    await enqueue(db, "dl.noop", queue=queue)
    async with console_client(dsn, api_token=TOKEN) as node_a, console_client(dsn, api_token=TOKEN) as node_b:
        csrf = await signed_in(node_a)
        stolen = copy_of(node_a)
        assert (await node_a.get("/ui/")).status_code == 200
        # the same browser on the other node (a load balancer in front of two replicas)
        node_b.cookies.update({auth.SESSION_COOKIE: stolen, auth.CSRF_COOKIE: node_a.cookies[auth.CSRF_COOKIE]})
        assert (await node_b.get("/ui/")).status_code == 200, "a session is every node's"
        out = await node_b.post("/ui/logout", data={"csrf": csrf})
        assert out.status_code == 303 and out.headers["location"] == "/ui/login"
        for node in (node_a, node_b):
            node.cookies.set(auth.SESSION_COOKIE, stolen, path="/ui")  # the replay, with the copy
            await refused_everywhere(node, db, queue)
    assert not await db.fetchval("SELECT count(*) FROM dl_console_sessions WHERE session_hash = sha256($1::bytea)",
                                 stolen.encode()), "the sign-out deleted the session's row"


async def test_sign_out_answers_with_a_cookie_that_clears_the_session_cookie(db, dsn):
    async with console_client(dsn, api_token=TOKEN) as client:
        csrf = await signed_in(client)
        login_cookie = client.cookies[auth.SESSION_COOKIE]
        out = await client.post("/ui/logout", data={"csrf": csrf})
    cleared = [h for h in out.headers.get_list("set-cookie") if h.startswith(f"{auth.SESSION_COOKIE}=")]
    assert len(cleared) == 1 and "Max-Age=0" in cleared[0] and "Path=/ui" in cleared[0], cleared
    assert login_cookie not in cleared[0]


async def test_signing_in_and_out_say_what_they_did(db, dsn):
    """As every console action does: the page after the redirect says it once."""
    from tests.ui.test_confirm_and_notice import notice_after

    async with console_client(dsn, api_token=TOKEN) as client:
        csrf = csrf_of((await client.get("/ui/login")).text)
        answer = await client.post("/ui/login", data={"token": TOKEN, "csrf": csrf, "next": "/ui/"})
        assert await notice_after(client, answer) == ("Signed in with the API token (admin). "
                                                      "The session ends at sign-out or after 12 h.")
        csrf = csrf_of((await client.get("/ui/")).text)
        out = await client.post("/ui/logout", data={"csrf": csrf})
        assert "Signed out: this session is ended on every node." == await notice_after(client, out)


async def test_no_cookie_but_a_live_sessions_signs_in(db, dsn):
    """A forged or any other non-empty cookie: the fixed HMAC of earlier releases, random text of a
    session secret's shape, the stored hash of a live session instead of its secret, junk."""
    queue = f"forged-{uuid.uuid4().hex[:8]}"
    await enqueue(db, "dl.noop", queue=queue)
    async with console_client(dsn, api_token=TOKEN) as owner:
        await signed_in(owner)  # a live session exists: its hash is in the table
        stored = await db.fetchval("SELECT encode(session_hash, 'hex') FROM dl_console_sessions LIMIT 1")
    old_fixed_cookie = auth.token_mac(TOKEN)
    for forged in (old_fixed_cookie, "A" * 43, stored, stored[:43], "x", "0" * 64, TOKEN, " " * 43):
        async with console_client(dsn, api_token=TOKEN) as client:
            client.cookies.set(auth.SESSION_COOKIE, forged, path="/ui")
            await refused_everywhere(client, db, queue)


async def test_every_console_post_without_a_session_is_refused_and_writes_nothing(db, dsn):
    """Every POST route of the console but the login itself, with this browser's right CSRF token
    and no session: 401, and nothing written (the job stays queued, no queue row appears)."""
    job_id = await enqueue(db, "dl.noop", queue="no-session")
    values = {"job_id": str(job_id), "operation_id": str(uuid.uuid4()), "ns": "ns", "process_id": "p", "name": "s",
              "run_id": str(uuid.uuid4()), "token_id": str(uuid.uuid4())}
    posts = [route for page in PAGES for route in page.routes
             if isinstance(route, Route) and not isinstance(route, Mount) and "POST" in (route.methods or ())]
    assert len(posts) >= 15, [r.path for r in posts]
    walked = []
    async with console_client(dsn, api_token=TOKEN) as client:
        csrf = csrf_of((await client.get("/ui/login")).text)
        for route in posts:
            if route.path == "/login":
                continue
            path = "/ui" + route.path
            for name, value in values.items():
                path = path.replace("{" + name + "}", value).replace("{" + name + ":uuid}", value) \
                    .replace("{" + name + ":path}", value)
            assert "{" not in path, f"{path}: a route parameter this test gives no value (add it to `values`)"
            answer = await client.post(path, data={"csrf": csrf, "queue": "no-session", "kind": "cancel",
                                                   "priority": "1", "task": "dl.noop", "token": TOKEN})
            assert answer.status_code == 401, (path, answer.status_code)
            walked.append(path)
    assert "/ui/logout" in walked and len(walked) == len(posts) - 1
    assert await db.fetchval("SELECT status::text FROM dl_jobs WHERE job_id = $1", job_id) == "queued"
    assert not await db.fetchval("SELECT count(*) FROM dl_queue_flow WHERE queue = 'no-session'")


async def test_every_sign_in_is_a_new_session_and_ends_the_browsers_previous_one(db, dsn):
    queue = f"rotate-{uuid.uuid4().hex[:8]}"
    await enqueue(db, "dl.noop", queue=queue)
    async with console_client(dsn, api_token=TOKEN) as client:
        await signed_in(client)
        first = copy_of(client)
        await signed_in(client)
        second = copy_of(client)
        assert first != second
        assert (await client.get("/ui/")).status_code == 200
    async with console_client(dsn, api_token=TOKEN) as replay:
        replay.cookies.set(auth.SESSION_COOKIE, first, path="/ui")
        await refused_everywhere(replay, db, queue)


async def test_a_session_expires_after_its_ttl_on_the_databases_clock(db, dsn):
    queue = f"expire-{uuid.uuid4().hex[:8]}"
    await enqueue(db, "dl.noop", queue=queue)
    async with console_client(dsn, api_token=TOKEN, ui_session_ttl="2h") as client:
        page = await client.get("/ui/login")
        answer = await client.post("/ui/login", data={"csrf": csrf_of(page.text), "token": TOKEN, "next": "/ui/"})
        assert "Max-Age=7200" in answer.headers["set-cookie"]
        secret = copy_of(client)
        lasts = await db.fetchval("SELECT expires_at - created_at FROM dl_console_sessions "
                                  "WHERE session_hash = sha256($1::bytea)", secret.encode())
        assert lasts.total_seconds() == 7200
        assert (await client.get("/ui/")).status_code == 200
        await db.execute("UPDATE dl_console_sessions SET expires_at = now() - interval '1 second' "
                         "WHERE session_hash = sha256($1::bytea)", secret.encode())
        await refused_everywhere(client, db, queue)


async def test_a_new_token_signs_every_browser_out(db, dsn):
    queue = f"token-{uuid.uuid4().hex[:8]}"
    await enqueue(db, "dl.noop", queue=queue)
    async with console_client(dsn, api_token=TOKEN) as client:
        await signed_in(client)
        secret = copy_of(client)
    async with console_client(dsn, api_token="a-new-token") as client:
        client.cookies.set(auth.SESSION_COOKIE, secret, path="/ui")
        await refused_everywhere(client, db, queue)


async def test_wrong_tokens_at_the_login_page_and_the_api_are_throttled_per_address(db, dsn, caplog):
    """Three wrong tokens within the window (DL_AUTH_MAX_FAILURES=3), counted together at the login
    page and at the API's bearer check: the next try gets 429 with Retry-After on both faces, even
    with the right token, and nothing signs in."""
    async with console_client(dsn, api_token=TOKEN, auth_max_failures=3, auth_failure_window_sec=600) as client:
        csrf = csrf_of((await client.get("/ui/login")).text)
        for _ in range(2):
            wrong = await client.post("/ui/login", data={"csrf": csrf, "token": "guess"})
            assert wrong.status_code == 401
        assert (await client.get("/api/v1/queues", headers={"Authorization": "Bearer guess"})).status_code == 401
        slowed = await client.post("/ui/login", data={"csrf": csrf, "token": TOKEN})
        assert slowed.status_code == 429 and 0 < int(slowed.headers["retry-after"]) <= 600
        assert "Too many failed sign-ins" in slowed.text and auth.SESSION_COOKIE not in client.cookies
        api = await client.get("/api/v1/queues", headers={"Authorization": f"Bearer {TOKEN}"})
        assert api.status_code == 429 and 0 < int(api.headers["retry-after"]) <= 600
        assert api.json()["error"] == "too_many_failures"
    said = [(r.getMessage(), getattr(r, "client", None)) for r in caplog.records if r.name == "dataloader.ui.auth"]
    assert said.count(("console sign-in with a wrong token", "127.0.0.1")) == 2
    assert ("console sign-in refused: too many failures from this address", "127.0.0.1") in said
    assert not any(TOKEN in r.getMessage() or TOKEN in str(r.__dict__) for r in caplog.records)
    # another address is not slowed by this one's failures
    async with console_client(dsn, api_token=TOKEN, auth_max_failures=3) as other:
        transport = other._transport
        transport.client = ("10.0.0.2", 1234)  # type: ignore[attr-defined]
        assert (await other.get("/api/v1/queues", headers={"Authorization": f"Bearer {TOKEN}"})).status_code == 200


def test_the_throttle_counts_failures_in_a_sliding_window_per_address():
    clock = ManualClock()
    throttle = AuthThrottle(3, 60, clock)
    for _ in range(3):
        assert throttle.retry_after("a") is None
        throttle.failed("a")
        clock.advance(10)
    assert throttle.retry_after("a") == 30  # the first failure (at 0) leaves the window at 60; now 30
    assert throttle.retry_after("b") is None, "per address"
    clock.advance(29.5)
    assert throttle.retry_after("a") == 1
    clock.advance(0.5)
    assert throttle.retry_after("a") is None  # two failures left in the window
    throttle.failed("a")
    assert throttle.retry_after("a") == 10
    throttle.succeeded("a")
    assert throttle.retry_after("a") is None, "the right token clears the count"
    off = AuthThrottle(0, 60, clock)
    for _ in range(100):
        off.failed("a")
    assert off.retry_after("a") is None


def test_the_throttle_forgets_the_oldest_addresses_past_its_bound(monkeypatch):
    from dataloader import auth_throttle

    monkeypatch.setattr(auth_throttle, "MAX_ADDRESSES", 3)
    throttle = AuthThrottle(1, 60, ManualClock())
    for address in ("a", "b", "c", "d"):
        throttle.failed(address)
    assert throttle.retry_after("a") is None and throttle.retry_after("d") == 60


def test_the_session_ttl_and_the_throttle_are_settings(monkeypatch):
    from dataloader.config import load_settings
    from dataloader.exceptions import ConfigError

    assert load_settings().ui_session_ttl == 12 * 3600
    monkeypatch.setenv("DL_UI_SESSION_TTL", "90m")
    monkeypatch.setenv("DL_AUTH_MAX_FAILURES", "0")
    settings = load_settings()
    assert settings.ui_session_ttl == 5400 and settings.auth_max_failures == 0
    monkeypatch.setenv("DL_UI_SESSION_TTL", "10s")  # shorter than a minute: a console nobody can use
    with pytest.raises(ConfigError) as refused:
        load_settings()
    assert refused.value.variable == "DL_UI_SESSION_TTL"


async def test_the_report_replayed_against_two_real_services(python, subprocess_env, db, tmp_path):
    """Issue 35's report as it happened, with two `dataloader serve` on one database: a browser signs
    in on one, a copy of its cookie is taken, the browser signs out on the other, and the copy is
    replayed (as curl would: the cookie and a CSRF pair in headers) on both to pause a queue:
    refused, and the queue is not paused."""
    from tests.ui.browser import serve

    queue = f"curl-{uuid.uuid4().hex[:8]}"
    await enqueue(db, "dl.noop", queue=queue)
    async with serve(python, subprocess_env, tmp_path, name="node-1") as one, \
            serve(python, subprocess_env, tmp_path, name="node-2") as two:
        async with httpx.AsyncClient(base_url=one.base_url, timeout=10) as browser:
            csrf = await signed_in(browser, one.token or "")
            copied = browser.cookies[auth.SESSION_COOKIE]
        replay_headers = {"Cookie": f"{auth.SESSION_COOKIE}={copied}; {auth.CSRF_COOKIE}={csrf}"}
        async with httpx.AsyncClient(base_url=two.base_url, timeout=10) as other:
            assert (await other.get("/ui/", headers=replay_headers)).status_code == 200, "one session, every node"
            out = await other.post("/ui/logout", data={"csrf": csrf}, headers=replay_headers)
            assert out.status_code == 303
        for service in (one, two):
            async with httpx.AsyncClient(base_url=service.base_url, timeout=10) as curl:
                replayed = await curl.post("/ui/queues/pause", data={"queue": queue, "csrf": csrf},
                                           headers=replay_headers)
                assert replayed.status_code == 401, (service.base_url, replayed.status_code)
    assert not await paused(db, queue)


async def test_an_open_live_stream_ends_once_its_session_is_signed_out(db, dsn, monkeypatch):
    """A live stream opened before the sign-out (another tab, a copied cookie) asks again whether its
    session is alive (every SESSION_RECHECK_SEC, 15 s; 0.1 s here) and ends once it is not."""
    import asyncio

    from dataloader import App, Settings
    from dataloader.api import create_app
    from dataloader.ui import console as console_module
    from tests.conftest import wait_until

    monkeypatch.setattr(console_module, "SESSION_RECHECK_SEC", 0.1)
    app = await App(Settings(db_dsn=dsn, workers=[], api_token=TOKEN, ui_live_poll_sec=0.1)).open()
    try:
        http_app = create_app(app.settings, context=app)
        console = next(r.app for r in http_app.routes if getattr(r, "path", "") == "/ui").state.console
        transport = httpx.ASGITransport(app=http_app)
        async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
            csrf = await signed_in(client)
            # the ASGI transport hands over a response once its body has ended: this one, at the sign-out
            stream = asyncio.create_task(client.get("/ui/live?topic=overview", timeout=30))
            await wait_until(lambda: console.hub.subscribers == 1 or stream.done(), timeout=10,
                             message="the stream to subscribe")
            assert not stream.done(), stream.result()
            # three polls of the hub (0.1 s each), rechecks of the session between them: still open
            first = console.hub.rounds
            await wait_until(lambda: console.hub.rounds >= first + 3, timeout=10, message="three polls")
            assert not stream.done()
            await client.post("/ui/logout", data={"csrf": csrf})
            ended = await asyncio.wait_for(stream, 10)
        assert ended.status_code == 200 and ended.text.startswith(": connected")
    finally:
        await app.close()
