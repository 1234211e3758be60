"""The jobs pages in process: every filter field from the URL reaches the App's search, a bad
filter is shown next to the form (the App's own error code), counts are capped, paging follows
the cursor, and the job page shows args with secrets masked."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from dataloader.exceptions import ValidationFailed
from dataloader.ui import filters
from tests.support.engine import enqueue
from tests.ui.conftest import console_client


def test_times_take_an_age_or_an_rfc3339_time_and_refuse_anything_else():
    now = datetime(2026, 1, 31, 12, tzinfo=UTC)
    assert filters.parse_time("created_from", "2h", now) == now - timedelta(hours=2)
    assert filters.parse_time("created_from", "15m", now) == now - timedelta(minutes=15)
    assert filters.parse_time("created_from", "2026-01-01T00:00Z", now) == datetime(2026, 1, 1, tzinfo=UTC)
    assert filters.parse_time("created_from", "2026-01-01T00:00", now).tzinfo is UTC
    with pytest.raises(ValidationFailed, match="created_from"):
        filters.parse_time("created_from", "yesterday", now)
    with pytest.raises(ValidationFailed, match="args_contains"):
        filters.job_filter({"args_contains": "{oops"})
    assert filters.job_filter({"queue": ["a", "b"], "status": ["failed"], "held": "yes", "error": "x*"}) == {
        "queues": ["a", "b"], "statuses": ["failed"], "held": True, "error": "x*"}


async def test_search_filters_pages_and_masks(db, dsn):
    queue = f"jobs-{uuid.uuid4().hex[:8]}"
    ids = [await enqueue(db, "dl.noop", queue=queue, args={"n": n, "password": "hunter2"}) for n in range(60)]
    await enqueue(db, "dl.noop", queue=f"{queue}-other")
    async with console_client(dsn) as client:
        first = await client.get("/ui/jobs", params={"queue": queue, "status": "queued"})
        assert first.status_code == 200
        assert 'id="match-count"' in first.text
        counted = await client.get("/ui/jobs/count", params={"queue": queue, "status": "queued"})
        assert counted.text.startswith("60 matching jobs"), counted.text
        assert first.text.count('<tr data-job="') == 50
        assert 'rel="next"' in first.text
        next_href = first.text.split('rel="next"')[0].rsplit('href="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
        second = await client.get(next_href)
        assert second.text.count('<tr data-job="') == 10 and 'rel="next"' not in second.text
        shown = {line.split('"')[1] for t in (first.text, second.text) for line in t.split('<tr data-job=')[1:]}
        assert shown == {str(i) for i in ids}

        bad = await client.get("/ui/jobs", params={"created_from": "soon", "args_path": "$.x"})
        assert bad.status_code == 422 and "validation_error: created_from" in bad.text
        bad_path = await client.get("/ui/jobs", params={"args_path": "$$$ nope"})
        assert bad_path.status_code == 422 and "jsonpath" in bad_path.text

        job = await client.get(f"/ui/jobs/{ids[0]}")
        assert job.status_code == 200
        assert "hunter2" not in job.text
        assert "&#34;password&#34;: &#34;***&#34;" in job.text
        missing = await client.get(f"/ui/jobs/{uuid.uuid4()}")
        assert missing.status_code == 404 and "job_not_found" in missing.text


async def test_an_error_text_search_without_a_time_range_says_how_to_bound_it(db, dsn):
    queue = f"hint-{uuid.uuid4().hex[:8]}"
    await enqueue(db, "dl.noop", queue=queue)
    async with console_client(dsn) as client:
        unbounded = await client.get("/ui/jobs", params={"queue": queue, "error": "*boom*", "status": "failed"})
        assert unbounded.status_code == 200 and 'id="text-search-hint"' in unbounded.text
        for bound in ({"created_from": "2h"}, {"finished_from": "24h"}):
            bounded = await client.get("/ui/jobs", params={"queue": queue, "error": "*boom*", **bound})
            assert bounded.status_code == 200 and 'id="text-search-hint"' not in bounded.text
        plain = await client.get("/ui/jobs", params={"queue": queue})
        assert 'id="text-search-hint"' not in plain.text
