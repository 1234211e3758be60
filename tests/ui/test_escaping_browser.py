"""Nothing a job, a process, a schedule, an observer or an operation holds runs as markup: a
payload of script tags and event handlers is stored in every field the console shows, each page is
opened in the browser, and no payload ran (a marker it would set stays unset, no request for its
image was made, and the browser logged no error, which a script refused by the CSP would log)."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

import httpx

from tests.conftest import wait_until
from tests.support.observers import EVENTS_DDL
from tests.ui import PROCESS_NS as NS
from tests.ui.browser import browser, serve, sign_in

P = "\"'><script>window.__xss=1</script><img src=xss-probe onerror=\"window.__xss=1\"><b>bold</b>"
# A process id is a path segment of the HTTP API, so its payload has no slash (a tag needs none to run).
PID = "p" + P.replace("/", "")
MODULES = {"DL_PIPELINE_MODULES": "tests.support.pipelines,tests.ui.console_processes,tests.support.observers"}


async def test_no_stored_payload_runs_on_any_page(python, subprocess_env, db, dsn, tmp_path):
    await db.execute(EVENTS_DDL)
    await db.execute("DELETE FROM dl_schedules; DELETE FROM dl_observers; DELETE FROM dl_operations")
    queue = f"q{P}"
    async with serve(python, subprocess_env, tmp_path, extra_env=MODULES) as service:
        headers = {"Authorization": f"Bearer {service.token}"}
        async with httpx.AsyncClient(base_url=service.base_url, headers=headers, timeout=30) as http:
            job = (await http.post("/api/v1/jobs/trigger", json={
                "queue": queue, "task": f"t{P}", "lock_key": f"k{P}", "args": {P: P, "nested": [P]}})).json()
            assert "job_id" in job, job
            job_id = job["job_id"]
            await db.execute(
                "UPDATE dl_jobs SET status = 'failed', finished_at = now(), error = $2, result = to_jsonb($2::text), "
                "progress = jsonb_build_object('note', $2::text), held_at = now(), held_reason = $2 "
                "WHERE job_id = $1::uuid", job_id, f"E{P}\n  at {P}")
            created = await http.post(f"/api/v1/processes/{NS}", json={"id": PID, "args": {"n": P, "aux": {P: P}}})
            assert created.status_code == 201, created.text
            await http.post(f"/api/v1/processes/{NS}/{quote(PID, safe='')}/call", json={"args": {"fail": P}})

            async def in_error() -> bool:
                got = await http.get(f"/api/v1/processes/{NS}/{quote(PID, safe='')}")
                return got.status_code == 200 and got.json()["status"] == "error"
            await wait_until(in_error, timeout=30, interval=0.2, message="the process to be in error")
            schedule = await http.post("/api/v1/schedules", json={
                "name": "xss", "task": "dl.noop", "queue": queue, "every_sec": 3600, "args": {P: P}})
            assert schedule.status_code == 201, schedule.text
            observer = await http.post("/api/v1/observers", json={
                "name": "xss", "kind": "test.probe", "args": {"dsn": dsn, "note": P}})
            assert observer.status_code == 201, observer.text
            await db.execute("UPDATE dl_observers SET last_error = $1", P)
            operation = await http.post("/api/v1/operations", json={
                "kind": "cancel", "filter": {"queues": [queue], "error": f"*{P[:40]}*"}})
            assert operation.status_code == 201, operation.text
            operation_id = operation.json()["operation_id"]

        process_path = f"/ui/processes/{NS}/{quote(PID, safe='')}"
        pages = {
            "overview": "/ui/", "jobs": f"/ui/jobs?queue={quote(queue)}&error={quote('*' + P[:30] + '*')}",
            "job": f"/ui/jobs/{job_id}", "errors": "/ui/errors?window=24h",
            "bulk": f"/ui/bulk?queue={quote(queue)}&kind=cancel&count=1", "operations": "/ui/operations",
            "operation": f"/ui/operations/{operation_id}", "processes": f"/ui/processes?ns={NS}",
            "process": process_path, "schedules": "/ui/schedules", "schedule": "/ui/schedules/xss",
            "observers": "/ui/observers",
        }
        async with browser("escaping") as seen:
            probes: list[str] = []
            # a rendered <img src=xss-probe> would fetch a path ending so (links may carry it in a query)
            seen.page.on("request", lambda r: probes.append(r.url) if urlsplit(r.url).path.endswith("xss-probe")
                         else None)
            await sign_in(seen, service)
            for name, path in pages.items():
                response = await seen.page.goto(f"{service.base_url}{path}")
                assert response is not None and response.status == 200, (name, response and response.status)
                await seen.page.wait_for_load_state("load")
                assert await seen.page.evaluate("() => window.__xss === undefined"), f"a payload ran on {name}"
                assert await seen.page.locator("main b", has_text="bold").count() == 0, f"markup rendered on {name}"
                await seen.shot(name)
            assert P in await seen.page.inner_text("main"), "the payload is shown as text"
            await seen.page.goto(f"{service.base_url}/ui/jobs/{job_id}")
            assert P in await seen.page.inner_text("#job-error")
            assert not probes, f"the payload's image was requested: {probes}"
