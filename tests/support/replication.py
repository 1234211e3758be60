"""A real primary and a streaming standby for failover tests (docs/scaling.md "A standby that takes
over"), started by the test in a temporary directory on free ports with PostgreSQL's own binaries
(Debian's postgresql-NN: initdb, pg_ctl, pg_basebackup): the standby is a `pg_basebackup -R` copy,
replication is synchronous (`synchronous_standby_names`), the primary dies by kill -9 of every
process of its server, and the standby takes over by `pg_ctl promote`.

As root, the servers run as `postgres` (PostgreSQL refuses to run as root)."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tests.support.components import pg_bin
from tests.support.pgbouncer import free_port

SERVER_USER = "postgres"


class ReplicatedCluster:
    def __init__(self, *, synchronous: bool = True) -> None:
        self.bin = pg_bin()
        self.synchronous = synchronous
        self.dir = Path(tempfile.mkdtemp(prefix="dl-replica-"))
        self.primary_dir = self.dir / "primary"
        self.standby_dir = self.dir / "standby"
        self.primary_port = free_port()
        self.standby_port = free_port()
        user = server_user()
        self._as_user = user is not None
        if user is not None:
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        self.dir.chmod(0o755)

    # -- commands ---------------------------------------------------------------------------------

    def _run(self, tool: str, *args: str, timeout: float = 120) -> str:
        command = [str(self.bin / tool), *args]
        if self._as_user:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=self.dir)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr[-2000:]}")
        return done.stdout

    def dsn(self, database: str = "postgres", *, port: int | None = None) -> str:
        return f"postgresql://{SERVER_USER}@127.0.0.1:{port or self.primary_port}/{database}"

    def multi_host_dsn(self, database: str) -> str:
        """Both servers, the one that accepts writes chosen at each connect (asyncpg, libpq)."""
        return (f"postgresql://{SERVER_USER}@127.0.0.1:{self.primary_port},127.0.0.1:{self.standby_port}"
                f"/{database}?target_session_attrs=read-write")

    # -- life cycle -------------------------------------------------------------------------------

    def start(self) -> ReplicatedCluster:
        self._run("initdb", "-D", str(self.primary_dir), "-U", SERVER_USER, "--auth=trust", "-E", "UTF8")
        settings = {
            "listen_addresses": "'127.0.0.1'", "port": str(self.primary_port),
            "unix_socket_directories": f"'{self.dir}'", "wal_level": "replica", "max_wal_senders": "5",
            "max_connections": "300", "shared_buffers": "64MB", "fsync": "off", "full_page_writes": "off",
            "wal_keep_size": "256MB", "hot_standby": "on",
            # a commit is acknowledged once the standby has it on disk: what the failover test proves
            "synchronous_standby_names": "'standby1'" if self.synchronous else "''",
        }
        with (self.primary_dir / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{k} = {v}\n" for k, v in settings.items())
        self._run("pg_ctl", "-D", str(self.primary_dir), "-l", str(self.dir / "primary.log"), "-w", "start")
        self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary_port), "-U", SERVER_USER,
                  "-D", str(self.standby_dir), "-R", "-X", "stream", "--checkpoint=fast")
        with (self.standby_dir / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"port = {self.standby_port}\n")
            # The base backup copied the primary's synchronous_standby_names. Promoted with it, the
            # new primary would wait forever for a standby it does not have: every commit hangs (a
            # manager such as Patroni rewrites it at promotion; here the standby simply has none).
            conf.write("synchronous_standby_names = ''\n")
            conf.write(f"primary_conninfo = 'host=127.0.0.1 port={self.primary_port} user={SERVER_USER} "
                       "application_name=standby1'\n")
        self._run("pg_ctl", "-D", str(self.standby_dir), "-l", str(self.dir / "standby.log"), "-w", "start")
        return self

    def wait_streaming(self, timeout: float = 60) -> None:
        """Until the primary reports the standby streaming (and synchronous, when it should be)."""
        want = "sync" if self.synchronous else "async"
        deadline = time.monotonic() + timeout
        while True:
            state = self.psql(self.primary_port, "SELECT sync_state FROM pg_stat_replication "
                                                 "WHERE application_name = 'standby1'").strip()
            if state == want:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby is not streaming ({state!r}): {self.log('standby')[-2000:]}")
            time.sleep(0.1)

    def psql(self, port: int, query: str, database: str = "postgres") -> str:
        return self._run("psql", "-h", "127.0.0.1", "-p", str(port), "-U", SERVER_USER, "-d", database,
                         "-Atc", query) if (self.bin / "psql").exists() else self._psql_path(port, query, database)

    def _psql_path(self, port: int, query: str, database: str) -> str:
        done = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(port), "-U", SERVER_USER, "-d", database,
                               "-Atc", query], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
        return done.stdout

    def kill_primary(self) -> float:
        """kill -9 the primary's postmaster and every process of its server at once (a host that
        died); returns the wall-clock time of the kill."""
        return kill_server(self.primary_dir)

    def promote(self) -> float:
        """`pg_ctl promote` the standby and wait until it accepts writes; returns when it did."""
        self._run("pg_ctl", "-D", str(self.standby_dir), "-w", "promote")
        return time.time()

    def log(self, which: str) -> str:
        path = self.dir / f"{which}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        for data in (self.primary_dir, self.standby_dir):
            if (data / "postmaster.pid").exists():
                try:
                    self._run("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop", timeout=60)
                except (RuntimeError, subprocess.TimeoutExpired):
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ReplicatedCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


def server_user() -> pwd.struct_passwd | None:
    """The account the servers run as: `postgres` when the tests run as root, else the caller."""
    return pwd.getpwnam(SERVER_USER) if os.geteuid() == 0 else None


def kill_server(data_dir: Path, *, also: Sequence[int] = ()) -> float:
    """kill -9 the postmaster of `data_dir`, every process of its server and the processes `also`
    (its manager) at once: a host that died. Returns the wall-clock time of the kill.

    The postmaster.pid of a server already killed stays behind; its pid is killed only while it is
    still that server's postmaster (its command line names the data directory), never a process
    that reused the number."""
    victims = list(also)
    try:
        pid = int((data_dir / "postmaster.pid").read_text().split()[0])
        if str(data_dir) in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
            victims += [pid, *_children(pid)]
    except (OSError, ValueError, IndexError):
        pass
    killed_at = time.time()
    for victim in victims:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return killed_at


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found
