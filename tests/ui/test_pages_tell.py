"""Issue 34, "a console that tells", in process through the HTTP app (httpx):

- the Processes page lists every namespace with its processes counted by status;
- a schedule's own page pauses, resumes and triggers it;
- the autoscaling signal is said in plain words, never "wants 0 slots";
- the overview's "Finished jobs" counts a job as soon as it finished, before the hourly rollup
  has counted it, and not twice after;
- a queue that no live node serves says so, on the overview and in `/status`."""

from __future__ import annotations

import re
import uuid
from html import unescape

from dataloader import App, Settings
from dataloader.model.flow import QueueFlow
from dataloader.ui.pages.overview import flow_summary
from tests.support.engine import enqueue
from tests.ui.conftest import console_client, csrf_of


async def test_the_processes_page_lists_the_namespaces_with_counts_by_status(db, dsn):
    one, two = f"nsa{uuid.uuid4().hex[:6]}", f"nsb{uuid.uuid4().hex[:6]}"
    await db.execute("INSERT INTO dl_processes (ns, id, status) VALUES ($1, 'a', 'running'), ($1, 'b', 'running'), "
                     "($1, 'c', 'error'), ($2, 'd', 'init')", one, two)
    try:
        async with console_client(dsn) as client:
            page = (await client.get("/ui/processes")).text
            rows = {ns: re.search(rf'<tr data-ns="{ns}">(.*?)</tr>', page, re.S) for ns in (one, two)}
            assert all(rows.values()), "every namespace with processes is listed"

            def count(ns: str, status: str) -> str:
                cell = re.search(rf'data-status="{status}">(.*?)</td>', rows[ns].group(1), re.S).group(1)
                return re.sub(r"<[^>]+>", "", cell)

            assert [count(one, s) for s in ("init", "running", "error")] == ["0", "2", "1"]
            assert [count(two, s) for s in ("init", "running", "error")] == ["1", "0", "0"]
            assert f'href="/ui/processes?ns={one}&amp;status=error"' in rows[one].group(1), "a count links to them"
            chosen = (await client.get("/ui/processes", params={"ns": one})).text
            assert f"{one}: 0 init, 2 running, 1 error." in chosen
    finally:
        await db.execute("DELETE FROM dl_processes WHERE ns = ANY($1::text[])", [one, two])


async def test_a_schedules_own_page_pauses_resumes_and_triggers_it(db, dsn):
    name = f"own-{uuid.uuid4().hex[:8]}"
    async with console_client(dsn) as client:
        created = await client.post("/api/v1/schedules", json={"name": name, "task": "dl.noop", "queue": "own",
                                                                "cron": "0 3 * * *", "tz": "UTC"})
        assert created.status_code == 201, created.text
        page = await client.get(f"/ui/schedules/{name}")
        assert 'id="pause-schedule"' in page.text and 'id="trigger-schedule"' in page.text
        form = re.search(r'<form method="post" action="([^"]+/pause)".*?name="back" value="([^"]+)"', page.text, re.S)
        assert form.group(1) == form.group(2) + "/pause" == f"/ui/schedules/{name}/pause"
        paused = await client.post(form.group(1), data={"csrf": csrf_of(page.text), "back": form.group(2)})
        assert paused.status_code == 303 and paused.headers["location"] == f"/ui/schedules/{name}", "back to it"
        page = await client.get(f"/ui/schedules/{name}")
        assert 'id="schedule-state">paused' in page.text and 'id="resume-schedule"' in page.text
        assert f"Schedule {name} paused" in page.text
        triggered = await client.post(f"/ui/schedules/{name}/trigger", data={"csrf": csrf_of(page.text)})
        assert re.fullmatch(r"/ui/jobs/[0-9a-f-]{36}", triggered.headers["location"])
    assert await db.fetchval("SELECT paused FROM dl_schedules WHERE name = $1", name) is True


def test_the_autoscaling_signal_is_said_plainly():
    idle = QueueFlow(queue="q", paused=False, running=0, queued=3, desired_workers=0)
    assert flow_summary(idle) == ["needs no worker now"]
    busy = QueueFlow(queue="q", paused=False, running=1, queued=9, desired_workers=1)
    assert flow_summary(busy) == ["needs 1 job running at once to keep up"]
    assert not any("slot" in said for said in flow_summary(idle) + flow_summary(busy))


async def finished_last_hour(client) -> int:
    page = (await client.get("/ui/")).text
    return int(re.search(r'id="finished-hour">(\d+)<', page).group(1))


async def test_finished_jobs_count_before_the_rollup_and_not_twice_after(db, dsn):
    queue = f"fin-{uuid.uuid4().hex[:8]}"
    async with App(Settings(db_dsn=dsn, workers=[], stats_lag_sec=0)) as app, console_client(dsn) as client:
        await app.rollup_stats()  # whatever finished before is rolled up: the watermark is now
        before = await finished_last_hour(client)
        for _ in range(3):
            job_id = await enqueue(db, "dl.noop", queue=queue)
            await db.execute("UPDATE dl_jobs SET status = 'succeeded', finished_at = now() WHERE job_id = $1", job_id)
        assert await finished_last_hour(client) == before + 3, "counted before the rollup"
        assert await app.rollup_stats() >= 3
        assert await finished_last_hour(client) == before + 3, "the rollup's count replaces it, not adds to it"


async def test_a_queue_no_node_serves_says_so_on_the_overview_and_in_status(db, dsn):
    queue = f"lonely-{uuid.uuid4().hex[:8]}"
    await enqueue(db, "dl.noop", queue=queue)
    async with console_client(dsn) as client:
        row = re.search(rf'<tr data-queue="{queue}">(.*?)</tr>', (await client.get("/ui/")).text, re.S).group(1)
        assert "no node serves it" in unescape(row)
        status = {q["queue"]: q for q in (await client.get("/status")).json()["queues"]}
        assert status[queue]["served"] is False and status[queue]["served_by"] == []

        node = f"node-{uuid.uuid4().hex[:6]}"
        await db.execute("INSERT INTO dl_nodes (node_id, name, host, pid, version, queues) "
                         "VALUES ($1, $2, 'here', 1, 'x', ARRAY[$3])", uuid.uuid4(), node, queue)
        try:
            row = re.search(rf'<tr data-queue="{queue}">(.*?)</tr>', (await client.get("/ui/")).text, re.S).group(1)
            assert "no node serves it" not in unescape(row)
            status = {q["queue"]: q for q in (await client.get("/status")).json()["queues"]}
            assert status[queue]["served"] is True and status[queue]["served_by"] == [node]
        finally:
            await db.execute("DELETE FROM dl_nodes WHERE name = $1", node)
