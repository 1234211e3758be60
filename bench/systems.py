"""The three systems under test: how to run each one's driver and workers, and the SQL that reads
progress and timings back from each system's own tables."""

from __future__ import annotations

import base64
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench import peers_venv

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
QUEUE = "bench"


@dataclass(frozen=True)
class System:
    name: str
    python: str
    driver: Path
    # Any unfinished job left? Cheap (LIMIT 1 on an index) so it can run every 50 ms.
    pending_sql: str
    # Unfinished jobs, counted: run every 250 ms for the RSS-versus-progress samples.
    count_sql: str
    # first handler start, last finish, succeeded count, from the system's own bookkeeping.
    span_sql: str
    # Per-key serialization: what the handoff measure uses, or None if the system has none.
    serial_feature: str | None
    notes: list[str] = field(default_factory=list)

    def env(self, marks_dir: Path | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("DL_", "WORKERS_JSON", "PG", "BENCH_MARKS"))}
        # The driver scripts import bench.marks / bench.driver_cli from the repository.
        env["PYTHONPATH"] = str(ROOT)
        env["PYTHONUNBUFFERED"] = "1"
        if marks_dir is not None:
            env["BENCH_MARKS_DIR"] = str(marks_dir)
        return env

    def driver_argv(self, action: str, dsn: str, *extra: str) -> list[str]:
        return [self.python, str(self.driver), action, "--dsn", dsn, *extra]

    def worker_argv(self, dsn: str, concurrency: int, serial: bool) -> list[str]:
        return self.driver_argv("worker", dsn, "--concurrency", str(concurrency),
                                *(["--serial"] if serial else []))

    def worker_env(self, dsn: str, concurrency: int, marks_dir: Path) -> dict[str, str]:
        return self.env(marks_dir)


# Where dataloader's code is imported from in every dataloader process of a run: a snapshot of
# `src/` at the commit under test (see cli.py --ref), so the engine cannot change under a run
# while others commit to the working tree. Defaults to the live tree.
_dataloader_src: Path = ROOT / "src"


def set_dataloader_src(path: Path) -> None:
    global _dataloader_src
    _dataloader_src = path


def dataloader_src() -> Path:
    return _dataloader_src


class Dataloader(System):
    """Workers are the real CLI (`python -m dataloader worker`), configured by environment."""

    def env(self, marks_dir: Path | None = None) -> dict[str, str]:
        env = super().env(marks_dir)
        # Ahead of the editable install's path entry (a .pth, which comes after PYTHONPATH).
        env["PYTHONPATH"] = os.pathsep.join([str(_dataloader_src), str(ROOT)])
        return env

    def worker_argv(self, dsn: str, concurrency: int, serial: bool) -> list[str]:
        return [self.python, "-m", "dataloader", "worker"]

    def worker_env(self, dsn: str, concurrency: int, marks_dir: Path) -> dict[str, str]:
        env = self.env(marks_dir)
        env.update({
            "DL_DB_DSN": dsn,
            "WORKERS_JSON": json.dumps([{"queue": QUEUE, "concurrency": concurrency}]),
            "DL_LOG_LEVEL": "WARNING",
            "DL_PIPELINE_MODULES": "bench.drivers.dl_pipelines",
        })
        # A setting to try on the workers only: BENCH_WORKER_DL_CLAIM_LANES=1 sets DL_CLAIM_LANES=1.
        env.update({k.removeprefix("BENCH_WORKER_"): v for k, v in os.environ.items()
                    if k.startswith("BENCH_WORKER_DL_")})
        return env


DATALOADER = Dataloader(
    name="dataloader",
    python=sys.executable,
    driver=BENCH / "drivers" / "dataloader_driver.py",
    pending_sql="SELECT 1 FROM dl_jobs WHERE status IN ('queued', 'running') LIMIT 1",
    count_sql="SELECT count(*) FROM dl_jobs WHERE status IN ('queued', 'running')",
    span_sql="""SELECT min(started_at) AS first_start, max(finished_at) AS last_finish,
                       count(*) FILTER (WHERE status = 'succeeded') AS succeeded
                FROM dl_jobs""",
    serial_feature="lock_key (all 200 jobs on one key)",
)

