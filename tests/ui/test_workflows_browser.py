"""Workflows in the browser, on a real `dataloader serve` whose workers run the test workflows: a
failed run is found by status, opened, and restarted from the step that broke (after the
confirmation page) until it succeeds; a waiting run gets its signal from its page; the list and a
run's page fit a phone's width; a run's page moves on with the run without a reload, keeping the
keyboard user's focus and typed text. Chromium logs no error on any of these pages."""

from __future__ import annotations

import httpx

from tests.conftest import wait_until
from tests.ui.browser import browser, serve, sign_in
from tests.workflows.flows import PROBE_DDL, QUEUE

SETTINGS = {"DL_PIPELINE_MODULES": "tests.support.pipelines,tests.workflows.flows",
            "WORKERS_JSON": f'[{{"queue": "{QUEUE}", "concurrency": 4}}]'}


async def test_restart_a_failed_run_and_signal_a_waiting_one(python, subprocess_env, db, dsn, tmp_path):
    await db.execute(PROBE_DDL)
    async with serve(python, subprocess_env, tmp_path, extra_env=SETTINGS) as service:
        headers = {"Authorization": f"Bearer {service.token}"}
        async with httpx.AsyncClient(base_url=service.base_url, headers=headers, timeout=30) as http:
            async def status(run_id: str) -> str:
                return (await http.get(f"/api/v1/workflows/{run_id}")).json()["status"]

            fixable = (await http.post("/api/v1/workflows", json={"workflow": "t.fixable",
                                                                   "input": {"dsn": dsn, "fix_after": 2}})).json()
            waiting = (await http.post("/api/v1/workflows", json={"workflow": "t.wait",
                                                                   "input": {"dsn": dsn, "timeout": 600}})).json()
            await wait_until(lambda: _is(status, fixable, "failed"), timeout=30, interval=0.2,
                             message="the fixable run fails at step b")

            async with browser("workflows") as seen:
                await sign_in(seen, service)
                page = seen.page
                await page.goto(f"{service.base_url}/ui/workflows")
                await page.select_option("#w-status", "failed")
                await page.click("form[role=search] button[type=submit]")
                await page.wait_for_selector(f'tr[data-run="{fixable["run_id"]}"]')
                assert await page.locator(f'tr[data-run="{waiting["run_id"]}"]').count() == 0
                await seen.shot("failed-runs")
                await page.click(f'tr[data-run="{fixable["run_id"]}"] a')
                await page.wait_for_selector("#run-status")
                assert await page.inner_text("#run-status") == "failed"
                assert "bug (run 1)" in await page.inner_text("#run-steps")
                await seen.shot("failed-run")
                await page.select_option("#restart-from", "b")
                await page.click("#restart-run")
                await page.wait_for_selector("#confirm-action")
                assert "from step 'b'" in await page.inner_text("#consequence")
                await seen.shot("restart-confirmation")
                await page.click("#confirm-action")
                await page.wait_for_selector("#notice")
                assert (await page.inner_text("#notice")).startswith(
                    f"Workflow run {fixable['run_id']} restarted from 'b'")
                await wait_until(lambda: _is(status, fixable, "succeeded"), timeout=30, interval=0.2,
                                 message="the restarted run succeeds")
                await page.reload()
                assert await page.inner_text("#run-status") == "succeeded"
                await seen.shot("restarted-run")

                await wait_until(lambda: _waits(http, waiting), timeout=30, interval=0.2, message="the run waits")
                await page.goto(f"{service.base_url}/ui/workflows/{waiting['run_id']}")
                await page.fill("#signal-name", "go")
                await page.fill("#signal-payload", '{"ok": true}')
                await page.click("#send-signal")
                await page.click("#confirm-action")
                await page.wait_for_selector("#notice")
                assert await page.inner_text("#notice") == f"Signal 'go' sent to workflow run {waiting['run_id']}."
                await wait_until(lambda: _is(status, waiting, "succeeded"), timeout=30, interval=0.2,
                                 message="the signaled run succeeds")
                result = (await http.get(f"/api/v1/workflows/{waiting['run_id']}")).json()["result"]
                assert result == {"first": {"ok": True}, "second": None}

            async with browser("workflows-phone", viewport=(390, 844)) as seen:
                await sign_in(seen, service)
                page = seen.page
                for path in ("/ui/workflows", f"/ui/workflows/{fixable['run_id']}"):
                    await page.goto(f"{service.base_url}{path}")
                    overflow = await page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
                    assert overflow <= 1, f"{path} is {overflow}px wider than a phone's screen"
                    await seen.shot(path.rsplit("/", 1)[-1][:13])


