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

from tests.console.conftest import console_client


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
