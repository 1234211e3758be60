"""The console's guard, in process: sign-in with DL_API_TOKEN (cookie HttpOnly, SameSite=Strict),
every action POST needs the browser's CSRF token, read-only mode refuses actions and writes
nothing, DL_UI_ENABLED=false serves no console."""

from __future__ import annotations

import uuid

from starlette.routing import Mount, Route

from dataloader import metrics
from dataloader.ui.pages import PAGES
from tests.support.engine import enqueue
from tests.ui.conftest import TOKEN, console_client, csrf_of, signed_in


async def paused(db, queue: str) -> bool:
    return bool(await db.fetchval("SELECT paused FROM dl_queue_flow WHERE queue = $1", queue))


async def test_a_token_is_asked_for_and_the_cookie_is_safe(db, dsn):
    async with console_client(dsn, api_token=TOKEN) as client:
        first = await client.get("/ui/")
        assert first.status_code == 303 and first.headers["location"] == "/ui/login?next=%2Fui%2F"
        assert (await client.get("/ui/live?topic=overview")).status_code == 401
        login = await client.get("/ui/login")
        csrf = csrf_of(login.text)
        assert "HttpOnly" in login.headers["set-cookie"] and "SameSite=strict" in login.headers["set-cookie"]

        no_csrf = await client.post("/ui/login", data={"token": TOKEN})
        assert no_csrf.status_code == 403
        wrong = await client.post("/ui/login", data={"csrf": csrf, "token": "nope"})
        assert wrong.status_code == 401 and "not the token" in wrong.text
        assert "dl_console" not in client.cookies

        good = await client.post("/ui/login", data={"csrf": csrf, "token": TOKEN, "next": "//evil.example/x"})
        assert good.status_code == 303 and good.headers["location"] == "/ui/", "no open redirect"
        cookie = good.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
        assert TOKEN not in cookie, "the token itself never sits in the browser"
        page = await client.get("/ui/")
        assert page.status_code == 200 and "<h1>Overview</h1>" in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        # the API keeps its own bearer auth: the console's cookie is not an API credential
        assert (await client.get("/api/v1/queues")).status_code == 401


async def test_an_action_needs_the_csrf_token_and_writes_nothing_without_it(db, dsn):
    queue = f"ui-{uuid.uuid4().hex[:8]}"
    await enqueue(db, "dl.noop", queue=queue)
    async with console_client(dsn, api_token=TOKEN) as client:
        csrf = await signed_in(client)
        refused = await client.post("/ui/queues/pause", data={"queue": queue})
        assert refused.status_code == 403 and "CSRF" in refused.text
        forged = await client.post("/ui/queues/pause", data={"queue": queue, "csrf": "x" * 43})
        assert forged.status_code == 403
        assert not await paused(db, queue)
        done = await client.post("/ui/queues/pause", data={"queue": queue, "csrf": csrf, "back": "/ui/"})
        assert done.status_code == 303 and done.headers["location"] == "/ui/"
        assert await paused(db, queue)
        bad = await client.post("/ui/queues/resume", data={"queue": "", "csrf": csrf})
        assert bad.status_code == 422 and "validation_error" in bad.text, "the App's own error, as a page"
        await client.post("/ui/queues/resume", data={"queue": queue, "csrf": csrf})
        assert not await paused(db, queue)


async def test_read_only_shows_pages_and_refuses_actions(db, dsn):
    queue = f"ro-{uuid.uuid4().hex[:8]}"
    await enqueue(db, "dl.noop", queue=queue)
    async with console_client(dsn, ui_read_only=True) as client:
        page = await client.get("/ui/")
        assert page.status_code == 200 and queue in page.text
        assert "read-only" in page.text and "/ui/queues/pause" not in page.text
        refused = await client.post("/ui/queues/pause", data={"queue": queue, "csrf": csrf_of(page.text)})
        assert refused.status_code == 403 and "read-only" in refused.text
        assert not await paused(db, queue)


async def test_the_console_can_be_turned_off(db, dsn):
    async with console_client(dsn, ui_enabled=False) as client:
        assert (await client.get("/ui/")).status_code == 404
        assert (await client.get("/api/v1/queues")).status_code == 200


async def test_every_action_refuses_a_post_without_the_csrf_token(db, dsn):
    """Every POST route of the console (every action, login and logout) answers 403 to a form
    without this browser's CSRF token, before it reads or writes anything."""
    job_id = await enqueue(db, "dl.noop", queue="csrf")
    values = {"job_id": str(job_id), "operation_id": str(uuid.uuid4()), "ns": "ns", "process_id": "p", "name": "s",
              "run_id": str(uuid.uuid4()), "token_id": str(uuid.uuid4())}
    posts = [route for page in PAGES for route in page.routes
             if isinstance(route, Route) and not isinstance(route, Mount) and "POST" in (route.methods or ())]
    assert len(posts) >= 15, [r.path for r in posts]
    async with console_client(dsn) as client:
        await client.get("/ui/")  # the browser has its CSRF cookie; the forms below do not send it
        for route in posts:
            path = "/ui" + route.path
            for name, value in values.items():
                path = path.replace("{" + name + "}", value).replace("{" + name + ":uuid}", value) \
                    .replace("{" + name + ":path}", value)
            assert "{" not in path, f"{path}: a route parameter this test gives no value (add it to `values`)"
            answer = await client.post(path, data={"queue": "csrf", "kind": "cancel", "token": "x"})
            assert answer.status_code == 403, (path, answer.status_code)
    assert await db.fetchval("SELECT status::text FROM dl_jobs WHERE job_id = $1", job_id) == "queued"
    assert not await db.fetchval("SELECT count(*) FROM dl_queue_flow WHERE queue = 'csrf'")


async def test_read_only_hides_and_refuses_the_job_actions(db, dsn):
    job_id = await enqueue(db, "dl.noop", queue="ro-job")
    async with console_client(dsn, ui_read_only=True) as client:
        page = await client.get(f"/ui/jobs/{job_id}")
        assert page.status_code == 200 and 'id="cancel-job"' not in page.text
        refused = await client.post(f"/ui/jobs/{job_id}/cancel", data={"csrf": csrf_of(page.text)})
        assert refused.status_code == 403
    assert await db.fetchval("SELECT status::text FROM dl_jobs WHERE job_id = $1", job_id) == "queued"
    # the HTTP metrics name a console request by its route's template under /ui (bounded labels)
    routes = {s.labels["route"] for m in metrics.HTTP_REQUESTS.collect() for s in m.samples}
    assert "/ui/jobs/{job_id:uuid}" in routes and not any(str(job_id) in r for r in routes)
