"""The embedded server is shared by every process using its data directory (pgserver counts them)
and stops only when the last one leaves: a command says "stopped" only when it really stopped it."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys

import asyncpg
import pytest

from dataloader.storage.embedded import EmbeddedPostgres

pytestmark = pytest.mark.process  # starts its own embedded servers and `dataloader` commands

STOPPED = "embedded PostgreSQL stopped"
LEFT_RUNNING = "embedded PostgreSQL left running for its other users"


def cli_messages(data_dir: str, *args: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DL_", "WORKERS_JSON"))}
    env.update({"DL_DATA_DIR": data_dir, "DL_LOG_FORMAT": "json", "DL_LOG_LEVEL": "INFO"})
    proc = subprocess.run([sys.executable, "-m", "dataloader", *args], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line)["message"] for line in proc.stderr.splitlines() if line.startswith("{")]


async def test_stop_is_reported_only_when_the_server_really_stops(server_dir, caplog: pytest.LogCaptureFixture):
    data_dir = str(server_dir / "pgdata")

    # Alone, a command starts the server and stops it when it leaves.
    alone = await asyncio.to_thread(cli_messages, data_dir, "db", "upgrade")
    assert STOPPED in alone and LEFT_RUNNING not in alone

    # With another user (this process), the command leaves it running and says so.
    holder = EmbeddedPostgres(server_dir / "pgdata")
    dsn = await asyncio.to_thread(holder.start)
    try:
        shared = await asyncio.to_thread(cli_messages, data_dir, "db", "upgrade")
        assert LEFT_RUNNING in shared and STOPPED not in shared, shared
        conn = await asyncpg.connect(dsn)  # and it really is still running
        assert await conn.fetchval("SELECT 1") == 1
        await conn.close()
    finally:
        # only what stop() logs: an earlier test in this process (under xdist, any of them) may have
        # left the dataloader logger at INFO, and then start()'s "ready" is captured too
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="dataloader.storage.embedded"):
            stopped = await asyncio.to_thread(holder.stop)
    # The last user leaving stops it, and says so.
    assert stopped is True
    assert [r.getMessage() for r in caplog.records if r.name == "dataloader.storage.embedded"] == [STOPPED]
    with pytest.raises(OSError):
        await asyncpg.connect(dsn, timeout=5)
