"""Searching the trail (`app.audit.search`, SyncApp's too): each filter alone and together, keyset
pages that neither skip nor repeat a row, and bad input refused with nothing read; and the trail's
own retention, pruned in the pruner's batches."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from dataloader.config import Settings
from dataloader.exceptions import InvalidCursor, ValidationFailed
from dataloader.model.audit import AuditFilter
from dataloader.model.principal import Principal, PrincipalKind, Role, acting_as
from dataloader.retention.pruner import Pruner
from dataloader.sync import SyncApp
from tests.audit.conftest import audit_settings

ALICE = Principal.with_role(PrincipalKind.USER, "alice", Role.ADMIN)
CAROL = Principal.with_role(PrincipalKind.USER, "carol_%", Role.OPERATOR)  # LIKE's own characters in a name
CI = Principal.with_role(PrincipalKind.TOKEN, "ci", Role.ADMIN)


async def _history(app, name: str) -> datetime:
    """alice pauses and resumes the queue, carol pauses a task, ci sets its limits; the time between."""
    with acting_as(ALICE):
        await app.pause_queue(name)
        await app.resume_queue(name)
    middle = datetime.now(UTC)
    with acting_as(CAROL):
        await app.pause_queue(name, task="test.async_sleep")
    with acting_as(CI):
        await app.configure_queue(name, concurrency=2)
    return middle


async def test_each_filter_alone_and_together(audit_app, trail, name):
    middle = await _history(audit_app, name)
    await audit_app.pause_queue(f"{name}-other")

    async def actions(**fields) -> list[str]:
        return [e.action for e in (await audit_app.audit.search(**fields)).entries]

    everything = ["queue.pause", "limits.set", "task.pause", "queue.resume", "queue.pause"]
    assert await actions() == everything
    assert await actions(actor="user:alice") == ["queue.resume", "queue.pause"]
    assert await actions(actor="user") == ["task.pause", "queue.resume", "queue.pause"]
    assert await actions(actor="user:carol_%") == ["task.pause"]
    assert await actions(actor="user:carol") == []
    assert await actions(action="queue.pause") == ["queue.pause", "queue.pause"]
    assert await actions(action="queue") == ["queue.pause", "queue.resume", "queue.pause"]
    assert await actions(action="queue.") == ["queue.pause", "queue.resume", "queue.pause"]
    assert await actions(target=f"queue:{name}") == everything[1:]
    assert await actions(target="queue") == everything
    assert await actions(target="job") == []
    assert await actions(since=middle) == ["queue.pause", "limits.set", "task.pause"]
    assert await actions(until=middle) == ["queue.resume", "queue.pause"]
    assert await actions(since="1h", actor="token:ci", action="limits") == ["limits.set"]
    assert await actions(outcome="refused") == []
    entry = (await audit_app.audit.search(action="limits.set")).entries[0]
    assert entry.details == {"changes": {"concurrency": 2}} and entry.target == f"queue:{name}"


async def test_pages_follow_each_other_without_a_gap_or_a_repeat(audit_app, trail, name):
    for i in range(7):
        await audit_app.pause_queue(f"{name}-{i}")
    seen: list[uuid.UUID] = []
    cursor = None
    while True:
        page = await audit_app.audit.search(limit=3, cursor=cursor)
        seen += [e.id for e in page.entries]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    everything = [e.id for e in (await audit_app.audit.search()).entries]
    assert seen == everything and len(everything) == 7


@pytest.mark.parametrize(("fields", "error"), [
    ({"limit": 0}, ValidationFailed), ({"limit": 501}, ValidationFailed), ({"limit": "5"}, ValidationFailed),
    ({"actor": " "}, ValidationFailed), ({"action": "a\x00b"}, ValidationFailed),
    ({"since": "yesterday"}, ValidationFailed), ({"since": "2030-01-01T00:00:00"}, ValidationFailed),
    ({"since": "2030-01-02T00:00:00Z", "until": "2030-01-01T00:00:00Z"}, ValidationFailed),
    ({"outcome": "maybe"}, ValidationFailed), ({"shoe": 1}, ValidationFailed), ({"cursor": "nope"}, InvalidCursor),
])
async def test_bad_input_is_refused(audit_app, fields, error):
    with pytest.raises(error):
        await audit_app.audit.search(**fields)


def test_the_filter_reads_durations_back_from_now_and_splits_its_terms():
    f = AuditFilter.of(since="90m", actor="user", action="job", target="job:0193")
    assert f.since is not None and abs((datetime.now(UTC) - f.since) - timedelta(minutes=90)) < timedelta(seconds=5)
    assert (f.actor_terms(), f.action_terms(), f.target_terms()) == ((None, "user"), (None, "job."), ("job", "0193"))
    assert AuditFilter.of(actor="user:bob").actor_terms() == ("user:bob", None)
    assert AuditFilter.of(action="job.cancel").action_terms() == ("job.cancel", None)


def test_the_sync_app_searches_the_same_trail(dsn, trail, name):
    with SyncApp(audit_settings(dsn)) as app, acting_as(ALICE):
        app.pause_queue(name)  # on the SyncApp's own loop thread: the principal goes with the call
        page = app.audit.search(actor="user:alice", action="queue.pause")
    assert [(e.action, e.target_id) for e in page.entries] == [("queue.pause", name)]


async def test_the_pruner_deletes_rows_past_dl_audit_retention_in_batches(audit_app, trail, name):
    for _ in range(5):
        await audit_app.pause_queue(name)
    await trail.execute("UPDATE dl_audit SET ts = now() - interval '40 days' WHERE id IN "
                        "(SELECT id FROM dl_audit ORDER BY ts LIMIT 3)")
    settings = Settings(db_dsn="postgresql://unused", audit_retention="30d", retention_batch_size=2,
                        stats_enabled=False)
    pruner = Pruner.from_settings(trail, settings)
    assert pruner.settings.audit_sec == 30 * 86400
    await pruner.tick()
    assert await trail.fetchval("SELECT count(*) FROM dl_audit") == 2
    assert await trail.fetchval("SELECT min(ts) > now() - interval '1 day' FROM dl_audit")
