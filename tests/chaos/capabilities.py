"""The other capabilities under the chaos run's kills, restart and SIGTERM: processes (calls and
timers), observers, an interval schedule and a bulk operation — the client side and the checks.

The node side (the processor of namespace "chaos" and the observer kind "chaos.watch", each with
its probe) is in pipelines.py. Everything here is driven over HTTP against the same nodes the jobs'
workload uses, and checked afterwards from the database alone; the checks are pure functions over
rows (self-tested in test_chaos_short.py with planted violations).

- **Processes**: `processes` processes, each receiving a stream of calls from the client (one at a
  time per process, each with its own idempotency key, resent with the same key to another node
  after a transport error, a 5xx or a 504) and re-arming its own timer every `timer_sec`.
  Checks: every acknowledged call is in the history exactly once, the state agrees with the history,
  no process ends outside `running`, every timer fired again after the calls stopped, no two ended
  steps of one process overlap and no step's probe lock was refused.
- **Observers**: `observers` observers of kind "chaos.watch"; their runs' intervals (database clock)
  must never overlap, no probe refused, and every observer runs (a beat after the chaos) at the end.
- **Schedule**: an interval schedule every `tick_every_sec` with `missed="catch_up"` (one job for
  every tick, missed ones included) into a queue nobody serves: each tick between the first and the
  last exactly once, and ticks up to the end of the chaos.
- **Operation**: `operation_jobs` delayed jobs in a queue nobody serves; in the middle of the chaos a
  bulk `cancel` over that queue (small batches, throttled) is started over HTTP and the node running
  it is killed with -9 mid-batch; it must end `finished` with total = done = changed = n, each job
  canceled by exactly one journal row of the operation.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx

from tests.chaos.nodes import NodeSlot
from tests.chaos.pipelines import OBSERVER_KIND, PROCESS_NS

if TYPE_CHECKING:
    from tests.chaos.harness import ChaosRun

FAR_FUTURE = "2100-01-01T00:00:00Z"


class Refused(Exception):
    """A 4xx the client does not retry."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text[:200]}")
        self.status = status


@dataclass
class ProcessClient:
    process_id: str
    acked: list[int] = field(default_factory=list)
    unacked: list[str] = field(default_factory=list)
    requests: int = 0
    long_step_sec: float | None = None  # the next call's step lasts this long (an aimed kill's target)


