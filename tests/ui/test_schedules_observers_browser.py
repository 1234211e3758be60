"""Schedules, observers and nodes in the browser: pause a schedule (and trigger one now); an
observer moves to the surviving node after its node is killed with -9, and the page shows it
live, with the dead node marked dead."""

from __future__ import annotations

import asyncio
import signal

import httpx

from tests.conftest import wait_until
from tests.support.observers import EVENTS_DDL
from tests.ui.browser import browser, serve, sign_in


async def test_pause_a_schedule_and_trigger_one_now(python, subprocess_env, db, tmp_path):
    await db.execute("DELETE FROM dl_schedules")
    async with serve(python, subprocess_env, tmp_path) as service:
        headers = {"Authorization": f"Bearer {service.token}"}
        async with httpx.AsyncClient(base_url=service.base_url, headers=headers, timeout=10) as http:
            for name in ("nightly", "hourly"):
                created = await http.post("/api/v1/schedules", json={
                    "name": name, "task": "dl.noop", "queue": "sched", "cron": "0 3 * * *" if name == "nightly"
                    else "0 * * * *", "tz": "UTC", "args": {"report": name}})
                assert created.status_code == 201, created.text
        async with browser("schedules") as seen:
            await sign_in(seen, service)
            page = seen.page
            await page.goto(f"{service.base_url}/ui/schedules")
            row = page.locator('tr[data-schedule="nightly"]')
            assert await row.locator("td time").count() >= 3, "next ticks"
            await seen.shot("schedules")
            await row.locator("button", has_text="Pause").click()
            await page.wait_for_url(f"{service.base_url}/ui/schedules")
            assert await row.locator(".status").inner_text() == "paused"
            assert await page.locator('tr[data-schedule="hourly"] .status').inner_text() == "active"
            await seen.shot("schedules-paused")
            await page.locator('tr[data-schedule="hourly"] button', has_text="Trigger now").click()
            await page.wait_for_url("**/ui/jobs/*")
            assert '"report": "hourly"' in await page.inner_text("#job-args")
            await page.goto(f"{service.base_url}/ui/schedules/nightly")
            assert await page.inner_text("#schedule-state") == "paused"
            await seen.shot("schedule")
    assert await db.fetchval("SELECT paused FROM dl_schedules WHERE name = 'nightly'") is True
    assert await db.fetchval("SELECT paused FROM dl_schedules WHERE name = 'hourly'") is False


async def test_an_observer_moves_live_after_its_node_is_killed(python, subprocess_env, db, dsn, tmp_path):
    await db.execute(EVENTS_DDL)
    await db.execute("DELETE FROM dl_observers; DELETE FROM dl_nodes")
    # dead after 5 s of silence, not 2: a full run on two cores once held a live node's heartbeats
    # that long, it was taken for dead and its observer moved before the kill
    fast = {"DL_PIPELINE_MODULES": "tests.support.pipelines,tests.support.observers", "DL_NODE_HEARTBEAT_SEC": "0.3",
            "DL_NODE_DEAD_AFTER_SEC": "5", "DL_OBSERVER_STOP_GRACE_SEC": "1", "DL_OBSERVER_CAPACITY": "4"}
    async with serve(python, subprocess_env, tmp_path, extra_env=fast, name="node-a") as a, \
            serve(python, subprocess_env, tmp_path, extra_env=fast, name="node-b") as b:
        headers = {"Authorization": f"Bearer {a.token}"}
        async with httpx.AsyncClient(base_url=a.base_url, headers=headers, timeout=10) as http:
            created = await http.post("/api/v1/observers", json={
                "name": "watcher", "kind": "test.probe", "args": {"dsn": dsn, "tick_sec": 0.2}})
            assert created.status_code == 201, created.text

            async def holder() -> str | None:
                observer = (await http.get("/api/v1/observers/watcher")).json()
                return observer["node"] if observer["state"] == "processing" else None
            first = await wait_until(holder, timeout=30, interval=0.1, message="the observer to start")
        victim, survivor = (a, b) if first == "node-a" else (b, a)
        other = "node-b" if first == "node-a" else "node-a"
        async with browser("observers") as seen:
            await sign_in(seen, survivor)
            page = seen.page
            await page.goto(f"{survivor.base_url}/ui/observers")
            cell = page.locator('tr[data-observer="watcher"] td.node')
            assert await cell.inner_text() == first
            await seen.shot("observers")
            await page.evaluate("() => { window.__stillHere = true; }")
            victim.proc.send_signal(signal.SIGKILL)
            await asyncio.wait_for(victim.proc.wait(), 10)
            await page.wait_for_function(
                f"() => document.querySelector('tr[data-observer=\"watcher\"] td.node').textContent.trim() "
                f"=== '{other}'", timeout=30_000)
            assert await page.evaluate("() => window.__stillHere === true"), "the page reloaded"
            await page.wait_for_function(
                f"() => document.querySelector('tr[data-node=\"{first}\"] .status').textContent.trim() === 'dead'",
                timeout=15_000)
            await seen.shot("observers-moved")
