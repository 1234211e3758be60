"""Observer kinds of the tests (loaded like tests.support.pipelines, in-process and in worker
subprocesses through DL_PIPELINE_MODULES).

`test.probe` proves "never two copies": on a connection of its own (application_name
`probe:<node>`, so the test counts what really runs per node) it takes the advisory lock of its
name; not getting it means another copy runs right now, and is written down as an `overlap` event
before waiting for the lock. Every start and stop is an event row with the node, pid and epoch.
"""

from __future__ import annotations

import asyncio
import os
import time

import asyncpg

from dataloader.observers import ObserverContext, observer

EVENTS_DDL = """
CREATE TABLE IF NOT EXISTS test_observer_events (
  id bigserial PRIMARY KEY, name text NOT NULL, node text NOT NULL, pid int NOT NULL, epoch bigint NOT NULL,
  kind text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS test_feed (seq bigint PRIMARY KEY, payload text NOT NULL);
CREATE TABLE IF NOT EXISTS test_feed_seen (observer text NOT NULL, seq bigint NOT NULL, node text NOT NULL,
  PRIMARY KEY (observer, seq));
CREATE TABLE IF NOT EXISTS test_feed_reads (id bigserial PRIMARY KEY, observer text NOT NULL, node text NOT NULL,
  epoch bigint NOT NULL, after_seq bigint NOT NULL, seqs bigint[] NOT NULL);
"""


async def _event(conn: asyncpg.Connection, ctx: ObserverContext, kind: str) -> None:
    await conn.execute("INSERT INTO test_observer_events (name, node, pid, epoch, kind) VALUES ($1, $2, $3, $4, $5)",
                       ctx.name, ctx.node_name, os.getpid(), ctx.epoch, kind)


@observer("test.probe")
async def probe(ctx: ObserverContext) -> None:
    conn = await asyncpg.connect(ctx.args["dsn"], server_settings={"application_name": f"probe:{ctx.node_name}"})
    try:
        if not await conn.fetchval("SELECT pg_try_advisory_lock(hashtext('obs:' || $1))", ctx.name):
            await _event(conn, ctx, "overlap")
            await conn.execute("SELECT pg_advisory_lock(hashtext('obs:' || $1))", ctx.name)
        await _event(conn, ctx, "start")
        while not await ctx.sleep(ctx.args.get("tick_sec", 0.5)):
            if ctx.args.get("save"):
                await ctx.save({"ticks": (ctx.checkpoint or {}).get("ticks", 0) + 1})
        await _event(conn, ctx, "stop")
    finally:
        await asyncio.shield(conn.close())


@observer("test.crash")
async def crash(ctx: ObserverContext) -> None:
    conn = await asyncpg.connect(ctx.args["dsn"])
    try:
        await _event(conn, ctx, "start")
    finally:
        await conn.close()
    await ctx.sleep(ctx.args.get("after_sec", 0.05))
    raise RuntimeError("boom")


@observer("test.sync")
def sync_observer(ctx: ObserverContext) -> None:
    ctx.save_blocking(status={"thread": True})
    while not ctx.sleep_blocking(0.05):
        time.sleep(0.01)


@observer("test.stubborn")
async def stubborn(ctx: ObserverContext) -> None:
    """Ignores its stop request: only the cancel after the grace period ends it."""
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise


@observer("test.feed")
async def follow_feed(ctx: ObserverContext) -> None:
    """The worked example of docs/observers.md: follow a feed (rows of test_feed in seq order),
    store what it sees, and resume from its own saved position after a move. Every read is also
    written down whole in test_feed_reads (the position it read after and the seqs it got, even none),
    which test_feed_seen's ON CONFLICT DO NOTHING would hide: a copy that re-read from 0 shows there."""
    conn = await asyncpg.connect(ctx.args["dsn"])
    try:
        position = (ctx.checkpoint or {}).get("seq", 0)
        while not ctx.stop_requested:
            rows = await conn.fetch("SELECT seq, payload FROM test_feed WHERE seq > $1 ORDER BY seq LIMIT 100",
                                    position)
            await conn.execute("INSERT INTO test_feed_reads (observer, node, epoch, after_seq, seqs) "
                               "VALUES ($1, $2, $3, $4, $5)", ctx.name, ctx.node_name, ctx.epoch, position,
                               [r["seq"] for r in rows])
            for row in rows:
                await conn.execute("INSERT INTO test_feed_seen (observer, seq, node) VALUES ($1, $2, $3) "
                                   "ON CONFLICT DO NOTHING", ctx.name, row["seq"], ctx.node_name)
                position = row["seq"]
            if rows:
                await ctx.save({"seq": position}, status={"seen_up_to": position})
            elif await ctx.sleep(0.1):
                break
    finally:
        await conn.close()
