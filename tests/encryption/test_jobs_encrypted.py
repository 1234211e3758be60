"""Jobs' args, progress and results encrypted at rest: through enqueue, the worker and back, with
nothing readable in dl_jobs, the args search on the declared clear fields, and a job whose key is
missing failing alone (docs/security.md "Encryption at rest")."""

from __future__ import annotations

import json

import asyncpg

from dataloader import App
from dataloader.testing import drain

SECRET = "4111-1111-1111-1111"


async def _stored(db: asyncpg.Pool, job_id) -> dict:
    row = await db.fetchrow("SELECT args::text AS args, progress::text AS progress, result::text AS result "
                            "FROM dl_jobs WHERE job_id = $1", job_id)
    return dict(row)


async def test_a_job_round_trips_and_the_table_holds_no_clear_text(enc_app: App, edb: asyncpg.Pool):
    job = await enc_app.enqueue("enc.echo", {"card": SECRET, "tenant": "acme", "region": "eu"}, queue="enc")
    assert job.args == {"card": SECRET, "tenant": "acme", "region": "eu"}
    result = await drain(enc_app, "enc", timeout=10)
    assert [j.id for j in result.succeeded] == [job.id]
    done = await enc_app.get(job.id)
    assert done.args["card"] == SECRET
    assert done.result == {"echo": {"card": SECRET, "tenant": "acme", "region": "eu"}}
    stored = await _stored(edb, job.id)
    for column in ("args", "result"):
        assert SECRET not in stored[column] and '"$dl_enc": 1' in stored[column], (column, stored[column])
    args = json.loads(stored["args"])
    assert (args["kid"], args["tenant"], args["region"]) == ("k1", "acme", "eu")  # the declared clear fields
    assert SECRET not in stored["progress"]