async def _is(status, run: dict, wanted: str) -> bool:
    return await status(run["run_id"]) == wanted


async def _waits(http: httpx.AsyncClient, run: dict) -> bool:
    steps = (await http.get(f"/api/v1/workflows/{run['run_id']}")).json()["steps"]
    return any(s["kind"] == "wait" and s["state"] == "pending" for s in steps)


# every focusable element of the run's live part (a live swap under one without an id loses the focus)
ANONYMOUS_FOCUSABLE = ("() => [...document.querySelectorAll('#run-live :is(a[href], button, summary, "
                       "input:not([type=hidden]), select, textarea, [tabindex])')].filter(e => !e.id)"
                       ".map(e => e.outerHTML)")


async def test_a_runs_page_moves_on_with_the_run_without_a_reload(python, subprocess_env, db, dsn, tmp_path):
    """A run waiting for two signals: its page shows the first wait pending; a signal sent from
    elsewhere moves the page on to the second wait while the keyboard user types in the signal
    form (the text and the focus stay); the second signal ends the run, shown succeeded — the same
    page all along."""
    await db.execute(PROBE_DDL)
    async with serve(python, subprocess_env, tmp_path, extra_env={**SETTINGS, "DL_UI_LIVE_POLL_SEC": "0.3"}) \
            as service:
        headers = {"Authorization": f"Bearer {service.token}"}
        async with httpx.AsyncClient(base_url=service.base_url, headers=headers, timeout=30) as http:
            run = (await http.post("/api/v1/workflows", json={
                "workflow": "t.wait", "input": {"dsn": dsn, "timeout": 600, "twice": True}})).json()
            await wait_until(lambda: _waits(http, run), timeout=30, interval=0.2, message="the run waits")
            async with browser("workflow-live") as seen:
                await sign_in(seen, service)
                page = seen.page
                await page.goto(f"{service.base_url}/ui/workflows/{run['run_id']}")
                await page.evaluate("() => { window.__stillHere = true; window.swaps = 0; document.body"
                                    ".addEventListener('htmx:afterSwap', () => { window.swaps += 1; }); }")
                waits = page.locator('#run-steps li[data-kind="wait"]')
                assert await waits.count() == 1
                assert await page.evaluate(ANONYMOUS_FOCUSABLE) == []
                await page.focus("#signal-name")
                await page.keyboard.type("go")
                sent = await http.post(f"/api/v1/workflows/{run['run_id']}/signals/go", json={"payload": 1})
                assert sent.status_code == 202, sent.text
                await page.wait_for_function(
                    "() => document.querySelectorAll('#run-steps li[data-kind=\"wait\"]').length === 2",
                    timeout=30_000)
                assert await page.evaluate("() => window.swaps") > 0, "it moved on by a live swap"
                assert await page.evaluate("() => document.activeElement.id") == "signal-name"
                assert await page.input_value("#signal-name") == "go", "what the user typed is kept"
                assert await page.evaluate(ANONYMOUS_FOCUSABLE) == []
                await seen.shot("workflow-live-second-wait")
                await http.post(f"/api/v1/workflows/{run['run_id']}/signals/go", json={"payload": 2})
                await page.wait_for_function(
                    "() => document.querySelector('#run-status').textContent.trim() === 'succeeded'", timeout=30_000)
                assert await page.evaluate("() => window.__stillHere === true"), "the page reloaded"
                assert '"second": 2' in await page.locator("#run-result").inner_text()
                assert await page.locator("#cancel-run").count() == 0, "an ended run offers no cancel"
                await seen.shot("workflow-live-succeeded")
