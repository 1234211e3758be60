"""The console's bulk action on workflow runs (ui/pages/workflow_bulk.py), in process through the
HTTP app on real runs: the Workflows page links to it with its filter; the dry run shows the runs by
status and a sample and writes nothing; starting asks first (nothing done before the confirmation),
then starts the operation and goes to its page, whose progress moves as its batches run; a filter
the manager refuses is said on the page; read-only mode hides the link and the button and refuses
the action."""

from __future__ import annotations

import re
import uuid
from html import unescape

from dataloader.storage.operation_repository import OperationRepository
from dataloader.workflows.bulk import bulk_run_changer
from tests.ui.conftest import console_client, csrf_of
from tests.ui.test_workflow_pages import confirm, starter, status_of


async def test_the_bulk_page_counts_asks_then_starts_an_operation_whose_page_shows_progress(db, dsn):
    await db.execute("TRUNCATE dl_operations, dl_operation_events")
    async with starter(dsn) as app, console_client(dsn) as client:
        name = "t.wait"
        runs = [await app.workflows.start(name, {"dsn": dsn}) for _ in range(3)]
        listing = await client.get(f"/ui/workflows?workflow={name}&status=queued")
        link = unescape(re.search(r'href="([^"]+)" id="bulk-runs"', listing.text).group(1))
        assert link == f"/ui/workflows/bulk?workflow={name}&status=queued"
        counted = await client.get(link + "&action=cancel&count=1")
        assert counted.status_code == 200
        assert re.search(r'id="dry-run-count"><strong>3</strong> runs', counted.text), counted.text
        assert all(str(r)[:8] in counted.text for r in runs)  # the sample
        assert await db.fetchval("SELECT count(*) FROM dl_operations") == 0, "a dry run writes nothing"

        said, done = await confirm(client, "/ui/workflows/bulk", {"workflow": name, "status": "queued",
                                                                  "action": "cancel", "from_step": ""})
        assert "3 queued" in said and "skipped" in said
        assert done.status_code == 303
        operation_id = uuid.UUID(done.headers["location"].rsplit("/", 1)[1])
        assert done.headers["location"] == f"/ui/operations/{operation_id}"
        assert {await status_of(db, r) for r in runs} == {"queued"}, "started, not yet worked (no runner here)"
        page = await client.get(done.headers["location"])
        assert 'id="operation-progress">0 / 3</span>' in page.text and "workflow_cancel" in page.text
        repo = OperationRepository(db)
        claimed = await repo.claim("test-node", 30)
        await repo.run_workflow_batch(operation_id, "test-node", claimed["lease_epoch"], 30,
                                      bulk_run_changer(max_args_bytes=256 * 1024, default_lease_ttl_sec=60))
        page = await client.get(done.headers["location"])
        assert 'id="operation-progress">3 / 3</span> examined, 3 changed, 0 skipped' in page.text
        assert {await status_of(db, r) for r in runs} == {"canceled"}

        refused = await client.get("/ui/workflows/bulk?status=sleeping&count=1")
        assert refused.status_code == 422 and "validation_error" in refused.text and "statuses" in refused.text
        bad_step = await client.post("/ui/workflows/bulk", data={"csrf": csrf_of(page.text), "action": "restart",
                                                                 "from_step": " ", "confirm": "yes"})
        assert bad_step.status_code == 422 and "from_step" in bad_step.text
    assert await db.fetchval("SELECT count(*) FROM dl_operations") == 1


async def test_read_only_hides_and_refuses_the_bulk_action(db, dsn):
    await db.execute("TRUNCATE dl_operations, dl_operation_events")
    async with starter(dsn) as app, console_client(dsn, ui_read_only=True) as client:
        run_id = await app.workflows.start("t.wait", {"dsn": dsn})
        listing = await client.get("/ui/workflows")
        assert 'id="bulk-runs"' not in listing.text
        counted = await client.get("/ui/workflows/bulk?workflow=t.wait&count=1&action=cancel")
        assert counted.status_code == 200 and 'id="dry-run-count"' in counted.text
        assert 'id="start-operation"' not in counted.text and "Read-only console" in counted.text
        refused = await client.post("/ui/workflows/bulk", data={"csrf": csrf_of(counted.text), "workflow": "t.wait",
                                                                "action": "cancel", "confirm": "yes"})
        assert refused.status_code == 403 and "read-only" in refused.text
    assert await status_of(db, run_id) == "queued"
    assert await db.fetchval("SELECT count(*) FROM dl_operations") == 0
