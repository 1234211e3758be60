"""Every statement an idle node sends, counted in the node itself (exact, where the server's
counters flush late and sampling pg_stat_activity misses statements that follow each other fast).

    BENCH_DSN=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python -m bench.idle_statements \
        [--settle 15] [--window 60]

A fresh database, migrated; `App.running()` with the default settings (what `dataloader worker`
runs), and asyncpg's `Connection._execute` / `execute` wrapped to count each statement by the
first line of its SQL (the comment naming it) during the window. `BEGIN`/`COMMIT` count apart, so
statements per second are a little above transactions per second. `PYTHONPATH=<other src>` counts
another commit's node.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import time
from typing import Any

from asyncpg.connection import Connection

from bench.pg import Server, fresh_database
from dataloader.storage import migrate

counts: collections.Counter[str] = collections.Counter()
counting = False


def _name(query: str) -> str:
    lines = [line for line in query.strip().splitlines() if line.strip()]
    return (lines[0] if lines else query)[:100]


def _install_counters() -> None:
    execute, execute_prepared = Connection.execute, Connection._execute

    async def counted_execute(self: Connection, query: str, *args: Any, **kwargs: Any) -> Any:
        if counting and not args:  # with args, execute goes through _execute (counted there)
            counts[_name(query)] += 1
        return await execute(self, query, *args, **kwargs)

    async def counted_execute_prepared(self: Connection, query: str, *args: Any, **kwargs: Any) -> Any:
        if counting:
            counts[_name(query)] += 1
        return await execute_prepared(self, query, *args, **kwargs)

    Connection.execute = counted_execute  # type: ignore[method-assign]
    Connection._execute = counted_execute_prepared  # type: ignore[method-assign]


async def main(args: argparse.Namespace) -> dict[str, Any]:
    global counting
    admin = os.environ.get("BENCH_DSN")
    if not admin:
        raise SystemExit("set BENCH_DSN (a server that allows CREATE DATABASE)")
    _install_counters()
    from dataloader import App, Settings

    async with fresh_database(Server(admin_dsn=admin, kind="BENCH_DSN"), "idle_stmts") as dsn:
        await migrate.upgrade(dsn)
        app = App(Settings(db_dsn=dsn))
        await app.open()
        try:
            async with app.running():
                await asyncio.sleep(args.settle)
                counting, started = True, time.monotonic()
                await asyncio.sleep(args.window)
                counting, seconds = False, time.monotonic() - started
        finally:
            await app.close()
    import dataloader

    return {"src": os.path.dirname(dataloader.__file__), "window_sec": round(seconds, 2),
            "statements_per_sec": sum(counts.values()) / seconds, "load_average": os.getloadavg(),
            "statements": dict(counts.most_common())}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settle", type=float, default=15)
    parser.add_argument("--window", type=float, default=60)
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
