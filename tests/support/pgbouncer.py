"""A real PgBouncer in front of a test database, started by the test on a free port in a temporary
directory (docs/scaling.md "PgBouncer"). As root, PgBouncer refuses to run unless told a user:
it runs as the owner of the server's socket directory (the embedded server's `pgserver`), or as
`postgres` / `nobody` for a TCP server."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

from tests.support.components import pgbouncer


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgBouncer:
    """`PgBouncer(target_dsn, pool_mode="transaction")`: `.dsn` reaches the target's database
    through it. `stop()` ends it (SIGTERM, then kill)."""

    def __init__(self, target_dsn: str, *, pool_mode: str = "transaction", pool_size: int = 10,
                 max_client_conn: int = 500, ignore_startup_parameters: str = "") -> None:
        self.binary = pgbouncer()
        self.target_dsn = target_dsn
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.max_client_conn = max_client_conn
        # what operators add so clients' session settings pass (they are then dropped, not applied)
        self.ignore_startup_parameters = ignore_startup_parameters
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="dl-pgbouncer-"))
        self.proc: subprocess.Popen[bytes] | None = None
        parts = urlsplit(target_dsn)
        self.database = parts.path.lstrip("/")
        self.user = parts.username or "postgres"
        query = parse_qs(parts.query)
        self.host = query["host"][0] if "host" in query else (parts.hostname or "127.0.0.1")
        self.target_port = parts.port or 5432
        self.dsn = urlunsplit(("postgresql", f"{self.user}@127.0.0.1:{self.port}", f"/{self.database}", "", ""))

    def _run_as(self) -> str | None:
        if os.geteuid() != 0:
            return None
        if self.host.startswith("/"):
            return pwd.getpwuid(Path(self.host).stat().st_uid).pw_name
        for name in ("postgres", "nobody"):
            try:
                pwd.getpwnam(name)
                return name
            except KeyError:
                continue
        return None

    def start(self) -> PgBouncer:
        ini = self.dir / "pgbouncer.ini"
        (self.dir / "users.txt").write_text(f'"{self.user}" ""\n')
        ini.write_text(f"""[databases]
{self.database} = host={self.host} port={self.target_port} dbname={self.database} user={self.user}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.dir / "users.txt"}
pool_mode = {self.pool_mode}
default_pool_size = {self.pool_size}
max_client_conn = {self.max_client_conn}
logfile = {self.dir / "pgbouncer.log"}
server_login_retry = 1
admin_users = {self.user}
""" + (f"ignore_startup_parameters = {self.ignore_startup_parameters}\n" if self.ignore_startup_parameters else ""))
        user = self._run_as()
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
            for path in self.dir.iterdir():
                os.chown(path, entry.pw_uid, entry.pw_gid)
        command = [self.binary, *(["-u", user] if user else []), str(ini)]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"pgbouncer did not start: {self.log()[-2000:]}") from None
                time.sleep(0.05)

    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PgBouncer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
