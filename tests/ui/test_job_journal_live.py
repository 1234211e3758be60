"""A job's journal on its page is live: a row written by any face (here a priority change over the
HTTP API) appears in the open page's timeline without a reload, through the node's one shared
poll (topic `journal:<id>`), and fifty browsers on the page cost what one does."""

from __future__ import annotations

import asyncio
import contextlib

import httpx

from tests.ui.browser import browser, serve, sign_in
from tests.ui.conftest import signed_in
from tests.ui.test_live_cost import CLIENTS, _drain, rate


async def test_a_new_journal_row_appears_on_the_open_page(python, subprocess_env, db, tmp_path):
    async with serve(python, subprocess_env, tmp_path) as service:
        headers = {"Authorization": f"Bearer {service.token}"}
        async with httpx.AsyncClient(base_url=service.base_url, headers=headers, timeout=10) as http:
            # a queue no worker of the service serves: the job stays queued, its priority can change
            job = (await http.post("/api/v1/jobs/trigger", json={
                "queue": "journal-live", "task": "dl.noop", "args": {}})).json()["job_id"]
            async with browser("journal") as seen:
                await sign_in(seen, service)
                page = seen.page
                await page.goto(f"{service.base_url}/ui/jobs/{job}")
                kinds = page.locator("#job-journal .kind")
                assert await kinds.all_inner_texts() == ["queued"]
                # A mark on this page's window: it is gone if the page reloads.
                await page.evaluate("() => { window.__stillHere = true; }")

                changed = await http.patch(f"/api/v1/jobs/{job}", json={"priority": 3})
                assert changed.status_code == 200, changed.text
                await page.wait_for_function(
                    "() => [...document.querySelectorAll('#job-journal .kind')]"
                    ".some(k => k.textContent.trim() === 'priority_changed')", timeout=20_000)
                assert await page.evaluate("() => window.__stillHere === true"), "the page reloaded"
                assert await kinds.all_inner_texts() == ["queued", "priority_changed"]
                # the state beside it moved in the same way
                await page.wait_for_function(
                    "() => document.querySelector('#job-live').textContent.includes('3')", timeout=20_000)
                await page.click("#job-journal li:last-child summary")
                assert '"to": 3' in await page.inner_text("#job-journal li:last-child pre")
                await seen.shot("job-journal-live")


async def test_fifty_browsers_on_a_job_page_cost_one_poll(python, subprocess_env, db, tmp_path, record_property):
    async with serve(python, subprocess_env, tmp_path) as service:
        headers = {"Authorization": f"Bearer {service.token}"}
        limits = httpx.Limits(max_connections=CLIENTS + 5)
        async with httpx.AsyncClient(base_url=service.base_url, headers=headers, timeout=30,
                                     limits=limits) as http:
            await signed_in(http, service.token or "")  # one session, shared by the fifty streams
            job = (await http.post("/api/v1/jobs/trigger", json={
                "queue": "journal-cost", "task": "dl.noop", "args": {}})).json()["job_id"]
            live = f"/ui/live?topic=job:{job}&topic=journal:{job}"
            idle = await rate(db)

            async def subscribe(stack: contextlib.AsyncExitStack) -> None:
                response = await stack.enter_async_context(http.stream("GET", live))
                assert response.status_code == 200
                chunks = response.aiter_text()
                assert (await anext(chunks)).startswith(": connected")
                task = asyncio.create_task(_drain(chunks))
                stack.callback(task.cancel)

            async with contextlib.AsyncExitStack() as stack:
                await subscribe(stack)
                one = await rate(db)
            async with contextlib.AsyncExitStack() as stack:
                await asyncio.gather(*(subscribe(stack) for _ in range(CLIENTS)))
                fifty = await rate(db)
    record_property("job_page_live_tx_per_sec", {"idle": round(idle, 1), "one": round(one, 1),
                                                 "fifty": round(fifty, 1)})
    print(f"job page, transactions/s: idle {idle:.1f}, 1 live client {one:.1f}, {CLIENTS} live clients {fifty:.1f}")
    per_poller = one - idle
    assert per_poller > 0.5, f"the live poll was not seen at all: idle {idle:.1f}/s, one client {one:.1f}/s"
    assert fifty - idle <= 2 * per_poller + 2, (idle, one, fifty)
