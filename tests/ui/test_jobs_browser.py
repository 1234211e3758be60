"""Jobs in the browser: filter (the filter lands in the URL), open a job, cancel it while it runs
(the console asks first, then says what it did) and watch it turn `canceled` live (server-sent
events, no reload)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx

from tests.ui.browser import browser, match_count, serve, sign_in


async def test_filter_open_a_job_and_watch_its_cancel_arrive_live(python, subprocess_env, db, tmp_path):
    async with serve(python, subprocess_env, tmp_path) as service:
        headers = {"Authorization": f"Bearer {service.token}"}
        async with httpx.AsyncClient(base_url=service.base_url, headers=headers, timeout=10) as http:
            long = (await http.post("/api/v1/jobs/trigger", json={
                "queue": "default", "task": "dl.sleep", "args": {"seconds": 120, "chunks": 1200, "note": "long"},
                "lock_key": "console-long"})).json()["job_id"]
            for n in range(3):
                await http.post("/api/v1/jobs/trigger",
                                json={"queue": "elsewhere", "task": "dl.noop", "args": {"n": n}})

            async with browser("jobs") as seen:
                await sign_in(seen, service)
                page = seen.page
                await page.goto(f"{service.base_url}/ui/jobs")
                await page.fill("#f-queue", "default")
                await page.check('input[name="status"][value="running"]')
                await page.click("form.search button[type=submit]")
                await page.wait_for_selector(f'tr[data-job="{long}"]')
                query = parse_qs(urlsplit(page.url).query)
                assert query["queue"] == ["default"] and query["status"] == ["running"], page.url
                assert await page.locator("table.jobs tbody tr").count() == 1
                assert (await match_count(page)).startswith("1 matching job")
                await seen.shot("jobs-filtered")

                await page.click(f'tr[data-job="{long}"] a')
                await page.wait_for_url(f"**/ui/jobs/{long}")
                assert await page.inner_text("#job-status") == "running"
                assert '"note": "long"' in await page.inner_text("#job-args")
                assert "held by this job" in await page.inner_text("#job-live")
                await seen.shot("job-running")

                await page.click("#cancel-job")
                # a destructive action asks first, and nothing happened yet
                await page.wait_for_url(f"**/ui/jobs/{long}/cancel")
                assert "asked to stop" in await page.inner_text("#consequence")
                assert await db.fetchval("SELECT cancel_requested FROM dl_jobs WHERE job_id = $1::uuid", long) \
                    is False
                await seen.shot("job-cancel-confirm")
                await page.click("#confirm-action")
                await page.wait_for_url(f"**/ui/jobs/{long}")
                await page.wait_for_load_state("load")
                assert await page.inner_text("#notice") == \
                    f"Job {long} asked to stop: it turns canceled at its next chunk."
                # A mark on this page's window: it is gone if the page reloads.
                await page.evaluate("() => { window.__stillHere = true; }")
                await page.wait_for_function(
                    "() => document.querySelector('#job-status').textContent.trim() === 'canceled'", timeout=20_000)
                assert await page.evaluate("() => window.__stillHere === true"), "the page reloaded"
                assert await page.locator("#retry-job").count() == 1, "a canceled job offers retry"
                await seen.shot("job-canceled-live")
        status = await db.fetchval("SELECT status::text FROM dl_jobs WHERE job_id = $1::uuid", long)
        assert status == "canceled"
