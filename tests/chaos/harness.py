"""The chaos harness: real nodes, bursts of HTTP enqueues, kill -9s, one PostgreSQL restart and one
SIGTERM, then a check of the engine's promises from the database and the journal alone.

Why it exists: the unit and process tests each break one thing at a time. Production breaks many
at once: a node dies while a client's request is in flight, the database restarts while leases are
being extended, a deploy SIGTERMs a node while the reaper hands back another's work. This harness
does all of that together, for as long as asked, and then checks, without trusting any process's
own account:

- every idempotency key acknowledged with 2xx is exactly one job (nothing lost, nothing doubled);
- every job reaches `succeeded` within a deadline (nothing stuck), none `failed`, no `retry`;
- one holder per lock_key: the pipelines' own probe lock (see pipelines.py) was never refused,
  and no two ended runs of one key overlap in time;
- the journal (`dl_job_events`) tells the same story as `dl_jobs`: a well-formed sequence per job
  whose `picked` count matches `attempt`, ending in `done`;
- the SIGTERMed node exits 0 and leaves nothing for the reaper (its jobs went back with
  `reason: shutdown` or finished);
- and, on the same nodes under the same chaos, the other capabilities (capabilities.py): every
  acknowledged process call applied once, one step at a time per process, timers firing; never two
  copies of an observer, all running at the end; one job per schedule tick; a bulk operation whose
  runner is killed mid-batch ends with exact counts, each job changed once.

Used by tests/chaos/test_chaos_short.py (a short run in the suite) and by `python -m tests.chaos`
(the long run, see docs/chaos.md).
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx

from tests.chaos.capabilities import Capabilities
from tests.chaos.limits import COPY_FLOW_STARTS_SQL, FLOW_STARTS_DDL, check_limits, limits_reached
from tests.chaos.nodes import NodeError, NodeSlot, free_port, node_env
from tests.chaos.pipelines import CONNECTION_ERRORS, OBSERVER_RUNS_DDL, RUNS_DDL, TASK
from tests.chaos.workflows import WF_STEPS_DDL, WorkflowLoad

# The longest the next kill waits for a node that lived through the restart to claim a job again.
RECOVERY_WAIT_SEC = 30.0

ROOT = Path(__file__).resolve().parents[2]
RestartFn = Callable[[], Awaitable[str]]

# requeue reasons that hand an attempt back without counting it (finish_jobs.sql: outcome release)
# claimed_ahead: a job claimed beyond the concurrency and given back unstarted (a shutdown, a reconnect,
# a lost lease, a wait past a heartbeat period; docs/architecture.md "Claiming ahead")
NOT_COUNTED_REASONS = {"shutdown", "lock_busy", "lease_lost", "claimed_ahead"}
# the reaper's two ways to take a dead node's attempt back: its lease ran out, or a node on its
# machine saw its pid gone (jobs/reaper.py)
TAKEN_BACK_REASONS = {"lease_expired", "worker_died"}
COUNTED_REASONS = {*TAKEN_BACK_REASONS, "retry"}


@dataclass
class ChaosConfig:
    nodes: int = 2
    concurrency: int = 6
    jobs: int = 300
    kills: int = 10
    kill_interval: tuple[float, float] = (2.5, 4.0)
    hot_keys: int = 15
    hot_share: float = 0.5
    burst: tuple[int, int] = (10, 40)
    lease_ttl_sec: int = 5
    heartbeat_sec: float = 1.0
    reaper_period_sec: float = 1.0
    shutdown_timeout_sec: float = 5.0
    claim_backoff_sec: float = 2.0
    poll_fallback_sec: float = 10.0  # the engine's default, stated: the workflows' wake bound uses it
    drain_timeout_sec: float = 90.0
    submit_timeout_sec: float = 120.0
    node_start_timeout_sec: float = 60.0
    http_parallel: int = 16
    max_attempts: int = 25
    restart: bool = True
    sigterm: bool = True
    seed: int | None = None
    log_level: str = "WARNING"
    # the other capabilities (capabilities.py); 0 turns one off
    processes: int = 4
    observers: int = 3
    tick_every_sec: float = 1.0
    timer_sec: float = 1.0
    call_pause: tuple[float, float] = (0.2, 0.8)
    operation_jobs: int = 600
    operation_batch: int = 20
    settle_timeout_sec: float = 90.0
    # the chaos queue's flow limits (limits.py); None turns one off. Jobs spread over `partitions`
    # partition keys.
    concurrency_limit: int | None = None
    partition_concurrency: int | None = None
    rate_limit: int | None = None
    rate_period_sec: float = 1.0
    partitions: int = 4
    # aim kills instead of picking a random node: the first kill takes a node running an observer,
    # the second a node in the middle of a process step (made long for it); each aim waits for its
    # target, and a missed aim is a failure (aimed_kills_missed)
    aim: bool = True
    # durable workflows (workflows.py): runs of chaos.order started during the chaos, each with a
    # sleep, a wait for a signal and a gather of `workflow_children` child runs; 0 (the default, kept
    # by the topology tests) turns them off; the short run has 16, the long run 40
    workflows: int = 0
    workflow_children: int = 3
    workflow_step_sec: float = 0.4
    workflow_sleep_sec: float = 1.5
    workflow_concurrency: int = 4

    def queue_limits(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.concurrency_limit:
            out["concurrency"] = self.concurrency_limit
        if self.partition_concurrency:
            out["partition_concurrency"] = self.partition_concurrency
        if self.rate_limit:
            out["rate"] = f"{self.rate_limit}/{self.rate_period_sec:g}s"
        return out


@dataclass
class Submission:
    key: str
    body: dict[str, Any]
    requests: int = 0
    nodes: list[str] = field(default_factory=list)
    status: int | None = None
    job_id: str | None = None
    created: bool | None = None
    error: str | None = None


@dataclass
class HttpStats:
    requests: int = 0
    transport_errors: int = 0
    by_status: Counter[int] = field(default_factory=Counter)


class Db:
    """Short-lived connections with retries: the harness must ride out the restart it causes."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    async def fetch(self, sql: str, *args: Any, deadline_sec: float = 90.0) -> list[asyncpg.Record]:
        deadline = time.monotonic() + deadline_sec
        while True:
            try:
                conn = await asyncpg.connect(self.dsn, timeout=5)
                try:
                    return await conn.fetch(sql, *args, timeout=60)
                finally:
                    await conn.close(timeout=5)
            except CONNECTION_ERRORS:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        rows = await self.fetch(sql, *args)
        return rows[0][0] if rows else None


