"""Two Patroni-managed PostgreSQL servers and a local etcd for failover tests (docs/scaling.md
"Patroni"), started by the test in a temporary directory on free ports with Debian's `patroni`
(3.0.x, the etcd v3 API) and `etcd-server` (3.4) and PostgreSQL's own binaries.

Patroni bootstraps the first node (initdb), the second clones it with `pg_basebackup` and streams
from it; `synchronous_mode` is on, so Patroni names the replica in `synchronous_standby_names` and
only a synchronous replica may be promoted. The primary's host dies by kill -9 of its Patroni and of
every process of its PostgreSQL at once; the replica's Patroni sees the leader key expire in etcd
(`ttl`) and promotes it, rewriting `synchronous_standby_names` since no standby is left.

As root, Patroni and its servers run as `postgres` (PostgreSQL refuses to run as root)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.components import etcd, patroni, pg_bin
from tests.support.pgbouncer import free_port
from tests.support.replication import SERVER_USER, kill_server, server_user

# Detection: the leader key lives `ttl` seconds after its last refresh; Patroni refreshes it (and
# the replica looks at it) every `loop_wait`; `retry_timeout` bounds a DCS or PostgreSQL call.
# Patroni's defaults are 30/10/10 s; these put the switch at ~ttl, inside a test's time budget.
# Patroni keeps loop_wait + 2 * retry_timeout <= ttl.
TTL_SEC = 10
LOOP_WAIT_SEC = 1
RETRY_TIMEOUT_SEC = 4


@dataclass
class PatroniNode:
    name: str
    pg_port: int
    api_port: int
    dir: Path
    proc: subprocess.Popen[bytes] | None = None
    log_file: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_file = self.dir / "patroni.log"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    def api(self, path: str, timeout: float = 2) -> tuple[int, dict | None]:
        """GET Patroni's REST API: (status, body) or (0, None) when it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}{path}", timeout=timeout) as answer:
                return answer.status, json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as refused:
            body = refused.read()
            try:
                return refused.code, json.loads(body or b"null")
            except ValueError:
                return refused.code, None
        except (OSError, ValueError):
            return 0, None


