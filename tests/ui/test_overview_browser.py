"""The console in a real browser: sign in with the token, the overview with its queues (depths,
live), charts and nodes, no console error, a screenshot of each page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx

from tests.ui.browser import browser, serve, sign_in


async def test_sign_in_and_see_the_overview_live(python, subprocess_env, db, tmp_path):
    async with serve(python, subprocess_env, tmp_path) as service:
        headers = {"Authorization": f"Bearer {service.token}"}
        async with httpx.AsyncClient(base_url=service.base_url, headers=headers, timeout=10) as http:
            # A queue nobody serves keeps its jobs queued: the depth is stable to read.
            later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
            for available_at in (None, None, later):
                response = await http.post("/api/v1/jobs/trigger", json={
                    "queue": "waiting", "task": "dl.noop", "args": {}, "available_at": available_at})
                assert response.status_code in (200, 201), response.text

            async with browser("overview") as seen:
                await sign_in(seen, service)
                page = seen.page
                row = page.locator('tr[data-queue="waiting"]')
                await row.wait_for()
                cells = await row.locator("td.num").all_inner_texts()
                assert cells[:4] == ["2", "1", "0", "0"], cells  # queued (due), delayed, running, held
                assert await page.locator(".chart canvas").count() == 2, "both charts drawn"
                assert await page.locator('tr[data-node="serve"]').count() == 1
                # times in the browser's zone, UTC on hover
                stamp = page.locator('tr[data-node="serve"] time')
                assert "UTC" in (await stamp.get_attribute("title"))
                assert "UTC" not in await stamp.inner_text()
                await seen.shot("overview")

                # Live: a new job shows up without a reload (server-sent events).
                response = await http.post("/api/v1/jobs/trigger", json={
                    "queue": "waiting", "task": "dl.noop", "args": {}})
                assert response.status_code in (200, 201)
                await page.wait_for_function(
                    "() => document.querySelector('tr[data-queue=\"waiting\"] td.num').textContent.trim() === '3'",
                    timeout=15_000)
                await seen.shot("overview-live")
