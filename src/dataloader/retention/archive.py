"""The archive: finished jobs and their journal, exported before retention deletes them, and read
back by job id (docs/patterns.md "Archival").

Where: any fsspec URL (DL_ARCHIVE_URL): `file:///var/lib/dl-archive`, `s3://bucket/dl` (with
s3fs installed), `memory://` in tests. fsspec is the kept library that gives one API over a
directory and every object store, so the archive needs no code per backend.

Layout under the root, for each exported batch (or partition) `name`:

    data/<name>.jsonl.gz     gzip JSON lines, one line per job (`{"job_id", "ts", "job", "events"}`)
                             or per journal row (`{"job_id", "ts", "event"}`)
    manifest/<name>.json     one ManifestEntry: the file, its time range, job and row counts, size,
                             sha256 of the file's bytes, the lowest and highest job id

The manifest entry is written after its data file, so an entry never names a missing file; a
crash between them leaves an orphan data file that nothing reads. Writing the same name again
replaces both (an object store has no append, and a directory's rename is not everyone's): the
pruner names a batch after its job ids, so re-running a batch that was exported but whose delete
never committed writes the very same file again. A batch whose composition changed meanwhile gets
another name; a read-back then finds the job in two files and keeps one row per event id (and the
job row of the newest file), so no history is ever doubled.

Blocking I/O (fsspec's sync API) runs in threads; compression runs on the loop in small steps.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import json
import logging
import re
import uuid
import zlib
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from dataloader.exceptions import ArchiveNotConfigured, ArchiveUnavailable, JobNotFound, ValidationFailed
from dataloader.model.archive_url import open_archive_fs
from dataloader.model.job import JobEvent

log = logging.getLogger("dataloader.retention.archive")

# Compressed bytes gathered before one write to the file (one thread hop per chunk).
WRITE_CHUNK_BYTES = 1 << 20
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=/-]{0,400}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._=-]+")


class RawJson(str):
    """Text that already is JSON (PostgreSQL's `to_jsonb(row)::text`): written into a line as it
    is, instead of being parsed and dumped again."""

    __slots__ = ()


def slug(text: str) -> str:
    """`text` as one path component: a queue name may hold `:` or `/`."""
    return _UNSAFE.sub("_", text)[:100] or "_"


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def encode_line(row: Mapping[str, Any]) -> str:
    """One JSON line of `row`, splicing RawJson values (and lists of them) in as they are."""
    parts = []
    for key, value in row.items():
        if isinstance(value, RawJson):
            text = str(value)
        elif isinstance(value, list) and value and all(isinstance(v, RawJson) for v in value):
            text = "[" + ",".join(value) + "]"
        else:
            text = json.dumps(value, default=_json_value, separators=(",", ":"))
        parts.append(json.dumps(str(key)) + ":" + text)
    return "{" + ",".join(parts) + "}\n"


def _time(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True)
class ManifestEntry:
    """What one archived file holds: where (relative to the archive's root), the time range of its
    rows (`ts`: a job's finished_at, an event's ts), how many jobs and lines, its size and the
    sha256 of its bytes (`sha256sum` of the file), the lowest and highest job id (a read-back opens
    only the files whose range covers the id), and when it was written."""

    name: str
    file: str
    time_from: datetime | None
    time_to: datetime | None
    jobs: int
    rows: int
    bytes: int
    sha256: str
    min_job_id: uuid.UUID | None
    max_job_id: uuid.UUID | None
    written_at: datetime

    def covers(self, job_id: uuid.UUID) -> bool:
        return (self.min_job_id is not None and self.max_job_id is not None
                and self.min_job_id <= job_id <= self.max_job_id)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("time_from", "time_to", "written_at"):
            data[key] = data[key].isoformat() if data[key] is not None else None
        for key in ("min_job_id", "max_job_id"):
            data[key] = str(data[key]) if data[key] is not None else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ManifestEntry:
        def ident(value: Any) -> uuid.UUID | None:
            return uuid.UUID(value) if value else None

        written = _time(data.get("written_at")) or datetime.fromtimestamp(0, UTC)
        return cls(name=str(data["name"]), file=str(data["file"]), time_from=_time(data.get("time_from")),
                   time_to=_time(data.get("time_to")), jobs=int(data["jobs"]), rows=int(data["rows"]),
                   bytes=int(data["bytes"]), sha256=str(data["sha256"]), min_job_id=ident(data.get("min_job_id")),
                   max_job_id=ident(data.get("max_job_id")), written_at=written)


@dataclass
class ArchivedJob:
    """A job read back from the archive: its dl_jobs row as stored (every column, JSON types), its
    journal oldest first with one row per event id, and the files it was found in."""

    job_id: uuid.UUID
    job: dict[str, Any] | None
    events: list[JobEvent]
    files: list[str] = field(default_factory=list)

    @property
    def status(self) -> str | None:
        return self.job.get("status") if self.job else None

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": str(self.job_id), "archived": True, "job": self.job,
                "events": [e.to_dict() for e in self.events], "files": self.files}


def _event(data: Mapping[str, Any]) -> JobEvent:
    return JobEvent(event_id=int(data["event_id"]), job_id=uuid.UUID(str(data["job_id"])), queue=str(data["queue"]),
                    ts=_time(data["ts"]) or datetime.fromtimestamp(0, UTC), kind=str(data["kind"]),
                    payload=data.get("payload"))


@dataclass(frozen=True)
class ArchiveBatch:
    """One pruner batch as an archive file: its name and its lines (one per job, with its journal).

    The name is `jobs/<yyyy>/<mm>/<dd>/<queue>-<status>-<first finished_at>-<digest of the job
    ids>`: the same jobs make the same name, so a batch exported again after a delete that did not
    commit replaces its own file instead of adding a second one."""

    name: str
    rows: list[dict[str, Any]]

    @classmethod
    def of(cls, queue: str, status: str, jobs: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]]
           ) -> ArchiveBatch:
        journal: dict[uuid.UUID, list[RawJson]] = {}
        for event in events:
            journal.setdefault(event["job_id"], []).append(RawJson(event["row_json"]))
        ids = sorted(job["job_id"] for job in jobs)
        digest = hashlib.sha256(b"".join(i.bytes for i in ids)).hexdigest()[:16]
        first = min(job["finished_at"] for job in jobs).astimezone(UTC)
        name = (f"jobs/{first:%Y/%m/%d}/{slug(queue)}-{slug(status)}-{first:%Y%m%dT%H%M%S%fZ}-{digest}")
        rows = [{"job_id": job["job_id"], "ts": job["finished_at"], "job": RawJson(job["row_json"]),
                 "events": journal.get(job["job_id"], [])} for job in jobs]
        return cls(name=name, rows=rows)


def archive_of(settings: Any) -> Archive | None:
    """The archive DL_ARCHIVE_URL names, or None when it is unset."""
    url = getattr(settings, "archive_url", None)
    return Archive(url) if url else None


class Archive:
    """One archive root: `archive(name, rows)` exports, `history(job_id)` reads back."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.fs, self.root = open_archive_fs(url)
        self._entries: dict[str, ManifestEntry] = {}  # manifest path -> entry, read once each

    def _path(self, relative: str) -> str:
        return f"{self.root}/{relative}" if self.root else relative

    async def archive(self, name: str, rows: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]]
                      ) -> ManifestEntry:
        """Write `rows` as the gzip JSON-lines file `data/<name>.jsonl.gz`, then its manifest entry,
        and return the entry. Each row is a mapping with `job_id` and `ts` (what the time range is
        made of) and either `job` (+ `events`) or `event`; values may be RawJson. The same `name`
        again replaces the file and the entry (idempotent). Raises whatever the storage raises: the
        caller deletes nothing unless this returned."""
        if not _NAME.fullmatch(name) or ".." in name.split("/"):
            raise ValidationFailed(f"not an archive name: {name!r} (letters, digits, . _ = - /)")
        relative = f"data/{name}.jsonl.gz"
        path = self._path(relative)
        await asyncio.to_thread(self.fs.makedirs, self.fs._parent(path), exist_ok=True)
        handle = await asyncio.to_thread(self.fs.open, path, "wb")
        digest = hashlib.sha256()
        size = lines = 0
        jobs: set[uuid.UUID] = set()
        low = high = None
        compressor = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: the gzip container
        pending: list[bytes] = []
        pending_bytes = 0

        async def flush(data: bytes, *, force: bool = False) -> None:
            nonlocal pending_bytes, size
            if data:
                pending.append(data)
                pending_bytes += len(data)
            if pending and (force or pending_bytes >= WRITE_CHUNK_BYTES):
                chunk = b"".join(pending)
                pending.clear()
                pending_bytes = 0
                digest.update(chunk)
                size += len(chunk)
                await asyncio.to_thread(handle.write, chunk)

        try:
            async for row in _rows(rows):
                job_id = row["job_id"]
                job_id = job_id if isinstance(job_id, uuid.UUID) else uuid.UUID(str(job_id))
                jobs.add(job_id)
                ts = _time(row.get("ts"))
                if ts is not None:
                    low = ts if low is None or ts < low else low
                    high = ts if high is None or ts > high else high
                lines += 1
                await flush(compressor.compress(encode_line(row).encode()))
            await flush(compressor.flush(), force=True)
        except BaseException:
            await asyncio.to_thread(handle.close)
            raise
        await asyncio.to_thread(handle.close)
        entry = ManifestEntry(name=name, file=relative, time_from=low, time_to=high, jobs=len(jobs), rows=lines,
                              bytes=size, sha256=digest.hexdigest(), min_job_id=min(jobs) if jobs else None,
                              max_job_id=max(jobs) if jobs else None, written_at=datetime.now(UTC))
        manifest = self._path(f"manifest/{name}.json")
        await asyncio.to_thread(self.fs.makedirs, self.fs._parent(manifest), exist_ok=True)
        await asyncio.to_thread(self.fs.pipe_file, manifest, json.dumps(entry.to_dict(), indent=1).encode())
        self._entries[manifest] = entry
        return entry

    async def archive_batch(self, batch: ArchiveBatch) -> ManifestEntry:
        """`archive(batch.name, batch.rows)`: one pruner batch."""
        return await self.archive(batch.name, batch.rows)

    async def entries(self) -> list[ManifestEntry]:
        """Every manifest entry, oldest written first. Entries read before are kept (an entry only
        changes when its batch is written again, with the same jobs); the listing is one call."""
        base = self._path("manifest")
        try:
            paths = await asyncio.to_thread(self.fs.find, base)
        except FileNotFoundError:
            paths = []
        except Exception as exc:
            raise ArchiveUnavailable(f"the archive {self.url} cannot be listed: {exc}") from exc
        wanted = [p for p in paths if p.endswith(".json")]
        fresh = [p for p in wanted if p not in self._entries]
        if fresh:
            texts = await asyncio.to_thread(self.fs.cat, fresh, on_error="omit")
            for path, text in texts.items():
                try:
                    self._entries[path] = ManifestEntry.from_dict(json.loads(text))
                except (ValueError, KeyError, TypeError) as exc:
                    log.warning("archive: an unreadable manifest entry is skipped",
                                extra={"path": path, "error": repr(exc)})
        return sorted((self._entries[p] for p in wanted if p in self._entries), key=lambda e: e.written_at)

    async def history(self, job_id: uuid.UUID | str) -> ArchivedJob:
        """The job's row and journal from every file whose manifest entry covers its id, one row per
        event id (a batch exported twice counts once). JobNotFound when no file holds it."""
        try:
            wanted = job_id if isinstance(job_id, uuid.UUID) else uuid.UUID(str(job_id))
        except ValueError:
            raise ValidationFailed(f"not a job id: {job_id!r}") from None
        needle = str(wanted).encode()
        job: dict[str, Any] | None = None
        events: dict[int, JobEvent] = {}
        files: list[str] = []
        for entry in reversed(await self.entries()):  # newest first: its job row wins
            if not entry.covers(wanted):
                continue
            found = False
            for line in await self._lines(entry, needle):
                data = json.loads(line)
                if data.get("job_id") != str(wanted):
                    continue
                found = True
                if "job" in data and job is None:
                    job = data["job"]
                for raw in ([data["event"]] if "event" in data else data.get("events") or []):
                    event = _event(raw)
                    events.setdefault(event.event_id, event)
            if found:
                files.append(entry.file)
        if not files:
            raise JobNotFound(f"job {wanted} is not in the archive {self.url}")
        return ArchivedJob(job_id=wanted, job=job, events=sorted(events.values(), key=lambda e: e.event_id),
                           files=files)

    async def _lines(self, entry: ManifestEntry, needle: bytes) -> list[bytes]:
        try:
            data = await asyncio.to_thread(self.fs.cat_file, self._path(entry.file))
        except FileNotFoundError:
            log.warning("archive: a manifest entry names a missing file", extra={"file": entry.file})
            return []
        except Exception as exc:
            raise ArchiveUnavailable(f"the archive {self.url} cannot be read: {exc}") from exc
        if hashlib.sha256(data).hexdigest() != entry.sha256:
            # A rewrite of the same batch cut short: its jobs are still in the database (their
            # delete never committed) or in the file a finished rewrite leaves.
            log.warning("archive: a file does not match its manifest's sha256; skipped", extra={"file": entry.file})
            return []
        text = await asyncio.to_thread(gzip.decompress, data)
        return [line for line in io.BytesIO(text) if needle in line]


async def _rows(rows: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]]
                ) -> AsyncIterator[Mapping[str, Any]]:
    if isinstance(rows, AsyncIterable):
        async for row in rows:
            yield row
    else:
        for row in rows:
            yield row


class NoArchive:
    """`app.archive` when DL_ARCHIVE_URL is unset: every read says so."""

    url = None

    async def history(self, job_id: uuid.UUID | str) -> ArchivedJob:
        raise ArchiveNotConfigured("no archive: set DL_ARCHIVE_URL (docs/patterns.md \"Archival\")")

    async def entries(self) -> list[ManifestEntry]:
        raise ArchiveNotConfigured("no archive: set DL_ARCHIVE_URL (docs/patterns.md \"Archival\")")
