"""Usable on a phone and from the keyboard: at a phone's width no page is wider than the screen
(tables scroll inside their box) and a queue's name is not broken mid-word, and an action is
reached with Tab and pressed with Enter."""

from __future__ import annotations

import httpx

from tests.ui.browser import browser, serve, sign_in

PAGES = ("/ui/", "/ui/jobs?queue=phone", "/ui/errors", "/ui/operations", "/ui/processes", "/ui/workflows",
         "/ui/schedules", "/ui/observers", "/ui/storage", "/ui/tokens", "/ui/users", "/ui/audit")


async def test_phone_width_and_keyboard(python, subprocess_env, db, tmp_path):
    async with serve(python, subprocess_env, tmp_path) as service:
        headers = {"Authorization": f"Bearer {service.token}"}
        async with httpx.AsyncClient(base_url=service.base_url, headers=headers, timeout=10) as http:
            for n in range(3):
                await http.post("/api/v1/jobs/trigger", json={"queue": "phone", "task": "dl.noop", "args": {"n": n}})
            await http.post("/api/v1/jobs/trigger", json={"queue": "reconciliation", "task": "dl.noop"})
        async with browser("phone", viewport=(390, 844)) as seen:
            await sign_in(seen, service)
            page = seen.page
            for path in PAGES:
                await page.goto(f"{service.base_url}{path}")
                overflow = await page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
                assert overflow <= 1, f"{path} is {overflow}px wider than a phone's screen"
                await seen.shot(path.strip("/").replace("/", "-").split("?")[0] or "overview")
            # an error-text search with no time range says how to bound it, and the hint fits a phone too
            await page.goto(f"{service.base_url}/ui/jobs?queue=phone&error=*boom*&status=failed")
            await page.locator("#text-search-hint").wait_for(state="visible")
            overflow = await page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 1, f"the text-search hint makes the jobs page {overflow}px wider than a phone's screen"
            await seen.shot("jobs-text-search")
            # a queue's name stays one word on a phone (issue 34: it broke mid-word)
            await page.goto(f"{service.base_url}/ui/")
            for name in (page.locator('tr[data-queue="reconciliation"] th a'), page.locator("table.nodes tbody th")):
                lines = 0
                for _ in range(10):  # 0 lines: a live update swapped the table under the measure; again
                    await name.first.wait_for(state="visible")
                    lines = await name.first.evaluate(  # the lines its text takes
                        "el => { const r = document.createRange(); r.selectNodeContents(el); "
                        "return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size; }")
                    if lines:
                        break
                assert lines == 1, f"{await name.inner_text()!r} is broken over {lines} lines"

        async with browser("keyboard") as seen:
            await sign_in(seen, service)
            page = seen.page
            await page.goto(f"{service.base_url}/ui/")
            await page.locator('tr[data-queue="phone"]').wait_for()
            target = page.locator('tr[data-queue="phone"]').get_by_role("button", name="Pause")
            # Tab through the page until the queue's Pause button has the focus; a live update of the
            # table meanwhile keeps the focus where it was (the button's id: htmx restores it). As many
            # presses as the page has stops: the suite's database holds every other test's queues too
            stops = await page.evaluate("() => document.querySelectorAll('a[href], button, summary, input:not("
                                        "[type=hidden]), select, textarea, [tabindex]').length")
            # every focusable element the live update swaps has an id (else a swap under it loses the focus)
            anonymous = await page.evaluate(
                "() => [...document.querySelectorAll('#overview-live :is(a[href], button, summary, "
                "input:not([type=hidden]), select, textarea, [tabindex])')].filter(e => !e.id).map(e => e.outerHTML)")
            assert anonymous == [], anonymous
            for _ in range(stops + 5):
                await page.keyboard.press("Tab")
                if await target.evaluate("el => el === document.activeElement"):
                    break
            else:
                raise AssertionError("the Pause button is not reachable with Tab")
            # a live update swaps the table under the keyboard user: the focus stays on the button; and
            # a style set on an element from script (a browser extension, a screenshot tool) is not copied
            # by the swap's settle, which the CSP (style-src 'self') would refuse with a console error
            await page.evaluate("() => { window.swaps = 0; document.body.addEventListener('htmx:afterSwap', "
                                "() => { window.swaps += 1; }); document.querySelectorAll('#overview-live [id]')"
                                ".forEach(e => e.style.setProperty('caret-color', 'transparent', 'important')); }")
            async with httpx.AsyncClient(base_url=service.base_url, headers=headers, timeout=10) as http:
                await http.post("/api/v1/jobs/trigger", json={"queue": "phone", "task": "dl.noop", "args": {"n": 9}})
            await page.wait_for_function("() => window.swaps > 0", timeout=30_000)
            assert await page.evaluate("() => document.activeElement.id") == "queue-pause-phone"
            await page.keyboard.press("Enter")
            await page.wait_for_function(  # the POST, its redirect and the page: 15 s ran out once in a full run
                "() => document.querySelector('tr[data-queue=\"phone\"] .status').textContent.trim() === 'paused'",
                timeout=45_000)
            await seen.shot("paused-by-keyboard")
    assert await db.fetchval("SELECT paused FROM dl_queue_flow WHERE queue = 'phone'") is True
