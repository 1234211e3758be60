"""Archival before the pruner's delete (retention/archive.py) on a real PostgreSQL and fsspec's
memory:// and local directories: export, then delete, in that order and atomically; a failed
export deletes nothing and is counted; an export whose delete never committed is harmless on the
next run (the read-back shows each journal row once); the manifest says what each file holds."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import uuid
from typing import Any

import fsspec
import pytest
from prometheus_client import REGISTRY

from dataloader import App, ArchiveNotConfigured, ConfigError, JobNotFound, Settings
from dataloader.config import load_settings
from dataloader.retention.archive import Archive, ArchiveBatch, RawJson
from dataloader.retention.policy import RetentionPolicy
from dataloader.retention.pruner import prune
from tests.retention.rows import add_job, exists

DAY = 86400.0
# s3:// without s3fs installed: fsspec knows the protocol but not its library
S3_WITHOUT_LIBRARY = importlib.util.find_spec("s3fs") is None
POLICY = RetentionPolicy.uniform(7 * DAY, ["succeeded", "failed"])


@pytest.fixture
def url() -> str:
    """A fresh memory:// archive (fsspec's in-process store), emptied afterwards."""
    root = f"memory://archive-{uuid.uuid4().hex}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


def counter(outcome: str) -> float:
    return REGISTRY.get_sample_value("dl_archive_files_total", {"outcome": outcome}) or 0.0


class RefusingArchive(Archive):
    """Storage that refuses every write (a full disk, a revoked bucket policy)."""

    async def archive(self, name: str, rows: Any) -> Any:
        raise PermissionError("bucket says no")


class CrashAfterExport(Archive):
    """The export completes, then the process "dies" before the delete commits."""

    async def archive(self, name: str, rows: Any) -> Any:
        await super().archive(name, rows)
        raise SystemExit("killed between export and delete")


async def test_each_batch_is_exported_then_deleted_and_reads_back_whole(db, url):
    jobs = [await add_job(db, status="succeeded", finished_ago=30 * DAY + i, picked_ago=30 * DAY + i + 5)
            for i in range(5)]
    young = await add_job(db, status="succeeded", finished_ago=DAY)
    before = counter("ok")
    archive = Archive(url)

    report = await prune(db, POLICY, batch_size=2, archive=archive)

    assert report.total == 5 and report.archived_files == 3 and report.archive_error is None
    assert counter("ok") - before == 3
    for job in jobs:
        assert await exists(db, job) == (False, 0)
    assert (await exists(db, young))[0]
    entries = await archive.entries()
    assert [e.jobs for e in entries] == [2, 2, 1] and sum(e.rows for e in entries) == 5
    fs = fsspec.filesystem("memory")
    for entry in entries:  # the manifest's sha256 and size are the file's own
        data = fs.cat_file(f"{archive.root}/{entry.file}")
        assert hashlib.sha256(data).hexdigest() == entry.sha256 and len(data) == entry.bytes
        lines = [json.loads(line) for line in gzip.decompress(data).splitlines()]
        assert {line["job_id"] for line in lines} <= {str(j) for j in jobs}
        assert entry.time_from <= entry.time_to
    history = await archive.history(jobs[0])
    assert history.job["job_id"] == str(jobs[0]) and history.job["status"] == "succeeded"
    assert [e.kind for e in history.events] == ["queued", "picked", "succeeded"]
    with pytest.raises(JobNotFound):
        await archive.history(young)


async def test_a_failed_export_deletes_nothing_and_is_counted(db, url):
    jobs = [await add_job(db, status="failed", finished_ago=40 * DAY) for _ in range(3)]
    before = counter("failed")

    report = await prune(db, POLICY, batch_size=10, archive=RefusingArchive(url))

    assert report.total == 0 and report.archive_error == "PermissionError: bucket says no"
    assert report.to_dict()["archive_error"] == "PermissionError: bucket says no"
    assert counter("failed") - before == 1
    for job in jobs:
        assert await exists(db, job) == (True, 2)