class Capabilities:
    """Drives processes, observers, the schedule and the operation during one ChaosRun."""

    def __init__(self, run: ChaosRun) -> None:
        self.run = run
        cfg = run.cfg
        token = run.token
        self.processes = [ProcessClient(f"p-{token}-{i}") for i in range(cfg.processes)]
        self.observers = [f"chaos-obs-{token}-{i}" for i in range(cfg.observers)]
        self.schedule = f"chaos-tick-{token}" if cfg.tick_every_sec else None
        self.tick_queue = f"chaos-{token}-ticks"
        self.op_queue = f"chaos-{token}-op"
        self.operation: dict[str, Any] | None = None
        self.schedule_window: dict[str, Any] = {}
        self.calls_stopped_at: datetime | None = None
        self.settled: dict[str, Any] = {}
        self.observer_rows: list[Any] = []
        self._stop_calls = asyncio.Event()
        self._callers: list[asyncio.Task[None]] = []

    # -- HTTP with fail-over --------------------------------------------------------------------

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                      ok: tuple[int, ...] = (200, 201), deadline_sec: float = 120.0,
                      retry: bool = True) -> httpx.Response:
        """Send to a ready node; after a transport error, a 5xx, a 429 or a 504, send the same
        request to another node (when `retry`). Any other status outside `ok` raises Refused."""
        run = self.run
        assert run._client is not None
        deadline = time.monotonic() + deadline_sec
        last: int | None = None
        while True:
            slot = await run._ready_slot(exclude={last} if last is not None else None)
            run.http.requests += 1
            try:
                r = await run._client.request(method, f"{slot.url}{path}", json=body, timeout=45)
            except httpx.TransportError:
                run.http.transport_errors += 1
                if not retry or time.monotonic() > deadline:
                    raise
                last = slot.index
                await asyncio.sleep(0.1)
                continue
            run.http.by_status[r.status_code] += 1
            if r.status_code in ok:
                return r
            if r.status_code >= 500 or r.status_code == 429:
                if not retry or time.monotonic() > deadline:
                    raise Refused(r.status_code, r.text)
                last = slot.index
                await asyncio.sleep(0.2)
                continue
            raise Refused(r.status_code, r.text)

    # -- before the chaos -----------------------------------------------------------------------

    async def setup(self) -> None:
        cfg = self.run.cfg
        now = await self.run.db.fetchval("SELECT now()")
        if self.schedule:
            self.schedule_window["created_at"] = now
            await self.request("POST", "/api/v1/schedules", {
                "name": self.schedule, "task": "dl.noop", "every_sec": cfg.tick_every_sec,
                "queue": self.tick_queue, "missed": "catch_up", "catch_up_limit": 1000}, ok=(201, 409))
        for name in self.observers:
            await self.request("POST", "/api/v1/observers", {"name": name, "kind": OBSERVER_KIND, "args": {}},
                               ok=(201, 409))
        for p in self.processes:
            await self.request("POST", f"/api/v1/processes/{PROCESS_NS}", {
                "id": p.process_id, "args": {"timer_sec": cfg.timer_sec},
                "idempotency_key": f"init-{p.process_id}", "timeout_sec": 30}, ok=(201,))
        for start in range(0, cfg.operation_jobs, 500):
            jobs = [{"queue": self.op_queue, "task": "dl.noop", "lock_key": f"op-{self.run.token}-{i}",
                     "idempotency_key": f"op-{self.run.token}-{i}", "available_at": FAR_FUTURE}
                    for i in range(start, min(cfg.operation_jobs, start + 500))]
            await self.request("POST", "/api/v1/jobs/batch", {"jobs": jobs}, ok=(201,))
        self._callers = [asyncio.create_task(self._calls(p)) for p in self.processes]

    async def _calls(self, p: ProcessClient) -> None:
        """One call at a time, each with its own key, until told to stop; a call is acked on 200."""
        cfg = self.run.cfg
        rng = self.run.rng
        seq = 0
        while not self._stop_calls.is_set():
            seq += 1
            args: dict[str, Any] = {"seq": seq}
            if p.long_step_sec:
                args["step_sec"], p.long_step_sec = p.long_step_sec, None
            body = {"args": args, "idempotency_key": f"call-{p.process_id}-{seq}", "timeout_sec": 30}
            path = f"/api/v1/processes/{PROCESS_NS}/{p.process_id}/call"
            p.requests += 1
            try:
                await self.request("POST", path, body, ok=(200,), deadline_sec=cfg.submit_timeout_sec)
                p.acked.append(seq)
            except (Refused, httpx.TransportError) as exc:
                p.unacked.append(f"{p.process_id} call {seq}: {exc}")
                return  # a refusal: the process is not usable (reported), stop calling it
            try:
                await asyncio.wait_for(self._stop_calls.wait(), rng.uniform(*cfg.call_pause))
            except TimeoutError:
                pass

    # -- in the middle of the chaos -------------------------------------------------------------

    async def start_operation(self) -> NodeSlot | None:
        """Start the bulk cancel over HTTP and return the slot of the node running it, once it has
        done at least one batch (to kill it mid-batch); None if it ended before that."""
        run, cfg = self.run, self.run.cfg
        if not cfg.operation_jobs:
            return None
        started_by = f"chaos-{run.token}"
        body = {"kind": "cancel", "filter": {"queues": [self.op_queue]}, "batch_size": cfg.operation_batch,
                "started_by": started_by}
        op_id = None
        for _ in range(20):  # not idempotent: after a transport error, look before sending again
            try:
                r = await self.request("POST", "/api/v1/operations", body, ok=(201,), retry=False)
                op_id = r.json()["operation_id"]
                break
            except (httpx.TransportError, Refused) as exc:
                if isinstance(exc, Refused) and exc.status < 500 and exc.status != 429:
                    raise
                op_id = await run.db.fetchval("SELECT operation_id::text FROM dl_operations WHERE started_by = $1",
                                              started_by)
                if op_id:
                    break
                await asyncio.sleep(0.3)
        assert op_id is not None, "could not start the operation"
        self.operation = {"id": op_id, "started_at": time.time(), "killed_runner": None}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            row = await run.db.fetch("SELECT state::text, lease_owner, done, total FROM dl_operations "
                                     "WHERE operation_id = $1::uuid", op_id)
            state, owner, done, total = row[0]
            if state != "running":
                return None
            if owner and 0 < done < total:
                for slot in run.slots:
                    if slot.ready() and slot.current is not None and slot.current.name == owner:
                        self.operation["killed_runner"] = {"node": owner, "done": done, "total": total}
                        return slot
            await asyncio.sleep(0.05)
        return None

    # -- after the chaos ------------------------------------------------------------------------

    async def stop_calls(self) -> None:
        self._stop_calls.set()
        await asyncio.gather(*self._callers)
        self.calls_stopped_at = await self.run.db.fetchval("SELECT now()")

    async def settle(self) -> None:
        """With every node up: wait (polling, with a deadline) until every process's timer fired
        after the calls stopped, every observer runs with a beat after that, and the operation
        ended; then pause the schedule. What is not reached by the deadline fails its check."""
        run, cfg = self.run, self.run.cfg
        t0 = time.monotonic()
        deadline = t0 + cfg.settle_timeout_sec
        since = self.calls_stopped_at
        pids = [p.process_id for p in self.processes]
        while time.monotonic() < deadline:
            timers = await run.db.fetchval(
                "SELECT count(DISTINCT process_id) FROM dl_process_events WHERE ns = $1 AND process_id = ANY($2) "
                "AND payload->>'kind' = 'timer' AND ts > $3", PROCESS_NS, pids, since)
            running = await run.db.fetchval(
                "SELECT count(*) FROM dl_observers o WHERE o.name = ANY($1) AND o.state::text = 'processing' "
                "AND EXISTS (SELECT 1 FROM chaos_observer_runs r WHERE r.name = o.name AND r.epoch = o.epoch "
                "AND r.last_beat_at > $2)", self.observers, since)
            op_open = 0
            if self.operation:
                op_open = await run.db.fetchval("SELECT count(*) FROM dl_operations WHERE operation_id = $1::uuid "
                                                "AND state::text IN ('running', 'paused')", self.operation["id"])
            if timers == len(pids) and running == len(self.observers) and not op_open:
                break
            await asyncio.sleep(0.25)
        self.settled = {"settled": time.monotonic() < deadline, "settle_sec": round(time.monotonic() - t0, 1)}
        # the observers' rows while every node still runs (the final SIGTERMs hand them back)
        self.observer_rows = await run.db.fetch(
            "SELECT name, state::text, epoch, moves FROM dl_observers WHERE name = ANY($1)", self.observers)
        if self.schedule:
            self.schedule_window["stopped_at"] = await run.db.fetchval("SELECT now()")
            await self.request("POST", f"/api/v1/schedules/{self.schedule}/pause", {})

    # -- rows and checks ------------------------------------------------------------------------

    async def report(self) -> dict[str, Any]:
        db = self.run.db
        pids = [p.process_id for p in self.processes]
        processes = await db.fetch("SELECT id, status, aux_state FROM dl_processes WHERE ns = $1 AND id = ANY($2)",
                                   PROCESS_NS, pids)
        events = await db.fetch("SELECT process_id, event_id, payload, ts FROM dl_process_events "
                                "WHERE ns = $1 AND process_id = ANY($2)", PROCESS_NS, pids)
        steps = await db.fetch(
            "SELECT r.job_id::text, r.lock_key, r.attempt, r.node, r.started_at, r.ended_at, r.outcome, r.probe_ok, "
            "r.probe_lost, r.reprobe_failed, t.task_type FROM chaos_runs r "
            "JOIN dl_process_tasks t ON t.task_id = r.job_id WHERE t.ns = $1 AND t.process_id = ANY($2)",
            PROCESS_NS, pids)
        tasks = await db.fetch("SELECT task_type, status FROM dl_process_tasks WHERE ns = $1 AND process_id = ANY($2)",
                               PROCESS_NS, pids)
        obs_runs = await db.fetch("SELECT name, epoch, node, started_at, last_beat_at, ended_at, beats, probe_ok, "
                                  "probe_lost, reprobe_failed FROM chaos_observer_runs WHERE name = ANY($1)",
                                  self.observers)
        obs_rows = self.observer_rows
        tick_jobs = await db.fetch("SELECT idempotency_key FROM dl_jobs WHERE queue = $1", self.tick_queue)
        op = op_jobs = None
        if self.operation:
            rows = await db.fetch("SELECT state::text, total, done, changed FROM dl_operations "
                                  "WHERE operation_id = $1::uuid", self.operation["id"])
            op = dict(rows[0]) if rows else None
            op_jobs = await db.fetch(
                "SELECT j.job_id::text, j.status::text, "
                "count(e.event_id) FILTER (WHERE e.payload->>'operation_id' = $2) AS by_op "
                "FROM dl_jobs j LEFT JOIN dl_job_events e ON e.job_id = j.job_id WHERE j.queue = $1 "
                "GROUP BY j.job_id, j.status", self.op_queue, self.operation["id"])
            trail = await db.fetch("SELECT kind FROM dl_operation_events WHERE operation_id = $1::uuid",
                                   self.operation["id"])
            self.operation["trail"] = Counter(r["kind"] for r in trail)
        cfg = self.run.cfg
        since = self.calls_stopped_at
        proc = check_processes({p.process_id: p.acked for p in self.processes},
                               [u for p in self.processes for u in p.unacked],
                               [dict(r) for r in processes], [dict(e) for e in events],
                               [dict(s) for s in steps], since, cfg.timer_sec)
        obs = check_observers(self.observers, [dict(r) for r in obs_runs], [dict(r) for r in obs_rows], since)
        ticks = [key_tick(r["idempotency_key"], self.schedule) for r in tick_jobs] if self.schedule else []
        sched = check_schedule(ticks, cfg.tick_every_sec, self.schedule_window) if self.schedule else None
        opc = (check_operation(op, [dict(r) for r in op_jobs or []], cfg.operation_jobs, self.operation)
               if cfg.operation_jobs else None)
        checks = {**proc["checks"], **obs["checks"], **(sched["checks"] if sched else {}),
                  **(opc["checks"] if opc else {})}
        return {
            "checks": checks,
            "examples": {**proc["examples"], **obs["examples"], **(sched["examples"] if sched else {}),
                         **(opc["examples"] if opc else {})},
            "processes": {**proc["counts"], "tasks": dict(Counter(f"{t['task_type']}:{t['status']}" for t in tasks)),
                          "calls_sent": sum(p.requests for p in self.processes)},
            "observers": obs["counts"],
            "schedule": sched["counts"] if sched else None,
            "operation": {**(opc["counts"] if opc else {}),
                          **({k: v for k, v in self.operation.items() if k != "started_at"} if self.operation else {})},
            "settle": self.settled,
        }