class PatroniCluster:
    def __init__(self, *, ttl: int = TTL_SEC, loop_wait: int = LOOP_WAIT_SEC,
                 retry_timeout: int = RETRY_TIMEOUT_SEC) -> None:
        self.patroni = patroni()
        self.etcd_binary = etcd()
        self.bin = pg_bin()
        self.ttl, self.loop_wait, self.retry_timeout = ttl, loop_wait, retry_timeout
        self.dir = Path(tempfile.mkdtemp(prefix="dl-patroni-"))
        self.scope = f"dl-{self.dir.name.rsplit('-', 1)[-1]}"
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.etcd_proc: subprocess.Popen[bytes] | None = None
        self.nodes = [PatroniNode(name=f"pg{i}", pg_port=free_port(), api_port=free_port(), dir=self.dir / f"pg{i}")
                      for i in (1, 2)]
        self.user = server_user()
        for node in self.nodes:
            node.dir.mkdir()
        if self.user is not None:
            for path in (self.dir, *(node.dir for node in self.nodes)):
                os.chown(path, self.user.pw_uid, self.user.pw_gid)
        self.dir.chmod(0o755)

    # -- addresses --------------------------------------------------------------------------------

    def dsn(self, database: str = "postgres", *, port: int | None = None) -> str:
        return f"postgresql://{SERVER_USER}@127.0.0.1:{port or self.nodes[0].pg_port}/{database}"

    def multi_host_dsn(self, database: str) -> str:
        """Both servers, the one that accepts writes chosen at each connect (asyncpg, libpq)."""
        hosts = ",".join(f"127.0.0.1:{node.pg_port}" for node in self.nodes)
        return f"postgresql://{SERVER_USER}@{hosts}/{database}?target_session_attrs=read-write"

    # -- life cycle -------------------------------------------------------------------------------

    def start(self) -> PatroniCluster:
        self._start_etcd()
        self._start_node(self.nodes[0])
        self.wait_for(lambda: self.leader() is self.nodes[0], "the first node to become the leader", 90)
        self._start_node(self.nodes[1])
        self.wait_for(lambda: self.role(self.nodes[1]) == "sync_standby",
                      "the second node to stream as the synchronous standby", 90)
        return self

    def _start_etcd(self) -> None:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        command = [self.etcd_binary, "--name", "etcd1", "--data-dir", str(self.dir / "etcd"),
                   "--listen-client-urls", client, "--advertise-client-urls", client,
                   "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                   "--initial-cluster", f"etcd1={peer}", "--initial-cluster-state", "new",
                   "--initial-cluster-token", self.scope]
        with (self.dir / "etcd.log").open("wb") as log:
            self.etcd_proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=1) as answer:
                    return json.loads(answer.read()).get("health") == "true"
            except (OSError, ValueError):
                return False

        self.wait_for(healthy, "etcd to answer", 30)

    def _config(self, node: PatroniNode) -> dict:
        hba = ["local all all trust", "host all all 127.0.0.1/32 trust",
               "host replication all 127.0.0.1/32 trust"]
        return {
            "scope": self.scope, "namespace": "/dataloader-test/", "name": node.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": f"127.0.0.1:{node.api_port}", "connect_address": f"127.0.0.1:{node.api_port}"},
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_port}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": self.ttl, "loop_wait": self.loop_wait, "retry_timeout": self.retry_timeout,
                    "maximum_lag_on_failover": 1048576,
                    # a commit is acknowledged once the synchronous replica has it; only that replica
                    # may be promoted; alone, the new primary drops the name instead of waiting
                    "synchronous_mode": True, "synchronous_mode_strict": False,
                    "postgresql": {
                        "use_pg_rewind": False, "use_slots": True,
                        "parameters": {"max_connections": 300, "wal_level": "replica", "hot_standby": "on",
                                       "max_wal_senders": 5, "max_replication_slots": 5,
                                       "wal_keep_size": "256MB"},
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}, {"username": SERVER_USER}],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.pg_port}", "connect_address": f"127.0.0.1:{node.pg_port}",
                "data_dir": str(node.data_dir), "bin_dir": str(self.bin), "pgpass": str(node.dir / "pgpass"),
                "authentication": {"superuser": {"username": SERVER_USER},
                                   "replication": {"username": SERVER_USER}},
                "parameters": {"unix_socket_directories": str(node.dir), "shared_buffers": "64MB",
                               "fsync": "off", "full_page_writes": "off"},
                "pg_hba": hba,
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
        }

    def _start_node(self, node: PatroniNode) -> None:
        config = node.dir / "patroni.yml"
        config.write_text(json.dumps(self._config(node), indent=1))  # JSON is YAML
        env = {**os.environ, "PATRONI_LOG_DIR": ""}
        env.pop("PATRONI_LOG_DIR")
        kwargs: dict = {}
        if self.user is not None:
            os.chown(config, self.user.pw_uid, self.user.pw_gid)
            kwargs = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": [],
                      "env": {**env, "HOME": self.user.pw_dir, "USER": SERVER_USER}}
        with node.log_file.open("ab") as log:
            node.proc = subprocess.Popen([self.patroni, str(config)], stdout=log, stderr=subprocess.STDOUT,
                                         cwd=node.dir, **kwargs)

    # -- state ------------------------------------------------------------------------------------

    def role(self, node: PatroniNode) -> str | None:
        """The node's role in Patroni's view of the cluster (leader, sync_standby, replica), once it
        is running."""
        for other in self.nodes:
            status, cluster = other.api("/cluster")
            if status == 200 and cluster:
                for member in cluster.get("members", []):
                    if member.get("name") == node.name and member.get("state") in ("running", "streaming"):
                        return member.get("role")
                return None
        return None

    def leader(self) -> PatroniNode | None:
        """The node whose PostgreSQL is the primary (Patroni's GET /primary answers 200)."""
        return next((node for node in self.nodes if node.api("/primary")[0] == 200), None)

    def wait_for(self, done, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}\n{self.logs()}")
            time.sleep(0.1)

    # -- the host that dies -----------------------------------------------------------------------

    def kill_primary(self) -> tuple[float, PatroniNode]:
        """kill -9 the leader's Patroni, its postmaster and every process of its server at once (a
        host that died); returns the wall-clock time of the kill and the node that is left."""
        leader = self.leader()
        assert leader is not None and leader.proc is not None, f"no leader\n{self.logs()}"
        killed_at = kill_server(leader.data_dir, also=[leader.proc.pid])
        leader.proc.wait(10)
        return killed_at, next(node for node in self.nodes if node is not leader)

    def wait_promoted(self, node: PatroniNode, timeout: float = 60) -> float:
        """Until Patroni has promoted `node` and its server accepts writes; returns when it did."""
        self.wait_for(lambda: node.api("/primary")[0] == 200 and self._writable(node),
                      f"Patroni to promote {node.name}", timeout)
        return time.time()

    def _writable(self, node: PatroniNode) -> bool:
        done = subprocess.run(
            [str(self.bin / "psql") if (self.bin / "psql").exists() else "psql", "-h", "127.0.0.1",
             "-p", str(node.pg_port), "-U", SERVER_USER, "-d", "postgres", "-Atc",
             "SELECT NOT pg_is_in_recovery() AND current_setting('synchronous_standby_names') = ''"],
            capture_output=True, text=True, timeout=10)
        return done.returncode == 0 and done.stdout.strip() == "t"

    def logs(self, tail: int = 2000) -> str:
        parts = []
        for path in (self.dir / "etcd.log", *(node.log_file for node in self.nodes)):
            text = path.read_text(errors="replace") if path.exists() else ""
            parts.append(f"--- {path.name if path.parent == self.dir else path.parent.name + '/' + path.name}:\n"
                         f"{text[-tail:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.terminate()  # Patroni stops its PostgreSQL (fast shutdown) and exits
                try:
                    node.proc.wait(30)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    node.proc.wait(10)
            if (node.data_dir / "postmaster.pid").exists():
                kill_server(node.data_dir)
        if self.etcd_proc is not None and self.etcd_proc.poll() is None:
            self.etcd_proc.kill()
            self.etcd_proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PatroniCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
