"""A queue's limits in the console (issue 21's console face): the overview shows each queue's flow
control in words, and its limits form changes them through app.configure_queue, read as the CLI reads
`queues set` (empty keeps, "none" clears, rates as "10/1s"); a bad value is the same
validation_error, shown as a 422 page, and writes nothing."""

from __future__ import annotations

import uuid

from dataloader.model.flow import QueueFlow, QueueSettings
from dataloader.ui.pages.overview import flow_summary, limit_texts
from tests.support.engine import enqueue
from tests.ui.conftest import TOKEN, console_client, signed_in


async def limits_row(db, queue: str):
    return await db.fetchrow("SELECT concurrency, rate_limit, rate_period_sec, partition_concurrency"
                             " FROM dl_queue_flow WHERE queue = $1", queue)


async def test_the_limits_form_sets_and_clears_limits_and_the_overview_shows_them(db, dsn):
    queue = f"ui-limits-{uuid.uuid4().hex[:8]}"
    await enqueue(db, "dl.noop", queue=queue)
    async with console_client(dsn, api_token=TOKEN) as client:
        csrf = await signed_in(client)
        done = await client.post("/ui/queues/limits", data={"csrf": csrf, "queue": queue, "back": "/ui/",
                                                            "concurrency": "5", "rate": "10/2s",
                                                            "partition_concurrency": "", "partition_rate": ""})
        assert done.status_code == 303, done.text
        row = await limits_row(db, queue)
        assert (row["concurrency"], row["rate_limit"], row["rate_period_sec"], row["partition_concurrency"]) \
            == (5, 10, 2.0, None)
        page = await client.get("/ui/")
        assert "concurrency 0/5 · rate 10/2s" in page.text

        cleared = await client.post("/ui/queues/limits", data={"csrf": csrf, "queue": queue, "rate": "none"})
        assert cleared.status_code == 303
        row = await limits_row(db, queue)
        assert (row["concurrency"], row["rate_limit"]) == (5, None), "an empty field keeps, none clears"

        bad = await client.post("/ui/queues/limits", data={"csrf": csrf, "queue": queue, "concurrency": "0"})
        assert bad.status_code == 422 and "concurrency" in bad.text
        nothing = await client.post("/ui/queues/limits", data={"csrf": csrf, "queue": queue})
        assert nothing.status_code == 422 and "nothing to change" in nothing.text
        no_csrf = await client.post("/ui/queues/limits", data={"queue": queue, "concurrency": "9"})
        assert no_csrf.status_code == 403
        assert (await limits_row(db, queue))["concurrency"] == 5, "refused changes wrote nothing"


async def test_read_only_refuses_the_limits_form(db, dsn):
    queue = f"ui-limits-{uuid.uuid4().hex[:8]}"
    async with console_client(dsn, ui_read_only=True) as client:
        page = await client.get("/ui/")
        assert "/ui/queues/limits" not in page.text
        from tests.ui.conftest import csrf_of
        refused = await client.post("/ui/queues/limits", data={"csrf": csrf_of(page.text), "queue": queue,
                                                               "concurrency": "3"})
        assert refused.status_code == 403
    assert await limits_row(db, queue) is None


def test_a_queues_flow_control_in_words():
    assert flow_summary(None) == []
    flow = QueueFlow(queue="q", paused=False, running=2, queued=7,
                     settings=QueueSettings(concurrency=4, partition_concurrency=1, rate_limit=10, rate_period_sec=1.0,
                                            fair_share=True),
                     held_back={"concurrency": 3}, desired_workers=4)
    assert flow_summary(flow) == ["concurrency 2/4", "1 per partition", "rate 10/1s", "fair share", "3 held back",
                                  "needs 4 jobs running at once to keep up"]
    assert limit_texts(flow) == {"concurrency": "4", "partition_concurrency": "1", "rate": "10/1s",
                                 "partition_rate": "none"}