# -- the checks: pure functions over rows -------------------------------------------------------

def _payload(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return json.loads(value)
    return dict(value or {})


# Two timer events of one process must be at least its period apart, less this share of it. The
# timer's due time is computed when its step's intent is applied, a moment before the transaction
# that stamps the step's events (dl_process_events.ts = now()) starts, and the next timer's step
# (claim, STEP_SEC, commit) is stamped after that due time: so the real gap is the period plus a
# step, less a few ms. A doubled chain (two timers armed for one process) gives gaps of g and
# period - g, one of them at most half a period: far below the tolerance.
TIMER_TOLERANCE = 0.1


def doubled_timers(timers: list[datetime], period_sec: float,
                   tolerance: float = TIMER_TOLERANCE) -> list[tuple[datetime, datetime]]:
    """Consecutive timer events of one process closer than `period_sec * (1 - tolerance)`: a timer
    chain that doubled (the history and aux_state both count the extra firings, so only their
    spacing shows it)."""
    least = timedelta(seconds=period_sec * (1 - tolerance))
    ordered = sorted(timers)
    return [(a, b) for a, b in itertools.pairwise(ordered) if b - a < least]


def check_processes(acked: dict[str, list[int]], unacked: list[str], processes: list[dict[str, Any]],
                    events: list[dict[str, Any]], steps: list[dict[str, Any]],
                    calls_stopped_at: datetime | None, timer_sec: float = 1.0) -> dict[str, Any]:
    from tests.chaos.harness import overlapping_runs

    by_pid: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_pid[e["process_id"]].append({**e, "payload": _payload(e["payload"])})
    rows = {p["id"]: p for p in processes}
    lost, doubled, mismatch, not_running, no_timer, timer_doubled = [], [], [], [], [], []
    timers_total = 0
    least_gap: float | None = None
    for pid, seqs in acked.items():
        evs = by_pid.get(pid, [])
        applied = Counter(e["payload"].get("seq") for e in evs if e["payload"].get("kind") == "call")
        lost += [f"{pid} call {s}" for s in seqs if applied[s] == 0]
        doubled += [f"{pid} call {s} x{n}" for s, n in applied.items() if n > 1]
        timers = [e for e in evs if e["payload"].get("kind") == "timer"]
        timers_total += len(timers)
        stamps = sorted(e["ts"] for e in timers)
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(stamps)]
        if gaps:
            least_gap = min(gaps) if least_gap is None else min(least_gap, min(gaps))
        timer_doubled += [f"{pid}: timers at {a.isoformat()} and {b.isoformat()}"
                          for a, b in doubled_timers(stamps, timer_sec)]
        row = rows.get(pid)
        if row is None or row["status"] != "running":
            not_running.append(f"{pid}: {row['status'] if row else 'missing'}")
            continue
        state = _payload(row["aux_state"])
        if state.get("calls") != sum(applied.values()) or state.get("timers") != len(timers):
            mismatch.append(f"{pid}: state {state}, history calls {sum(applied.values())} timers {len(timers)}")
        if calls_stopped_at is None or not any(e["ts"] > calls_stopped_at for e in timers):
            no_timer.append(pid)
    overlaps = overlapping_runs(steps)
    refused = [f"{s['lock_key']} task {s['job_id']} attempt {s['attempt']} on {s.get('node')} at "
               f"{s['started_at']}: held by {_holders(s, steps)}" for s in steps
               if not s["probe_ok"] or s["reprobe_failed"]]
    return {
        "checks": {
            "lost_calls (acked, not in the history)": len(lost),
            "doubled_calls (in the history 2+ times)": len(doubled),
            "unacked_calls (never got 200)": len(unacked),
            "process_state_mismatches (state vs history)": len(mismatch),
            "processes_not_running (error or gone)": len(not_running),
            "timers_not_fired (none after the calls)": len(no_timer),
            "doubled_timers (two timers closer than the period)": len(timer_doubled),
            "overlapping_steps (ended steps of one process)": len(overlaps),
            "step_probe_violations (process probe refused)": len(refused),
        },
        "examples": {"calls": (lost + doubled + unacked)[:5], "process_state": (mismatch + not_running)[:5],
                     "timers": [*no_timer[:5], *timer_doubled[:5]], "steps": [*overlaps[:5], *refused[:5]]},
        "counts": {"processes": len(acked), "calls_acked": sum(len(s) for s in acked.values()),
                   "timers_fired": timers_total,
                   "least_timer_gap_sec": round(least_gap, 3) if least_gap is not None else None,
                   "steps": len(steps),
                   "steps_by_outcome": dict(Counter(s["outcome"] or "killed" for s in steps)),
                   "steps_rerun": sum(1 for s in steps if s["attempt"] > 1)},
    }


