"""Key rotation without downtime and a missing key (docs/security.md "Encryption at rest"): a new
key first, a rotation while producers keep enqueueing, nothing lost and nothing left under the old
key, which can then go; a job under a key the node lacks fails alone, with the kid in its error."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from dataloader import App, EncryptionOff, SyncApp, ValidationFailed, metrics
from dataloader.model.payload_crypto import Sealed
from dataloader.testing import drain
from tests.encryption.conftest import K1, K2, pipelines, settings_for


async def _kids(db: asyncpg.Pool) -> dict[str, int]:
    rows = await db.fetch("SELECT args->>'kid' AS kid, count(*) AS n FROM dl_jobs WHERE args ? '$dl_enc' GROUP BY 1")
    return {r["kid"]: r["n"] for r in rows}


async def test_rotation_under_concurrent_enqueue_loses_nothing_and_leaves_no_old_key(edb: asyncpg.Pool, dsn: str):
    async with App(settings_for(dsn, K1), pipelines=pipelines) as old:
        before = await old.enqueue_many([{"task": "enc.echo", "queue": "rot", "args": {"n": i, "secret": f"s{i}"}}
                                         for i in range(300)])
    assert await _kids(edb) == {"k1": 300}
    async with App(settings_for(dsn, f"{K2},{K1}"), pipelines=pipelines) as new:
        assert (await new.keys.status()).stale == 300
        batches: list[tuple[str, int, int]] = []

        async def produce() -> list:
            return [(await new.enqueue("enc.echo", {"n": 1000 + i, "secret": f"s{1000 + i}"}, queue="rot")).id
                    for i in range(60)]

        during, report = await asyncio.gather(
            produce(), new.keys.rotate(batch_size=40, on_batch=lambda *b: batches.append(b)))
        assert report.rewritten["dl_jobs.args"] == 300 and report.unreadable == {}
        assert len([b for b in batches if b[0] == "dl_jobs.args"]) >= 300 // 40  # small batches, with progress
        status = await new.keys.status()
        assert status.stale == 0 and status.current == "k2"
        assert [(k.kid, k.envelopes) for k in status.keys] == [("k2", 360), ("k1", 0)]
    assert await _kids(edb) == {"k2": 360}
    async with App(settings_for(dsn, K2), pipelines=pipelines) as only_new:  # the old key removed
        for n, job_id in [*enumerate(before), *((1000 + i, j) for i, j in enumerate(during))]:
            job = await only_new.get(job_id)
            assert job.args == {"n": n, "secret": f"s{n}"}
        again = await only_new.keys.rotate()
        assert again.total_rewritten == 0 and again.examined >= 360  # resumable: what is current is skipped
    # each rotation is in the audit trail, after its batches, with what it did
    rotations = await edb.fetch("SELECT target_id, details FROM dl_audit WHERE action = 'keys.rotate' ORDER BY ts")
    assert [r["target_id"] for r in rotations][-2:] == ["k2", "k2"]
    assert rotations[-1]["details"]["examined"] >= 360 and rotations[-1]["details"]["unreadable"] == {}


async def test_a_job_under_a_missing_key_fails_alone_and_names_the_key(edb: asyncpg.Pool, dsn: str):
    async with App(settings_for(dsn, K1), pipelines=pipelines) as old:
        orphan = await old.enqueue("enc.echo", {"secret": "x"}, queue="miss")
    unreadable = metrics.PAYLOADS_UNREADABLE.labels("k1")
    before = unreadable._value.get()
    async with App(settings_for(dsn, K2), pipelines=pipelines) as app:
        healthy = await app.enqueue("enc.echo", {"secret": "y"}, queue="miss")
        sealed = (await app.get(orphan.id)).args
        assert type(sealed) is Sealed and sealed.kid == "k1" and "'k1'" in sealed.problem
        result = await drain(app, "miss", timeout=10)
        assert [j.id for j in result.succeeded] == [healthy.id]
        failed = await app.get(orphan.id)
        assert failed.status == "failed" and "'k1'" in failed.error and "DL_ENCRYPTION_KEYS" in failed.error
        assert failed.attempt == 1  # fatal: no retry can find the key
        status = await app.keys.status()
        assert [(k.kid, k.fingerprint is None) for k in status.keys] == [("k2", False), ("k1", True)]
        report = await app.keys.rotate()
        assert report.unreadable == {"k1": 1}
    assert unreadable._value.get() > before  # dl_encryption_unreadable_total{kid="k1"}


async def test_key_commands_without_keys_and_bad_batch_sizes(edb: asyncpg.Pool, dsn: str):
    async with App(settings_for(dsn, None)) as app:
        assert (await app.keys.status()).to_dict()["enabled"] is False
        with pytest.raises(EncryptionOff):
            await app.keys.rotate()
        for bad in (0, -1, 10_001, "5", True):
            with pytest.raises(ValidationFailed):
                await app.keys.rotate(batch_size=bad)


async def test_the_sync_facade_has_the_key_commands(edb: asyncpg.Pool, dsn: str):
    def use() -> tuple[bool, int]:
        with SyncApp(settings_for(dsn, f"{K2},{K1}")) as app:
            return app.keys.status().enabled, app.keys.rotate(batch_size=10).total_rewritten

    assert await asyncio.to_thread(use) == (True, 0)
