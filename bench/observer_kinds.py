"""Observer kinds of `bench/observers.py` (loaded by its worker processes via DL_PIPELINE_MODULES).

`bench.idle` does nothing until stopped: the idle fleet whose database cost is measured.
`bench.probe` writes one row when it starts (the moment a moved observer runs again) and holds
the advisory lock of its name on a connection of its own (a second copy would find it taken and
write an `overlap` row).
"""

from __future__ import annotations

import os

import asyncpg

from dataloader.observers import ObserverContext, observer

DDL = """
CREATE TABLE IF NOT EXISTS bench_observer_events (
  id bigserial PRIMARY KEY, name text NOT NULL, node text NOT NULL, kind text NOT NULL,
  at timestamptz NOT NULL DEFAULT clock_timestamp())
"""


@observer("bench.idle")
async def idle(ctx: ObserverContext) -> None:
    await ctx.stopping.wait()


@observer("bench.probe")
async def probe(ctx: ObserverContext) -> None:
    conn = await asyncpg.connect(os.environ["DL_DB_DSN"])
    try:
        if not await conn.fetchval("SELECT pg_try_advisory_lock(hashtext('obs:' || $1))", ctx.name):
            await conn.execute("INSERT INTO bench_observer_events (name, node, kind) VALUES ($1, $2, 'overlap')",
                               ctx.name, ctx.node_name)
            await conn.execute("SELECT pg_advisory_lock(hashtext('obs:' || $1))", ctx.name)
        await conn.execute("INSERT INTO bench_observer_events (name, node, kind) VALUES ($1, $2, 'start')",
                           ctx.name, ctx.node_name)
        await ctx.stopping.wait()
    finally:
        await conn.close()