def _holders(refused: dict[str, Any], steps: list[dict[str, Any]]) -> list[str]:
    """The other steps of the refused step's process that were alive when it started (killed ones
    count to the end of the run): who held its probe lock, for the report."""
    start = refused["started_at"]
    return [f"task {s['job_id']} attempt {s['attempt']} on {s.get('node')} {s['started_at']}..{s['ended_at']} "
            f"{s['outcome'] or 'killed'}" for s in steps
            if s is not refused and s["lock_key"] == refused["lock_key"] and s["started_at"] <= start
            and (s["ended_at"] is None or s["ended_at"] > start)]


def overlapping_observer_runs(runs: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    """Pairs of runs of one observer (different epochs) whose lives overlap: a run lived from
    `started_at` to its `ended_at`, or to its last beat when it died without writing one."""
    by_name: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        by_name[r["name"]].append({**r, "end": r["ended_at"] or r["last_beat_at"]})
    found = []
    for name, items in by_name.items():
        items.sort(key=lambda r: r["started_at"])
        latest = None
        for r in items:
            if latest is not None and r["started_at"] < latest["end"]:
                found.append((name, latest["epoch"], r["epoch"]))
            if latest is None or r["end"] > latest["end"]:
                latest = r
    return found


def check_observers(names: list[str], runs: list[dict[str, Any]], rows: list[dict[str, Any]],
                    since: datetime | None) -> dict[str, Any]:
    overlaps = overlapping_observer_runs(runs)
    refused = [f"{r['name']} epoch {r['epoch']}" for r in runs if not r["probe_ok"] or r["reprobe_failed"]]
    state = {r["name"]: r for r in rows}
    beat_after = {r["name"] for r in runs if since is not None and r["last_beat_at"] > since
                  and state.get(r["name"], {}).get("epoch") == r["epoch"]}
    not_running = [f"{n}: {state[n]['state'] if n in state else 'missing'}" for n in names
                   if n not in state or state[n]["state"] != "processing" or n not in beat_after]
    return {
        "checks": {
            "overlapping_observer_runs (two copies at once)": len(overlaps),
            "observer_probe_violations (probe refused)": len(refused),
            "observers_not_running (at the end)": len(not_running),
        },
        "examples": {"observers": [*overlaps[:5], *refused[:5], *not_running[:5]]},
        "counts": {"observers": len(names), "runs": len(runs), "moves": sum(r["moves"] for r in rows),
                   "killed_runs": sum(1 for r in runs if r["ended_at"] is None),
                   "probe_reconnects": sum(r["probe_lost"] for r in runs),
                   "gap_sec": _gaps(runs)},
    }


def _gaps(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    """From the end of a run (its last beat when it was killed) to the start of the next run of the
    same observer: how long it was not running, per move."""
    by_name: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        by_name[r["name"]].append(r)
    gaps = []
    for items in by_name.values():
        items.sort(key=lambda r: r["started_at"])
        gaps += [(b["started_at"] - (a["ended_at"] or a["last_beat_at"])).total_seconds()
                 for a, b in itertools.pairwise(items)]
    if not gaps:
        return {"moves": 0, "median": None, "max": None}
    return {"moves": len(gaps), "median": round(statistics.median(gaps), 2), "max": round(max(gaps), 2)}


def key_tick(key: str, schedule: str | None) -> datetime:
    """The tick of a schedule's job from its idempotency key `schedule:<name>:<tick in UTC>`."""
    prefix = f"schedule:{schedule}:"
    assert key.startswith(prefix), key
    return datetime.fromisoformat(key[len(prefix):].replace("Z", "+00:00"))


def check_schedule(ticks: list[datetime], every_sec: float, window: dict[str, Any],
                   stall_sec: float = 15.0) -> dict[str, Any]:
    """Every tick of the window exactly once (missed="catch_up": a missed tick still gets its job).
    The window runs from the first tick after the schedule was created to the last tick enqueued;
    the last must be near the end (else the scheduler stalled).

    A tick is the job's idempotency key, unique in dl_jobs, so one tick can never have two jobs: a
    scheduler that fires twice shows as a job for a time that is not a tick at all. So every tick
    must be on the schedule's grid (interval ticks are the multiples of the period from the Unix
    epoch, model/schedule_timing.py) and not before the schedule was created; a key seen twice
    (impossible while the key is unique) counts too."""
    counts = Counter(ticks)
    step = timedelta(seconds=every_sec)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    created, stopped = window.get("created_at"), window.get("stopped_at")
    off_grid = [f"{t.isoformat()} x{n}" for t, n in counts.items()
                if n > 1 or (t - epoch) % step or (created is not None and t < created)]
    missing: list[str] = []
    if counts:
        first = epoch + step * (math.floor((created - epoch) / step) + 2) if created else min(counts)
        t = first
        last = max(counts)
        while t <= last:
            if t not in counts:
                missing.append(t.isoformat())
            t += step
    stalled = int(not counts or (stopped is not None and (stopped - max(counts)).total_seconds() > stall_sec))
    return {
        "checks": {
            "off_grid_ticks (a job for a time that is no tick)": len(off_grid),
            "missed_ticks (a tick without a job)": len(missing),
            "schedule_stalled (no tick near the end)": stalled,
        },
        "examples": {"ticks": (off_grid + missing)[:5]},
        "counts": {"ticks": len(counts), "jobs": len(ticks),
                   "first": min(counts).isoformat() if counts else None,
                   "last": max(counts).isoformat() if counts else None},
    }


def check_operation(op: dict[str, Any] | None, jobs: list[dict[str, Any]], n: int,
                    started: dict[str, Any] | None) -> dict[str, Any]:
    wrong = [f"{j['job_id']}: {j['status']}, {j['by_op']} rows of the operation" for j in jobs
             if j["status"] != "canceled" or j["by_op"] != 1]
    counts_ok = op is not None and (op["total"], op["done"], op["changed"], len(jobs)) == (n, n, n, n)
    return {
        "checks": {
            "operation_not_finished": int(op is None or op["state"] != "finished"),
            "operation_count_mismatches (total/done/changed)": int(not counts_ok),
            "operation_jobs_not_once (not canceled once)": len(wrong),
            "missing_operation_kill (runner killed mid-batch)": int(not (started and started.get("killed_runner"))),
        },
        "examples": {"operation": [str(op), *wrong[:5]]},
        "counts": {"jobs": len(jobs), **({k: op[k] for k in ("state", "total", "done", "changed")}
                                         if op else {})},
    }