class PayloadDataloader(Dataloader):
    """dataloader whose jobs carry a payload (BENCH_DL_PAYLOAD: the drivers add ~200 bytes of args
    to every job), with encryption at rest on (`dataloader_enc`: DL_ENCRYPTION_KEYS in every
    process of the run) or off (`dataloader_payload`): the pair of one run is what encryption
    costs on the same jobs (docs/security.md "What it costs")."""

    encrypted: bool = False

    def env(self, marks_dir: Path | None = None) -> dict[str, str]:
        env = super().env(marks_dir)
        env["BENCH_DL_PAYLOAD"] = "1"
        if self.encrypted:
            env["DL_ENCRYPTION_KEYS"] = BENCH_KEY
        return env


class EncryptedDataloader(PayloadDataloader):
    encrypted = True


# A fixed key for benchmarks only (it protects nothing): 32 bytes, base64.
BENCH_KEY = "bench:" + base64.urlsafe_b64encode(b"dataloader bench key, not secret").decode()


def _variant(cls: type[PayloadDataloader], name: str, note: str) -> PayloadDataloader:
    return cls(name=name, python=sys.executable, driver=DATALOADER.driver, pending_sql=DATALOADER.pending_sql,
               count_sql=DATALOADER.count_sql, span_sql=DATALOADER.span_sql,
               serial_feature=DATALOADER.serial_feature, notes=[note])


DATALOADER_PAYLOAD = _variant(PayloadDataloader, "dataloader_payload", "jobs with ~200 bytes of args, stored clear")
DATALOADER_ENC = _variant(EncryptedDataloader, "dataloader_enc",
                          "jobs with ~200 bytes of args, encrypted at rest (AES-256-GCM, DL_ENCRYPTION_KEYS)")

PGQUEUER = System(
    name="pgqueuer",
    python=str(peers_venv.PYTHON),
    driver=BENCH / "peers" / "pgqueuer_driver.py",
    # A finished job is deleted from `pgqueuer` (and logged to pgqueuer_log) when the worker's
    # status buffer flushes, so an empty table means drained.
    pending_sql="SELECT 1 FROM pgqueuer LIMIT 1",
    count_sql="SELECT count(*) FROM pgqueuer",
    span_sql="""SELECT min(created) FILTER (WHERE status = 'picked') AS first_start,
                       max(created) FILTER (WHERE status = 'successful') AS last_finish,
                       count(*) FILTER (WHERE status = 'successful') AS succeeded
                FROM pgqueuer_log""",
    serial_feature="entrypoint concurrency_limit=1 (no per-key lock; one entrypoint = one key)",
)

PROCRASTINATE = System(
    name="procrastinate",
    python=str(peers_venv.PYTHON),
    driver=BENCH / "peers" / "procrastinate_driver.py",
    pending_sql="SELECT 1 FROM procrastinate_jobs WHERE status IN ('todo', 'doing') LIMIT 1",
    count_sql="SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')",
    span_sql="""SELECT min(at) FILTER (WHERE type = 'started') AS first_start,
                       max(at) FILTER (WHERE type = 'succeeded') AS last_finish,
                       count(*) FILTER (WHERE type = 'succeeded') AS succeeded
                FROM procrastinate_events""",
    serial_feature="lock= (task.configure(lock='serial'))",
)

ALL: dict[str, System] = {s.name: s for s in (DATALOADER, PGQUEUER, PROCRASTINATE)}
# Not in the default set (a run compares the peers); name them: --systems dataloader_payload,dataloader_enc
VARIANTS: dict[str, System] = {s.name: s for s in (DATALOADER_PAYLOAD, DATALOADER_ENC)}