async def test_a_crash_between_export_and_delete_doubles_no_history(db, url):
    jobs = [await add_job(db, status="succeeded", finished_ago=20 * DAY + i) for i in range(3)]
    with pytest.raises(SystemExit):
        await prune(db, POLICY, batch_size=10, archive=CrashAfterExport(url))
    for job in jobs:  # the delete never committed: everything is still in the database
        assert await exists(db, job) == (True, 2)
    assert len(await Archive(url).entries()) == 1

    # the same batch again: the same name, so the same file is written once more, not a second one
    report = await prune(db, POLICY, batch_size=10, archive=Archive(url))
    assert report.total == 3
    archive = Archive(url)
    assert len(await archive.entries()) == 1
    history = await archive.history(jobs[1])
    assert [e.kind for e in history.events] == ["queued", "succeeded"]


async def test_a_batch_that_changed_after_a_crash_is_read_back_once(db, url):
    jobs = [await add_job(db, status="succeeded", finished_ago=20 * DAY + i) for i in range(2)]
    with pytest.raises(SystemExit):
        await prune(db, POLICY, batch_size=10, archive=CrashAfterExport(url))
    jobs.append(await add_job(db, status="succeeded", finished_ago=25 * DAY))  # now in the same batch

    await prune(db, POLICY, batch_size=10, archive=Archive(url))

    archive = Archive(url)
    assert len(await archive.entries()) == 2  # another set of jobs, another file
    for job in jobs:
        assert await exists(db, job) == (False, 0)
    history = await archive.history(jobs[0])
    assert [e.kind for e in history.events] == ["queued", "succeeded"]
    assert len(history.files) == 2 and len({e.event_id for e in history.events}) == 2


async def test_a_local_directory_archive(db, tmp_path):
    job = await add_job(db, status="failed", finished_ago=40 * DAY, error="boom")
    archive = Archive(f"file://{tmp_path}")
    await prune(db, POLICY, archive=archive)
    (entry,) = await Archive(f"file://{tmp_path}").entries()
    assert (tmp_path / entry.file).is_file() and (tmp_path / "manifest" / f"{entry.name}.json").is_file()
    assert (await archive.history(job)).job["error"] == "boom"


async def test_the_exporter_takes_any_rows_for_a_partition(url):
    """The interface a journal partition's drop calls: `archive(name, rows)`, rows of events."""
    job = uuid.uuid4()
    rows = [{"job_id": job, "ts": f"2026-01-0{i}T00:00:00+00:00",
             "event": RawJson(json.dumps({"event_id": i, "job_id": str(job), "queue": "q",
                                          "ts": f"2026-01-0{i}T00:00:00+00:00", "kind": f"k{i}", "payload": {}}))}
            for i in (1, 2)]

    async def streamed():
        for row in rows:
            yield row

    archive = Archive(url)
    entry = await archive.archive("journal/dl_job_events_p20260101", streamed())
    assert (entry.jobs, entry.rows, entry.time_from.day, entry.time_to.day) == (1, 2, 1, 2)
    again = await archive.archive("journal/dl_job_events_p20260101", rows)  # idempotent: one entry
    assert again.sha256 == entry.sha256 and len(await archive.entries()) == 1
    history = await archive.history(job)
    assert history.job is None and [e.kind for e in history.events] == ["k1", "k2"]


def test_batch_names_follow_the_jobs_not_the_order():
    a, b = uuid.uuid4(), uuid.uuid4()
    from datetime import UTC, datetime

    t = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    rows = [{"job_id": a, "finished_at": t, "row_json": "{}"}, {"job_id": b, "finished_at": t, "row_json": "{}"}]
    one = ArchiveBatch.of("process:pay/x", "succeeded", rows, [])
    two = ArchiveBatch.of("process:pay/x", "succeeded", list(reversed(rows)), [])
    assert one.name == two.name and one.name.startswith("jobs/2026/03/04/process_pay_x-succeeded-20260304T050607")
    assert ArchiveBatch.of("q", "succeeded", rows[:1], []).name != one.name


@pytest.mark.parametrize("bad", ["bogus://x", "s3://bucket/x" if S3_WITHOUT_LIBRARY else "nope://x", "   "])
def test_a_bad_archive_url_is_a_configuration_error(bad):
    with pytest.raises(ConfigError) as err:
        load_settings(archive_url=bad)
    assert err.value.variable == "DL_ARCHIVE_URL"


async def test_without_an_archive_reads_say_so(dsn):
    async with App(Settings(db_dsn=dsn, workers=[])) as app:
        with pytest.raises(ArchiveNotConfigured):
            await app.archive.history(uuid.uuid4())
