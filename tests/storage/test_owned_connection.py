"""The owner of a queue worker's control connection (storage/owned_connection.py, issue 41): one
statement at a time, never used after it was given up, never again once its session ended."""

from __future__ import annotations

import asyncio
import time

import pytest

from dataloader.storage.db import is_connection_error
from dataloader.storage.owned_connection import ConnectionOwnershipError, OwnedConnection, SessionLost
from tests.conftest import wait_until


async def test_a_released_connection_refuses_every_use_and_is_back_in_the_pool(pool):
    owned = await OwnedConnection.acquire(pool, "test connection")
    assert await owned.fetchval("SELECT 1") == 1
    free = pool.get_idle_size()
    await owned.release()
    assert pool.get_idle_size() == free + 1
    for use in (owned.fetchval("SELECT 1"), owned.execute("SELECT 1")):
        with pytest.raises(ConnectionOwnershipError, match="used after its release"):
            await use
    with pytest.raises(ConnectionOwnershipError, match="used after its release"):
        async with owned.transaction():
            pass
    await owned.release()  # giving it up twice is harmless
    owned.terminate()


async def test_two_statements_at_once_on_one_owned_connection_are_a_bug_not_a_wait(pool):
    owned = await OwnedConnection.acquire(pool, "test connection")
    try:
        first = asyncio.ensure_future(owned.fetchval("SELECT pg_sleep(0.2)::text"))
        await asyncio.sleep(0.05)
        with pytest.raises(ConnectionOwnershipError, match="still runs on the same connection"):
            await owned.fetchval("SELECT 2")
        assert await first == ""
        assert await owned.fetchval("SELECT 3") == 3
    finally:
        await owned.release()


async def test_terminate_gives_the_connection_up_even_mid_statement_and_the_owner_refuses_every_use(pool):
    owned = await OwnedConnection.acquire(pool, "test connection")
    running = asyncio.ensure_future(owned.fetchval("SELECT pg_sleep(2)::text"))
    await asyncio.sleep(0.1)
    started = time.monotonic()
    owned.terminate()
    with pytest.raises(Exception) as raised:
        await running
    assert time.monotonic() - started < 1, "the statement was not cut off"
    assert is_connection_error(raised.value)
    with pytest.raises(ConnectionOwnershipError, match="used after its release"):
        await owned.fetchval("SELECT 1")


async def test_a_session_terminated_while_idle_is_lost_and_never_used_again(pool, db):
    owned = await OwnedConnection.acquire(pool, "test connection")
    pid = await owned.fetchval("SELECT pg_backend_pid()")
    await db.execute("SELECT pg_terminate_backend($1)", pid)
    await wait_until(lambda: owned.lost, timeout=5, message="the owner never saw its session end")
    with pytest.raises(SessionLost) as raised:
        await owned.fetchval("SELECT 1")
    assert is_connection_error(raised.value)  # weather: the worker reconnects
    await owned.release()  # asyncpg took it back already: nothing to release, no error
    with pytest.raises(ConnectionOwnershipError):
        await owned.fetchval("SELECT 1")
    async with pool.acquire() as conn:  # the pool serves a working connection
        assert await conn.fetchval("SELECT 1") == 1


async def test_a_transaction_commits_its_block_or_rolls_it_back(pool, db):
    await db.execute("CREATE TABLE IF NOT EXISTS test_owned_tx (n int)")
    await db.execute("TRUNCATE test_owned_tx")
    owned = await OwnedConnection.acquire(pool, "test connection")
    try:
        async with owned.transaction():
            await owned.execute("INSERT INTO test_owned_tx VALUES (1)")
        with pytest.raises(RuntimeError):
            async with owned.transaction():
                await owned.execute("INSERT INTO test_owned_tx VALUES (2)")
                raise RuntimeError("the step failed")
        assert await owned.fetchval("SELECT array_agg(n) FROM test_owned_tx") == [1]
    finally:
        await owned.release()
        await db.execute("DROP TABLE test_owned_tx")