class ChaosRun:
    def __init__(self, cfg: ChaosConfig, dsn: str, restart: RestartFn, base_env: dict[str, str],
                 log_dir: Path) -> None:
        self.cfg = cfg
        self.dsn = dsn
        self.db = Db(dsn)
        self.restart_fn = restart
        self.rng = random.Random(cfg.seed)
        self.token = uuid.uuid4().hex[:8]
        self.queue = f"chaos-{self.token}"
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        env = node_env(base_env, dsn=dsn, queue=self.queue, concurrency=cfg.concurrency,
                       heartbeat_sec=cfg.heartbeat_sec, reaper_period_sec=cfg.reaper_period_sec,
                       shutdown_timeout_sec=cfg.shutdown_timeout_sec, claim_backoff_sec=cfg.claim_backoff_sec,
                       log_level=cfg.log_level, root=ROOT, queue_limits=cfg.queue_limits(),
                       poll_fallback_sec=cfg.poll_fallback_sec,
                       workflow_queue=f"{self.queue}-wf" if cfg.workflows else None,
                       workflow_concurrency=cfg.workflow_concurrency)
        self.slots = [NodeSlot(index=i + 1, port=free_port(), env=env, log_dir=log_dir)
                      for i in range(cfg.nodes)]
        self.submissions: list[Submission] = []
        self.http = HttpStats()
        self.kills: list[dict[str, Any]] = []
        self.restart: dict[str, Any] | None = None
        self.sigterm: dict[str, Any] | None = None
        self.aimed: dict[str, str | None] = {}
        self.start_failures: list[str] = []
        self.timings: dict[str, float] = {}
        self._bringups: set[asyncio.Task[None]] = set()
        self._client: httpx.AsyncClient | None = None
        self.caps = Capabilities(self)
        self.wf = WorkflowLoad(self)

    # -- the run ---------------------------------------------------------------------------------

    async def execute(self) -> dict[str, Any]:
        t0 = time.monotonic()
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute(RUNS_DDL)
            await conn.execute(OBSERVER_RUNS_DDL)
            await conn.execute(FLOW_STARTS_DDL)
            await conn.execute(WF_STEPS_DDL)
        finally:
            await conn.close()
        copier = asyncio.create_task(self._copy_flow_starts()) if self.cfg.rate_limit else None
        limits = httpx.Limits(max_connections=self.cfg.http_parallel * 2, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=httpx.Timeout(15, connect=2), limits=limits) as client:
            self._client = client
            try:
                for slot in self.slots:
                    slot.start()
                await asyncio.gather(*(self._wait_ready(s) for s in self.slots))
                await self.caps.setup()
                self.timings["startup_sec"] = time.monotonic() - t0
                t1 = time.monotonic()
                producer = asyncio.create_task(self._produce())
                workflows = asyncio.create_task(self.wf.produce())
                await self._chaos()
                self.timings["chaos_sec"] = time.monotonic() - t1
                await asyncio.wait_for(producer, timeout=self.cfg.submit_timeout_sec + 60)
                await asyncio.wait_for(workflows, timeout=self.cfg.submit_timeout_sec + 60)
                self.timings["enqueue_sec"] = time.monotonic() - t1
                await self.caps.stop_calls()
                await self._all_up()
                t2 = time.monotonic()
                drained = await self._drain()
                self.timings["drain_sec"] = time.monotonic() - t2
                t3 = time.monotonic()
                await self.caps.settle()
                self.timings["settle_sec"] = time.monotonic() - t3
                t4 = time.monotonic()
                await self.wf.settle()
                self.timings["workflows_settle_sec"] = time.monotonic() - t4
                await self._stop_all()
            finally:
                for task in self._bringups:
                    task.cancel()
                for slot in self.slots:
                    slot.close()
                if copier is not None:
                    copier.cancel()
        self.timings["total_sec"] = time.monotonic() - t0
        return await self._report(drained)

    async def _copy_flow_starts(self) -> None:
        """Keep the gate's stamps of the queue's starts (dl_flow_starts keeps a minute of them)."""
        while True:
            await asyncio.sleep(3)
            try:
                await self.db.fetch(COPY_FLOW_STARTS_SQL, self.queue, deadline_sec=20)
            except CONNECTION_ERRORS:
                pass  # the next round copies them (they stay a minute)

    # -- nodes -----------------------------------------------------------------------------------

    async def _wait_ready(self, slot: NodeSlot) -> None:
        assert self._client is not None
        await slot.wait_ready(self._client, self.cfg.node_start_timeout_sec)

    def _bring_up(self, slot: NodeSlot) -> None:
        """Start the slot again in the background; a start that fails (e.g. while PostgreSQL is
        restarting, migrations cannot run) is retried."""

        async def run() -> None:
            for _ in range(10):
                slot.start()
                try:
                    await self._wait_ready(slot)
                    return
                except NodeError as exc:
                    self.start_failures.append(str(exc).splitlines()[0])
                    slot.close()
                    await asyncio.sleep(0.5)

        task = asyncio.create_task(run())
        self._bringups.add(task)
        task.add_done_callback(self._bringups.discard)

    async def _all_up(self) -> None:
        """Every slot running and ready (before the drain)."""
        deadline = time.monotonic() + self.cfg.node_start_timeout_sec * 2
        while self._bringups:
            if time.monotonic() > deadline:
                raise NodeError("nodes did not come back up")
            await asyncio.sleep(0.1)
        for slot in self.slots:
            if not slot.alive():
                slot.start()
        await asyncio.gather(*(self._wait_ready(s) for s in self.slots if not s.ready()))

    async def _every_slot_ready(self) -> None:
        """Until every node is ready (or twice the start timeout has passed: the checks then tell)."""
        deadline = time.monotonic() + self.cfg.node_start_timeout_sec * 2
        while True:
            if all(s.ready() for s in self.slots) or time.monotonic() > deadline:
                return
            await asyncio.sleep(0.05)

    async def _ready_slot(self, exclude: set[int] | None = None) -> NodeSlot:
        """A random ready node (not in `exclude` unless it is the only one)."""
        deadline = time.monotonic() + self.cfg.node_start_timeout_sec * 2
        while True:
            ready = [s for s in self.slots if s.ready()]
            preferred = [s for s in ready if s.index not in (exclude or set())]
            if preferred or ready:
                return self.rng.choice(preferred or ready)
            if time.monotonic() > deadline:
                raise NodeError("no node ready")
            await asyncio.sleep(0.05)

    async def _stop_all(self) -> None:
        for slot in self.slots:
            if slot.alive():
                slot.sigterm()
        for slot in self.slots:
            if slot.current is not None and slot.current.end == "sigterm" and slot.current.exit_code is None:
                await slot.wait_exit(self.cfg.shutdown_timeout_sec + 30)
                slot.current.end = "stop"

    # -- chaos -----------------------------------------------------------------------------------

    async def _chaos(self) -> None:
        cfg = self.cfg
        restart_at = cfg.kills // 2 if cfg.restart else -1
        sigterm_at = (3 * cfg.kills) // 4 if cfg.sigterm else -1
        operation_at = cfg.kills // 3
        t0 = time.time()
        for k in range(cfg.kills):
            await asyncio.sleep(self.rng.uniform(*cfg.kill_interval))  # the schedule's pace
            # the restart and the SIGTERM get a slot of their own, so the next kill does not
            # immediately take away the node whose recovery they should exercise
            if k == restart_at:
                # every node up first: a node still starting when the server goes away exits ("start-up
                # failed: database_unavailable") and comes back as a new incarnation, so a failover
                # during both nodes' starts (a loaded CI run) left no node that could show it rode through
                await self._every_slot_ready()
                before = {s.current.name for s in self.slots if s.current is not None and s.ready()}
                started = time.time()
                await self._restart_postgres(t0)
                await self._first_claim_by(before, since=started)
                await asyncio.sleep(self.rng.uniform(*cfg.kill_interval))
            if k == sigterm_at:
                await self._sigterm(t0)
                await asyncio.sleep(self.rng.uniform(*cfg.kill_interval))
            # the bulk operation starts at its kill, and that kill takes the node running it
            victim = ((await self.caps.start_operation() if k == operation_at else None)
                      or await self._aimed(k) or await self.wf.aimed_victim(k) or await self._ready_slot())
            inc = victim.kill9()
            self.kills.append({"n": k + 1, "node": inc.name, "at": inc.ended_at,
                               "t_sec": round(inc.ended_at - t0, 2) if inc.ended_at else None})
            self._bring_up(victim)
            try:
                await self.wf.at_kill(inc.name)  # what the workflow runs were doing when it died
            except CONNECTION_ERRORS:
                pass

    async def _aimed(self, k: int) -> NodeSlot | None:
        """The first kill takes a node running an observer, the second one a node in the middle of a
        process step: what the checks of moves, killed observer runs and rerun steps need, made
        certain rather than left to chance. None when this kill is not aimed; a target not found in
        time is recorded as missed (a failed check) and the kill takes a random node."""
        cfg = self.cfg
        if not cfg.aim or k > 1 or (k == 0 and not cfg.observers) or (k == 1 and not cfg.processes):
            return None
        what = "observer" if k == 0 else "step"
        if what == "step":
            # the next call of the first process is a step of 2 s (node_capabilities.py: args.step_sec)
            self.caps.processes[0].long_step_sec = 2.0
            sql = ("SELECT node FROM chaos_runs WHERE lock_key LIKE 'process:%' AND ended_at IS NULL AND started_at "
                   "BETWEEN clock_timestamp() - interval '1.5 s' AND clock_timestamp() - interval '0.2 s'")
        else:
            sql = ("SELECT node FROM chaos_observer_runs WHERE name = ANY($1) AND ended_at IS NULL "
                   "AND last_beat_at > clock_timestamp() - interval '0.6 s'")
        args = [] if what == "step" else [self.caps.observers]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            nodes = {r["node"] for r in await self.db.fetch(sql, *args)}
            for slot in self.slots:
                if slot.ready() and slot.current is not None and slot.current.name in nodes:
                    self.aimed[what] = slot.current.name
                    return slot
            await asyncio.sleep(0.05)
        self.aimed[what] = None
        return None

    async def _first_claim_by(self, names: set[str], since: float) -> None:
        """Holds the next kill until one of the nodes that lived through the restart has claimed a job
        after it: the kill -9s go on 2-3 s apart, and a node still reconnecting when its turn came was
        a run in which no node showed its recovery (a failure with nothing wrong). A node that never
        recovers is still caught: the wait ends after RECOVERY_WAIT_SEC (a run with no job left to
        claim by then goes on as before) and the failover's checks fail."""
        deadline = time.monotonic() + RECOVERY_WAIT_SEC
        sql = ("SELECT count(*) FROM dl_job_events WHERE kind = 'picked' AND ts > to_timestamp($1) "
               "AND payload->>'worker' = ANY($2::text[])")
        while names and time.monotonic() < deadline:
            try:
                if await self.db.fetchval(sql, since, sorted(names)):
                    return
            except CONNECTION_ERRORS:
                pass  # past Db's own retries: the check after the drain reports it
            await asyncio.sleep(0.2)

    async def _restart_postgres(self, t0: float) -> None:
        started = time.time()
        how = await self.restart_fn()
        ended = time.time()
        # the wall-clock window the server was down in (the workflow check does not hold a sleep's
        # wake to its bound while nothing could run it)
        self.restart = {"how": how, "t_sec": round(started - t0, 2), "took_sec": round(ended - started, 2),
                        "down_from": started, "down_to": ended}

    async def _sigterm(self, t0: float) -> None:
        slot = await self._ready_slot()
        inc = slot.current
        assert inc is not None
        running = await self.db.fetch(
            "SELECT j.job_id, j.attempt FROM dl_jobs j WHERE j.queue = $1 AND j.status = 'running' AND "
            "(SELECT e.payload->>'worker' FROM dl_job_events e WHERE e.job_id = j.job_id AND e.kind = 'picked' "
            " ORDER BY e.event_id DESC LIMIT 1) = $2", self.queue, inc.name)
        sent = time.time()
        slot.sigterm()
        code = await slot.wait_exit(self.cfg.shutdown_timeout_sec + 30)
        self.sigterm = {"node": inc.name, "t_sec": round(sent - t0, 2), "exit_code": code,
                        "exit_sec": round(time.time() - sent, 2), "running_at_sigterm": len(running)}
        self._bring_up(slot)

    # -- producer --------------------------------------------------------------------------------

    def _job_body(self, i: int) -> dict[str, Any]:
        cfg = self.cfg
        if self.rng.random() < cfg.hot_share:
            lock_key = f"hot-{self.rng.randrange(cfg.hot_keys)}"
        else:
            lock_key = f"u-{self.token}-{i}"
        duration_ms = (self.rng.uniform(50, 500) if self.rng.random() < 0.75
                       else self.rng.uniform(500, 2000))
        chunks = max(1, min(16, round(duration_ms / 120)))
        key = f"chaos-{self.token}-{i}"
        return {"queue": self.queue, "task": TASK, "lock_key": lock_key, "idempotency_key": key,
                "partition_key": f"t-{self.rng.randrange(cfg.partitions)}" if cfg.partitions else "",
                "lease_ttl_sec": cfg.lease_ttl_sec, "max_attempts": cfg.max_attempts,
                "args": {"chunks": chunks, "chunk_ms": round(duration_ms / chunks, 1)}}

    async def _produce(self) -> None:
        cfg = self.cfg
        mean_burst = sum(cfg.burst) / 2
        bursts = max(1, round(cfg.jobs / mean_burst))
        span = (cfg.kills + 2) * sum(cfg.kill_interval) / 2 * 0.85
        pause = span / bursts
        sem = asyncio.Semaphore(cfg.http_parallel)

        async def one(sub: Submission) -> None:
            async with sem:
                await self._submit(sub)

        i = 0
        tasks: list[asyncio.Task[None]] = []
        while i < cfg.jobs:
            size = min(cfg.jobs - i, self.rng.randint(*cfg.burst))
            for _ in range(size):
                sub = Submission(key=f"chaos-{self.token}-{i}", body=self._job_body(i))
                self.submissions.append(sub)
                tasks.append(asyncio.create_task(one(sub)))
                i += 1
            if i < cfg.jobs:
                await asyncio.sleep(pause)  # the schedule's pace between bursts
        await asyncio.gather(*tasks)

    async def _submit(self, sub: Submission) -> None:
        """POST the same body (and key) until a node answers 2xx, moving to another node after a
        transport error or a 5xx, as a real client would."""
        assert self._client is not None
        deadline = time.monotonic() + self.cfg.submit_timeout_sec
        last: int | None = None
        while time.monotonic() < deadline:
            slot = await self._ready_slot(exclude={last} if last is not None else None)
            sub.requests += 1
            self.http.requests += 1
            sub.nodes.append(slot.current.name if slot.current else "?")
            try:
                r = await self._client.post(f"{slot.url}/api/v1/jobs/trigger", json=sub.body)
            except httpx.TransportError as exc:
                self.http.transport_errors += 1
                sub.error = type(exc).__name__
                last = slot.index
                await asyncio.sleep(0.05)
                continue
            self.http.by_status[r.status_code] += 1
            if r.status_code in (200, 201):
                data = r.json()
                sub.status, sub.job_id, sub.created, sub.error = r.status_code, data["job_id"], data["created"], None
                return
            sub.error = f"HTTP {r.status_code}: {r.text[:200]}"
            if r.status_code < 500:
                sub.status = r.status_code
                return  # a refusal: reported, never retried
            last = slot.index
            await asyncio.sleep(0.1)

    # -- drain -----------------------------------------------------------------------------------

    async def _drain(self) -> bool:
        deadline = time.monotonic() + self.cfg.drain_timeout_sec
        while time.monotonic() < deadline:
            left = await self.db.fetchval(
                "SELECT count(*) FROM dl_jobs WHERE queue = $1 AND status <> 'succeeded'", self.queue)
            if left == 0:
                return True
            await asyncio.sleep(0.25)
        return False

    # -- checks and report -----------------------------------------------------------------------

    async def _report(self, drained: bool) -> dict[str, Any]:
        jobs = await self.db.fetch(
            "SELECT job_id::text, idempotency_key, lock_key, partition_key, status::text, attempt FROM dl_jobs "
            "WHERE queue = $1", self.queue)
        events = await self.db.fetch(
            "SELECT job_id::text, event_id, kind, payload, extract(epoch FROM ts)::float8 AS ts "
            "FROM dl_job_events WHERE queue = $1 AND kind <> 'heartbeat' ORDER BY job_id, event_id", self.queue)
        runs = await self.db.fetch(
            "SELECT r.job_id::text, r.lock_key, r.attempt, r.node, r.started_at, r.ended_at, r.outcome, "
            "r.probe_ok, r.probe_lost, r.reprobe_failed "
            "FROM chaos_runs r JOIN dl_jobs j ON j.job_id = r.job_id WHERE j.queue = $1", self.queue)
        report = build_report(self, jobs, events, runs, drained)
        cfg = self.cfg
        gate_starts: dict[str, list[Any]] | None = None
        if cfg.rate_limit:
            await self.db.fetch(COPY_FLOW_STARTS_SQL, self.queue)
            gate_starts = defaultdict(list)
            for r in await self.db.fetch("SELECT job_id::text, extract(epoch FROM started_at)::float8 AS at "
                                         "FROM chaos_flow_starts"):
                gate_starts[r["job_id"]].append(r["at"])
        flow = check_limits([dict(e) for e in events], {j["job_id"]: j["partition_key"] for j in jobs},
                            concurrency=cfg.concurrency_limit, partition_concurrency=cfg.partition_concurrency,
                            rate_limit=cfg.rate_limit, rate_period_sec=cfg.rate_period_sec if cfg.rate_limit else None,
                            gate_starts=gate_starts)
        report["limits"] = {**flow["counts"], "reached": limits_reached(flow["counts"])}
        report["examples"].update(flow["examples"])
        caps = await self.caps.report()
        if cfg.workflows:
            wf = await self.wf.report()
            caps["checks"].update(wf["checks"])
            caps["examples"].update(wf["examples"])
            caps["workflows"] = wf["counts"]
        checks = {**report["checks"], **flow["checks"], **caps.pop("checks")}
        report["checks"] = checks
        report["failures"] = {k: v for k, v in checks.items() if v}
        report["examples"].update(caps.pop("examples"))
        report["capabilities"] = caps
        return report


