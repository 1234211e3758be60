"""Fixtures of the hardening tests (tests/api, tests/jobs, tests/storage, tests/node): an App and an
HTTP client on the test database. Registered for the whole suite by tests/conftest.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest

from dataloader.app import App
from tests.api.v1.conftest import api_settings, client_for
from tests.support.api_apps import api_for


@pytest.fixture(scope="session")
async def hardening_ctx(dsn: str) -> AsyncIterator[App]:
    ctx = await App(api_settings(dsn, workers_json='[{"queue": "poison", "concurrency": 2}]')).open()
    yield ctx
    await ctx.close()


@pytest.fixture
async def http(db: asyncpg.Pool, hardening_ctx: App) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(api_for(hardening_ctx)) as client:
        yield client
