"""Keys and an App with encryption at rest for the tests of docs/security.md "Encryption at rest"."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import asyncpg
import pytest

from dataloader import App, Settings
from dataloader.model import payload_crypto
from dataloader.workers.pipelines.registry import PipelineRegistry

# Fixed test keys (they protect nothing): the same in every xdist worker, so parametrized ids agree.
K1 = "k1:" + base64.urlsafe_b64encode(b"test key one, 32 bytes long ....").decode()
K2 = "k2:" + base64.urlsafe_b64encode(b"test key two, 32 bytes long ....").decode()

pipelines = PipelineRegistry()


async def _echo(ctx):  # what it was given comes back as its result, and as its progress on the way
    await ctx.progress({"seen": ctx.args})
    return {"echo": ctx.args}


pipelines.register("enc.echo", _echo)


def settings_for(dsn: str, keys: str | None = K1, **overrides: object) -> Settings:
    values: dict[str, object] = {"db_dsn": dsn, "workers": [], "poll_fallback_sec": 1,
                                 "encryption_keys": keys, "encryption_clear_fields": "tenant,enc.echo:region"}
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
async def edb(db: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    """`db` (dl_jobs and with it every workflow table emptied), the process tables emptied too: a
    count of envelopes sees only this test's."""
    await db.execute("TRUNCATE dl_process_feed, dl_process_events, dl_process_tasks, dl_processes")
    yield db


@pytest.fixture
async def enc_app(edb: asyncpg.Pool, dsn: str) -> AsyncIterator[App]:
    async with App(settings_for(dsn), pipelines=pipelines) as app:
        yield app
    assert payload_crypto.active() is None  # the last App out turned encryption off again