def _payload(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return json.loads(value)
    return dict(value or {})


def check_journal(job: asyncpg.Record | dict[str, Any], events: list[dict[str, Any]],
                  attempts_out: list[dict[str, Any]]) -> str | None:
    """Replay one job's journal (heartbeats excluded); None when it agrees with the row, else why
    not. Appends one record per attempt (worker, how it ended) to `attempts_out`."""
    if not events or events[0]["kind"] != "queued":
        return "journal does not start with 'queued'"
    state, attempt, current = "queued", 0, None
    for ev in events[1:]:
        kind, p = ev["kind"], _payload(ev["payload"])
        if kind == "picked":
            if state != "queued":
                return f"'picked' while {state} (event {ev['event_id']})"
            attempt += 1
            if p.get("attempt") != attempt:
                return f"'picked' says attempt {p.get('attempt')}, replay says {attempt}"
            current = {"job_id": job["job_id"], "attempt": attempt, "worker": p.get("worker"),
                       "picked_ts": ev["ts"], "end": None, "end_ts": None, "next_picked_ts": None}
            if attempts_out and attempts_out[-1]["job_id"] == job["job_id"] and \
                    attempts_out[-1]["next_picked_ts"] is None and attempts_out[-1]["end"] is not None:
                attempts_out[-1]["next_picked_ts"] = ev["ts"]
            attempts_out.append(current)
            state = "running"
        elif kind in ("requeue", "done", "failed", "canceled", "lost"):
            if state != "running" or current is None:
                return f"'{kind}' while {state} (event {ev['event_id']})"
            if p.get("attempt") != attempt:
                return f"'{kind}' says attempt {p.get('attempt')}, replay says {attempt}"
            reason = p.get("reason") if kind == "requeue" else None
            current["end"], current["end_ts"] = (f"requeue:{reason}" if kind == "requeue" else kind), ev["ts"]
            if kind == "requeue":
                if reason in NOT_COUNTED_REASONS:
                    attempt -= 1
                elif reason not in COUNTED_REASONS:
                    return f"requeue with unknown reason {reason!r}"
                state = "queued"
            else:
                state = {"done": "succeeded"}.get(kind, kind)
        else:
            return f"unexpected journal kind {kind!r}"
    if state != job["status"]:
        return f"journal ends {state}, row says {job['status']}"
    if attempt != job["attempt"]:
        return f"journal replays attempt {attempt}, row says {job['attempt']}"
    if job["status"] == "succeeded" and events[-1]["kind"] != "done":
        return f"succeeded but last event is {events[-1]['kind']!r}"
    return None


def overlapping_runs(runs: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """Pairs of ended runs of one lock_key whose [started_at, ended_at] intervals overlap."""
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        if r["ended_at"] is not None:
            by_key[r["lock_key"]].append(r)
    found = []
    for key, items in by_key.items():
        items.sort(key=lambda r: r["started_at"])
        latest = None
        for r in items:
            if latest is not None and r["started_at"] < latest["ended_at"]:
                found.append((key, latest["job_id"], r["job_id"]))
            if latest is None or r["ended_at"] > latest["ended_at"]:
                latest = r
    return found


def build_report(run: ChaosRun, jobs: list[Any], events: list[Any], runs: list[Any],
                 drained: bool) -> dict[str, Any]:
    cfg = run.cfg
    jobs_by_key = defaultdict(list)
    for j in jobs:
        jobs_by_key[j["idempotency_key"]].append(j)
    acked = [s for s in run.submissions if s.status in (200, 201)]
    lost = [s.key for s in acked if not jobs_by_key.get(s.key)]
    duplicated = [k for k, js in jobs_by_key.items() if len(js) > 1]
    wrong_id = [s.key for s in acked if jobs_by_key.get(s.key) and jobs_by_key[s.key][0]["job_id"] != s.job_id]
    unacked = [f"{s.key}: {s.error}" for s in run.submissions if s.status not in (200, 201)]
    ours = {s.key for s in run.submissions}
    strangers = [k for k in jobs_by_key if k not in ours]
    status_counts = Counter(j["status"] for j in jobs)

    ev_by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        ev_by_job[e["job_id"]].append(dict(e))
    attempts: list[dict[str, Any]] = []
    journal_bad = []
    for j in jobs:
        why = check_journal(j, ev_by_job.get(j["job_id"], []), attempts)
        if why:
            journal_bad.append(f"{j['job_id']}: {why}")
    requeues = Counter(_payload(e["payload"]).get("reason") for e in events if e["kind"] == "requeue")
    retry_events = sum(1 for e in events if _payload(e["payload"]).get("reason") == "retry")
    failed_events = sum(1 for e in events if e["kind"] in ("failed", "lost"))

    run_dicts = [dict(r) for r in runs]
    probe_refused = [f"{r['lock_key']} job {r['job_id']} attempt {r['attempt']}" for r in run_dicts
                     if not r["probe_ok"]]
    reprobe_refused = [f"{r['lock_key']} job {r['job_id']} attempt {r['attempt']}" for r in run_dicts
                       if r["reprobe_failed"]]
    overlaps = overlapping_runs(run_dicts)
    completed = {(r["job_id"], r["attempt"]) for r in run_dicts if r["outcome"] == "completed"}
    missing_runs = [j["job_id"] for j in jobs if j["status"] == "succeeded"
                    and (j["job_id"], j["attempt"]) not in completed]
    run_outcomes = Counter(r["outcome"] or "killed" for r in run_dicts)

    # kill -9 → the victim's attempts reaped and picked again elsewhere
    killed_names = {k["node"]: k["at"] for k in run.kills}
    taken_back = {f"requeue:{reason}" for reason in TAKEN_BACK_REASONS}
    reaped = [a for a in attempts if a["worker"] in killed_names and a["end"] in taken_back]
    to_requeue = [a["end_ts"] - killed_names[a["worker"]] for a in reaped]
    rescue = [a["next_picked_ts"] - killed_names[a["worker"]] for a in reaped if a["next_picked_ts"]]
    reaped_live = sum(1 for a in attempts if a["worker"] not in killed_names and a["end"] == "requeue:lease_expired")
    # a node never killed is never found dead: its pid runs
    died_live = sum(1 for a in attempts if a["worker"] not in killed_names and a["end"] == "requeue:worker_died")
    sig = run.sigterm
    sigterm_failures = 0
    if sig is not None:
        mine = [a for a in attempts if a["worker"] == sig["node"]]
        sig["attempts_on_node"] = len(mine)
        sig["shutdown_requeues"] = sum(1 for a in mine if a["end"] == "requeue:shutdown")
        sig["reaped_after_exit"] = sum(1 for a in mine if a["end"] in taken_back)
        sigterm_failures = int(sig["exit_code"] != 0) + sig["reaped_after_exit"]

    checks = {
        "lost_keys (acked 2xx, no job)": len(lost),
        "duplicate_jobs (one key, 2+ jobs or another job_id)": len(duplicated) + len(wrong_id),
        "unacked_keys (never got 2xx)": len(unacked),
        "stranger_jobs (in the queue, not ours)": len(strangers),
        "http_500": run.http.by_status.get(500, 0),
        "stuck_jobs (not succeeded at the deadline)": sum(n for s, n in status_counts.items() if s != "succeeded"),
        "failed_or_lost_events": failed_events,
        "retry_events": retry_events,
        "probe_violations (probe lock refused at start)": len(probe_refused),
        "reprobe_violations (probe refused after reconnect)": len(reprobe_refused),
        "overlapping_runs (ended runs of one key)": len(overlaps),
        "journal_mismatches": len(journal_bad),
        "missing_runs (succeeded, no completed run)": len(missing_runs),
        "sigterm_failures (exit != 0, or reaped after exit)": sigterm_failures,
        "missing_restart": int(cfg.restart and run.restart is None),
        "missing_sigterm": int(cfg.sigterm and run.sigterm is None),
        "missing_kills": max(0, cfg.kills - len(run.kills)),
        "worker_died_of_live_nodes (taken from a node never killed)": died_live,
        "aimed_kills_missed (no observer / step to kill)": sum(1 for v in run.aimed.values() if v is None),
    }
    return {
        "config": {**asdict(cfg), "queue": run.queue, "database": urlsplit(run.dsn).path.lstrip("/"),
                   "logs": str(run.log_dir)},
        "checks": checks,
        "failures": {k: v for k, v in checks.items() if v},
        "drained": drained,
        "examples": {"lost": lost[:5], "duplicated": (duplicated + wrong_id)[:5], "unacked": unacked[:5],
                     "journal": journal_bad[:5], "probe": (probe_refused + reprobe_refused)[:5],
                     "overlaps": overlaps[:5], "missing_runs": missing_runs[:5],
                     "not_succeeded": [f"{j['job_id']} {j['status']}" for j in jobs
                                       if j["status"] != "succeeded"][:5]},
        "counts": {
            "jobs_submitted": len(run.submissions),
            "jobs_acked": len(acked),
            "acked_as_replay_200": sum(1 for s in acked if s.status == 200),
            "keys_resubmitted": sum(1 for s in run.submissions if s.requests > 1),
            "jobs_in_db": len(jobs),
            "status": dict(status_counts),
            "runs": len(run_dicts),
            "runs_by_outcome": dict(run_outcomes),
            "probe_reconnects": sum(r["probe_lost"] for r in run_dicts),
            "requeues_by_reason": {str(k): v for k, v in requeues.items()},
            "max_attempt": max((j["attempt"] for j in jobs), default=0),
            "lease_expired_of_live_nodes": reaped_live,
            "kills": len(run.kills),
            "node_start_failures": len(run.start_failures),
            "node_incarnations": sum(len(s.history) for s in run.slots),
        },
        "http": {"requests": run.http.requests, "transport_errors": run.http.transport_errors,
                 "by_status": {str(k): v for k, v in sorted(run.http.by_status.items())}},
        "restart": run.restart,
        "sigterm": sig,
        "aimed": run.aimed,
        "kill_to_rescue_sec": {
            "attempts": len(rescue),
            "requeued_max": round(max(to_requeue), 2) if to_requeue else None,
            "requeued_median": round(statistics.median(to_requeue), 2) if to_requeue else None,
            "picked_max": round(max(rescue), 2) if rescue else None,
            "picked_median": round(statistics.median(rescue), 2) if rescue else None,
        },
        "kills": [{k: v for k, v in kill.items() if k != "at"} for kill in run.kills],
        "start_failures": run.start_failures[:10],
        "timings_sec": {k: round(v, 1) for k, v in run.timings.items()},
    }


def format_table(report: dict[str, Any]) -> str:
    """The report as a human-readable table (checks first, then what happened)."""
    lines = ["check                                                   value  ok",
             "------------------------------------------------------  -----  --"]
    for name, value in report["checks"].items():
        lines.append(f"{name:<54}  {value:>5}  {'ok' if not value else 'FAIL'}")
    c = report["counts"]
    lines += ["", "what happened", "-------------"]
    rows = [
        ("jobs submitted / acked / in db", f"{c['jobs_submitted']} / {c['jobs_acked']} / {c['jobs_in_db']}"),
        ("acked as replay (200) / keys resubmitted", f"{c['acked_as_replay_200']} / {c['keys_resubmitted']}"),
        ("final status", json.dumps(c["status"])),
        ("runs (by outcome)", f"{c['runs']} {json.dumps(c['runs_by_outcome'])}"),
        ("requeues by reason", json.dumps(c["requeues_by_reason"])),
        ("max attempt of a job", c["max_attempt"]),
        ("probe reconnects", c["probe_reconnects"]),
        ("kill -9", f"{c['kills']} (node incarnations {c['node_incarnations']}, "
                    f"start failures {c['node_start_failures']})"),
        ("lease_expired of nodes never killed", c["lease_expired_of_live_nodes"]),
        ("kill -> reaped / picked elsewhere (s)", json.dumps(report["kill_to_rescue_sec"])),
        (_restart_label(report["restart"]), json.dumps(report["restart"])),
        ("SIGTERM", json.dumps(report["sigterm"])),
        ("HTTP", json.dumps(report["http"])),
        ("flow limits (from the journal)", json.dumps(report.get("limits"))),
        ("aimed kills", json.dumps(report.get("aimed"))),
        ("timings (s)", json.dumps(report["timings_sec"])),
        *[(f"{name}", json.dumps(value, default=str))
          for name, value in report.get("capabilities", {}).items()],
        ("node logs", report["config"]["logs"]),
    ]
    lines += [f"{k:<42}  {v}" for k, v in rows]
    return "\n".join(lines)


def _restart_label(restart: dict[str, Any] | None) -> str:
    """Says plainly when the "restart" was not one: on an external server without
    DL_TEST_RESTART_CMD the harness can only terminate the sessions (what clients see of a restart,
    minus the downtime and the lost shared state)."""
    if restart is not None and restart.get("how") == "failed over":  # tests/topology/test_failover.py
        return "primary killed -9, standby promoted"
    if restart is not None and restart.get("how") != "restarted":
        return "PostgreSQL restart: NOT REAL, sessions only"
    return "PostgreSQL restart"
