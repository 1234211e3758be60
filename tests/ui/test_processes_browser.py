"""Processes in the browser: a process in error is found by status, opened, repaired from its page,
and turns `running` again; its trace and history are shown."""

from __future__ import annotations

import httpx

from tests.conftest import wait_until
from tests.ui import PROCESS_NS as NS
from tests.ui.browser import browser, serve, sign_in

MODULES = {"DL_PIPELINE_MODULES": "tests.support.pipelines,tests.ui.console_processes"}


async def test_repair_a_process_in_error(python, subprocess_env, db, tmp_path):
    async with serve(python, subprocess_env, tmp_path, extra_env=MODULES) as service:
        headers = {"Authorization": f"Bearer {service.token}"}
        async with httpx.AsyncClient(base_url=service.base_url, headers=headers, timeout=30) as http:
            created = await http.post(f"/api/v1/processes/{NS}", json={"id": "p-broken", "args": {"n": 1}})
            assert created.status_code == 201, created.text
            ok = await http.post(f"/api/v1/processes/{NS}", json={"id": "p-fine", "args": {"n": 1}})
            assert ok.status_code == 201, ok.text
            failed = await http.post(f"/api/v1/processes/{NS}/p-broken/call", json={"args": {"fail": "boom"}})
            assert failed.status_code >= 400, failed.text

            async def in_error() -> bool:
                return (await http.get(f"/api/v1/processes/{NS}/p-broken")).json()["status"] == "error"
            await wait_until(in_error, timeout=30, interval=0.2, message="the process to be in error")

        async with browser("processes") as seen:
            await sign_in(seen, service)
            page = seen.page
            await page.goto(f"{service.base_url}/ui/processes")
            # every namespace with its counts by status, before any is chosen (other tests of this
            # worker's database may have left processes of the namespace in error too)
            in_error_now = await db.fetchval("SELECT count(*) FROM dl_processes WHERE ns = $1 AND status = 'error'",
                                             NS)
            assert in_error_now >= 1
            assert await page.inner_text(f'tr[data-ns="{NS}"] td[data-status="error"]') == str(in_error_now)
            await seen.shot("processes-namespaces")
            await page.fill("#p-ns", NS)
            await page.select_option("#p-status", "error")
            await page.click("form[role=search] button[type=submit]")
            await page.wait_for_selector('tr[data-process="p-broken"]')
            assert await page.locator('tr[data-process="p-fine"]').count() == 0
            await seen.shot("processes-in-error")
            await page.click('tr[data-process="p-broken"] a')
            await page.wait_for_selector("#process-status")
            assert await page.inner_text("#process-status") == "error"
            assert "boom" in await page.inner_text("table.trace")
            await seen.shot("process-error")
            await page.fill("#repair-args", '{"n": 2}')
            await page.click("#repair-process")
            await page.wait_for_function(
                "() => document.querySelector('#process-status').textContent.trim() === 'running'", timeout=20_000)
            assert await page.inner_text("#notice") == \
                f"Process p-broken of {NS} repaired: its repair task succeeded and it runs again."
            await seen.shot("process-repaired")
            await page.select_option("#restart-from", "start")
            await page.click("#restart-process")
            await page.wait_for_selector("#notice")
            assert (await page.inner_text("#notice")).startswith(
                f"Process p-broken of {NS} restarted from its init task:"), await page.inner_text("#notice")
