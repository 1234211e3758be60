"""Bulk actions in process: the dry run writes nothing, a start needs CSRF, a bad parameter is the
App's error and starts nothing, a start asks first, and pause / resume / cancel move the operation (with no runner in
this process, it waits where it is) and land in its audit trail with the console as the actor."""

from __future__ import annotations

import re
import uuid

from tests.support.engine import enqueue
from tests.ui.conftest import console_client, csrf_of


async def operations(db) -> int:
    return await db.fetchval("SELECT count(*) FROM dl_operations")


async def test_dry_run_start_pause_resume_cancel(db, dsn):
    await db.execute("DELETE FROM dl_operations")
    queue = f"bulk-{uuid.uuid4().hex[:8]}"
    for _ in range(4):
        await enqueue(db, "dl.noop", queue=queue)
    async with console_client(dsn) as client:
        dry = await client.get("/ui/bulk", params={"queue": queue, "status": "queued", "kind": "set_priority",
                                                   "priority": "7", "count": "1"})
        assert dry.status_code == 200 and "<strong>4</strong> jobs to examine for <strong>set_priority" in dry.text
        assert await operations(db) == 0
        csrf = csrf_of(dry.text)
        form = {"queue": queue, "status": "queued", "kind": "set_priority", "priority": "7"}
        assert (await client.post("/ui/bulk", data=form)).status_code == 403
        bad = await client.post("/ui/bulk", data={**form, "priority": "-1", "csrf": csrf})
        assert bad.status_code == 422 and "invalid_request" in bad.text
        assert await operations(db) == 0

        asked = await client.post("/ui/bulk", data={**form, "csrf": csrf})
        assert asked.status_code == 200 and "Start set_priority on 4 jobs?" in asked.text
        assert await operations(db) == 0, "an unconfirmed start starts nothing"
        started = await client.post("/ui/bulk", data={**form, "csrf": csrf, "confirm": "yes"})
        assert started.status_code == 303
        location = started.headers["location"]
        assert re.fullmatch(r"/ui/operations/[0-9a-f-]{36}", location)
        page = await client.get(location)
        assert "0 / 4" in page.text and 'id="pause-operation"' in page.text
        for action, state in (("pause", "paused"), ("resume", "running"), ("cancel", "canceled")):
            answer = await client.post(f"{location}/{action}", data={"csrf": csrf, "confirm": "yes"})
            assert answer.status_code == 303, answer.text
            assert await db.fetchval("SELECT state FROM dl_operations") == state
        again = await client.post(f"{location}/cancel", data={"csrf": csrf, "confirm": "yes"})
        assert again.status_code == 409 and "canceled" in again.text
        audit = await client.get(location)
        assert audit.text.count("by console") >= 4  # created, paused, resumed, canceled
        listing = await client.get("/ui/operations")
        assert location in listing.text
