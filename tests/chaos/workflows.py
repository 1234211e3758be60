"""Durable workflows under the chaos run's kills, restart and SIGTERM: the client side and the checks
(the workflows themselves, with their step probe, are in node_workflows.py, loaded by the nodes).

During the chaos the harness starts `workflows` runs of `chaos.order` over HTTP (each with its own
idempotency key, resent with the same key to another node after a transport error or a 5xx),
spread over the kill schedule, in the run's own workflow queue `chaos-<token>-wf` (every node serves
it, `workflow_concurrency` slots each). A run: step `prepare`, `wf.sleep(sleep_sec)`, step
`after-sleep`, `wf.wait_for("go")`, `wf.gather` of `workflow_children` runs of `chaos.part` (one
step each), step `finish`. The signal "go" (payload `{"n": n}`) is sent by the harness over HTTP:
for every other run right after its start (before its wait is reached: the signal is stored), for
the others LATE_SIGNAL_SEC after the run's wait is recorded pending (the run waits without a worker
until the signal wakes it). One kill is aimed at a node in the middle of a workflow step (the third
kill), so a step is really cut off before its record; the others fall where they fall, and the
report counts what the runs were doing at each kill (in a step, asleep, waiting, joining).

Afterwards, from the probe table and dl_workflow_steps / dl_workflow_runs / dl_jobs alone
(`check_workflows`, a pure function self-tested with planted violations in test_chaos_short.py):

- **no step ran again after its result was recorded**: no probe start of a step_key later than that
  step's `finished_at` (both the database clock);
- **a re-run keeps its key**: every probe row's step_key is `<run_id>:<seq>` of the recorded step of
  that name, every recorded step has a probe row, and its recorded result names one of its calls;
  steps run more than once (cut off before their record) are counted, not failed;
- **nothing lost**: every started run (and every child) ended `succeeded`, with the result its input
  and its signal dictate;
- **every join exactly once**: one gather position per parent, `done`, one `workflow_gather` journal
  row recording it done, with every child's result; exactly `workflow_children` children per parent,
  each with the id derived from the parent and position (uuid5), each enqueued once (one `queued`
  journal row), counted by the join once (`joined`);
- **the wait took the signal sent**: the wait's result is the run's payload;
- **every sleep woke within the bound, never before its end**: the first start of the step after
  the sleep is not before the sleep's `wake_at` (an early signal wakes a sleeping run: it must go
  back to sleep), and at most `wake_bound_sec` after it: max(lease + reaper period, fallback poll)
  + WAKE_SLACK_SEC = max(5 + 1, 10) + 5 = 15 s in the chaos runs (see wake_bound_sec).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx

from tests.chaos.capabilities import Refused
from tests.chaos.nodes import NodeSlot

if TYPE_CHECKING:
    from tests.chaos.harness import ChaosRun

# The workflows of node_workflows.py (registered by the nodes only: importing that module registers
# them in the importing process) and their probe table.
ORDER = "chaos.order"
PART = "chaos.part"
SIGNAL = "go"

WF_STEPS_DDL = """
CREATE TABLE IF NOT EXISTS chaos_wf_steps (
    invocation uuid PRIMARY KEY,           -- one per call of a step function (a retried insert is one row)
    run_id uuid NOT NULL,
    name text NOT NULL,
    step_key text NOT NULL,
    pid int NOT NULL,
    node text NOT NULL,
    run_attempt int NOT NULL,
    started_at timestamptz NOT NULL        -- clock_timestamp(): the database clock
);
CREATE INDEX IF NOT EXISTS ix_chaos_wf_steps_run ON chaos_wf_steps (run_id);
"""

# What a wake may take beyond the longer of (lease + reaper period) and the fallback poll: a node
# started again after a kill -9 (2-7 s on a loaded 2-core machine: imports, pools, the first claim)
# while the other is down too, or the database restarting (~1 s) and the nodes reconnecting.
WAKE_SLACK_SEC = 5.0
# The run compares wake_at with this machine's clock, the probe stamps the database's: one clock, but
# read through two paths.
EARLY_TOLERANCE_SEC = 0.01
# A late signal is sent this long after the run's wait is recorded (so that kills find runs waiting).
LATE_SIGNAL_SEC = 1.0
# The aimed kill takes a node whose workflow step started this recently (steps last STEP_SEC, at least
# 0.4 s: the kill lands before the step's record).
AIM_WINDOW_SEC = (0.03, 0.25)


@dataclass
class WfRun:
    n: int
    key: str
    early_signal: bool
    run_id: str | None = None
    requests: int = 0
    signal_requests: int = 0
    signal_acked: bool = False
    errors: list[str] = field(default_factory=list)


def wake_bound_sec(lease_ttl_sec: float, reaper_period_sec: float, poll_fallback_sec: float) -> float:
    """How late after its wake_at a sleeping run may take its next step under the chaos. The node that
    handed the run back keeps a timer for its wake_at; when that node is killed meanwhile, another
    learns the due time at its next empty claim, at the latest at its fallback poll. A run cut off
    between recording its sleep and handing its job back stays `running` until the reaper finds its
    lease expired (lease + reaper period after the kill, which was before wake_at), then is
    requeued with a NOTIFY. Whichever is longer, plus WAKE_SLACK_SEC."""
    return max(lease_ttl_sec + reaper_period_sec, poll_fallback_sec) + WAKE_SLACK_SEC


class WorkflowLoad:
    """Starts, signals and checks the workflow runs of one ChaosRun."""

    def __init__(self, run: ChaosRun) -> None:
        self.run = run
        cfg = run.cfg
        self.queue = f"{run.queue}-wf"
        self.runs = [WfRun(n=i, key=f"wf-{run.token}-{i}", early_signal=i % 2 == 0) for i in range(cfg.workflows)]
        self.aimed: str | None = None
        self.aim_tried = False
        self.at_kills: list[dict[str, int]] = []
        self.settled: dict[str, Any] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def input_of(self, r: WfRun) -> dict[str, Any]:
        cfg = self.run.cfg
        return {"n": r.n, "step_sec": cfg.workflow_step_sec, "sleep_sec": cfg.workflow_sleep_sec,
                "children": cfg.workflow_children}

    # -- during the chaos -----------------------------------------------------------------------

    async def produce(self) -> None:
        """Start the runs evenly over most of the kill schedule (each signalled by its own task)."""
        cfg = self.run.cfg
        if not self.runs:
            return
        span = (cfg.kills + 2) * sum(cfg.kill_interval) / 2 * 0.8
        pause = span / len(self.runs)
        for r in self.runs:
            self._tasks.append(asyncio.create_task(self._one(r)))
            await asyncio.sleep(pause)
        await asyncio.gather(*self._tasks)

    async def _one(self, r: WfRun) -> None:
        caps = self.run.caps
        cfg = self.run.cfg
        body = {"workflow": ORDER, "input": self.input_of(r), "idempotency_key": r.key,
                "lease_ttl_sec": cfg.lease_ttl_sec}
        try:
            r.requests += 1
            resp = await caps.request("POST", "/api/v1/workflows", body, ok=(200, 201),
                                      deadline_sec=cfg.submit_timeout_sec)
            r.run_id = resp.json()["run_id"]
            if not r.early_signal:
                await self._until_waiting(r.run_id)
                await asyncio.sleep(LATE_SIGNAL_SEC)  # the run waits, without a worker, meanwhile
            r.signal_requests += 1
            await caps.request("POST", f"/api/v1/workflows/{r.run_id}/signals/{SIGNAL}", {"payload": {"n": r.n}},
                               ok=(202,), deadline_sec=cfg.submit_timeout_sec)
            r.signal_acked = True
        except (Refused, httpx.TransportError, TimeoutError) as exc:
            r.errors.append(f"{r.key}: {exc}")

    async def _until_waiting(self, run_id: str) -> None:
        """Until the run's wait is recorded (pending, or already done: it cannot be without the signal)."""
        deadline = time.monotonic() + self.run.cfg.submit_timeout_sec
        while time.monotonic() < deadline:
            if await self.run.db.fetchval("SELECT count(*) FROM dl_workflow_steps WHERE run_id = $1::uuid "
                                          "AND kind = 'wait'", run_id):
                return
            await asyncio.sleep(0.2)
        raise TimeoutError(f"run {run_id} never reached its wait")

    async def aimed_victim(self, k: int) -> NodeSlot | None:
        """The third kill: a node whose workflow step started a moment ago and is not recorded yet."""
        run, cfg = self.run, self.run.cfg
        if not cfg.aim or not cfg.workflows or k != 2:
            return None
        self.aim_tried = True
        sql = ("SELECT p.node FROM chaos_wf_steps p WHERE p.started_at BETWEEN clock_timestamp() - $1::float8 * "
               "interval '1 s' AND clock_timestamp() - $2::float8 * interval '1 s' AND NOT EXISTS (SELECT 1 FROM "
               "dl_workflow_steps s WHERE s.run_id = p.run_id AND s.name = p.name AND s.state <> 'pending')")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            nodes = {r["node"] for r in await run.db.fetch(sql, AIM_WINDOW_SEC[1], AIM_WINDOW_SEC[0])}
            for slot in run.slots:
                if slot.ready() and slot.current is not None and slot.current.name in nodes:
                    self.aimed = slot.current.name
                    return slot
            await asyncio.sleep(0.03)
        return None

    async def at_kill(self, victim: str) -> None:
        """What the unfinished runs are doing at a kill (their job's state, the last recorded position,
        and whether the victim was running them)."""
        if not self.runs:
            return
        rows = await self.run.db.fetch(
            "SELECT j.status::text AS status, j.available_at > now() AS later, s.kind, s.state, "
            "(SELECT e.payload->>'worker' FROM dl_job_events e WHERE e.job_id = j.job_id AND e.kind = 'picked' "
            " ORDER BY e.event_id DESC LIMIT 1) = $2 AS on_victim "
            "FROM dl_jobs j LEFT JOIN LATERAL (SELECT kind, state FROM dl_workflow_steps w WHERE w.run_id = j.job_id "
            "ORDER BY seq DESC LIMIT 1) s ON true WHERE j.queue = $1 AND j.status::text IN ('queued', 'running')",
            self.queue, victim, deadline_sec=10)
        self.at_kills.append(dict(Counter(phase_of(dict(r)) for r in rows)))

    async def stop(self) -> None:
        """The starts and signals are all sent (or failed) before the settle."""
        await asyncio.gather(*self._tasks)

    # -- after the chaos ------------------------------------------------------------------------

    async def settle(self) -> None:
        """Until every run of the workflow queue has ended (deadline: settle_timeout_sec)."""
        run = self.run
        t0 = time.monotonic()
        deadline = t0 + run.cfg.settle_timeout_sec
        while time.monotonic() < deadline:
            left = await run.db.fetchval("SELECT count(*) FROM dl_jobs WHERE queue = $1 AND status::text IN "
                                         "('queued', 'running')", self.queue)
            if not left:
                break
            await asyncio.sleep(0.25)
        self.settled = {"settled": time.monotonic() < deadline, "settle_sec": round(time.monotonic() - t0, 1)}

    async def report(self) -> dict[str, Any]:
        db, cfg = self.run.db, self.run.cfg
        jobs = await db.fetch(
            "SELECT j.job_id::text, j.task, j.status::text, j.idempotency_key, j.attempt, j.result::text AS result, "
            "j.args->'input' AS input, r.parent_run_id::text, r.parent_seq, r.joined "
            "FROM dl_jobs j LEFT JOIN dl_workflow_runs r ON r.run_id = j.job_id WHERE j.queue = $1", self.queue)
        ids = [j["job_id"] for j in jobs]
        steps = await db.fetch(
            "SELECT run_id::text, seq, kind, name, state, result::text AS result, attempts, wake_at, finished_at "
            "FROM dl_workflow_steps WHERE run_id = ANY($1::uuid[])", ids)
        probes = await db.fetch("SELECT invocation::text, run_id::text, name, step_key, pid, node, run_attempt, "
                                "started_at FROM chaos_wf_steps WHERE run_id = ANY($1::uuid[])", ids)
        events = await db.fetch(
            "SELECT job_id::text, kind, payload FROM dl_job_events WHERE job_id = ANY($1::uuid[]) "
            "AND kind IN ('queued', 'workflow_gather')", ids)
        signals = await db.fetch("SELECT run_id::text, name, payload::text AS payload, consumed_seq "
                                 "FROM dl_workflow_signals WHERE run_id = ANY($1::uuid[])", ids)
        bound = wake_bound_sec(cfg.lease_ttl_sec, cfg.reaper_period_sec, cfg.poll_fallback_sec)
        started = {r.run_id: self.input_of(r) for r in self.runs if r.run_id}
        restart = getattr(self.run, "restart", None) or {}
        outages = ([(datetime.fromtimestamp(restart["down_from"], UTC),
                     datetime.fromtimestamp(restart["down_to"], UTC))] if "down_from" in restart else [])
        found = check_workflows(started, cfg.workflow_children, [dict(j) for j in jobs], [dict(s) for s in steps],
                                [dict(p) for p in probes], [dict(e) for e in events], [dict(s) for s in signals],
                                bound, outages)
        # what the slowest wakes' jobs went through from a little before wake_at (for the report)
        for w in found["slowest_wakes"]:
            trail = await db.fetch(
                "SELECT kind, payload->>'worker' AS worker, payload->>'reason' AS reason, "
                "round(extract(epoch FROM ts - $2::timestamptz)::numeric, 2)::float8 AS t FROM dl_job_events "
                "WHERE job_id = $1::uuid AND ts BETWEEN $2::timestamptz - interval '3 s' AND $2::timestamptz "
                "+ $3::float8 * interval '1 s' + interval '0.5 s' AND kind <> 'heartbeat' ORDER BY event_id",
                w["run_id"], w["wake_at"], w["late_sec"])
            w["trail"] = [" ".join(str(x) for x in (r["t"], r["kind"], r["worker"] or "", r["reason"] or "") if x != "")
                          for r in trail]
            w["wake_at"] = w["wake_at"].isoformat()
        unacked = [e for r in self.runs for e in r.errors] + [
            f"{r.key}: never acknowledged" for r in self.runs if not r.errors and (not r.run_id or not r.signal_acked)]
        aim_missed = int(self.aim_tried and self.aimed is None)
        checks = {"unacked_workflow_requests (start or signal never got 2xx)": len(unacked),
                  **found["checks"],
                  "aimed_workflow_kill_missed (no node mid-step)": aim_missed}
        return {
            "checks": checks,
            "examples": {"workflows": [*unacked[:5], *found["examples"]]},
            "counts": {**found["counts"], "starts_resent": sum(r.requests - 1 for r in self.runs),
                       "signals_before_wait": sum(1 for r in self.runs if r.early_signal),
                       "signals_resent": sum(max(0, r.signal_requests - 1) for r in self.runs),
                       "slowest_wakes": found["slowest_wakes"],
                       "aimed_kill": self.aimed, "kills_finding_runs": kills_finding(self.at_kills),
                       "at_kills": self.at_kills, "settle": self.settled},
        }


def phase_of(row: dict[str, Any]) -> str:
    """A run's phase from its job's state and its last recorded position."""
    if row["status"] == "running":
        return "running on the victim" if row.get("on_victim") else "running"
    kind, state = row.get("kind"), row.get("state")
    if kind == "sleep" and row.get("later"):
        return "asleep"
    if kind == "wait" and state == "pending":
        return "waiting"
    if kind == "gather" and state == "pending":
        return "joining"
    return "queued"


def kills_finding(at_kills: list[dict[str, int]]) -> dict[str, int]:
    """How many kills found at least one run in each phase."""
    return dict(Counter(phase for seen in at_kills for phase in seen))


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _sec(a: datetime, b: datetime) -> float:
    return (a - b).total_seconds()


def check_workflows(started: dict[str, dict[str, Any]], children: int, jobs: list[dict[str, Any]],
                    steps: list[dict[str, Any]], probes: list[dict[str, Any]], events: list[dict[str, Any]],
                    signals: list[dict[str, Any]], wake_bound: float,
                    outages: Sequence[tuple[datetime, datetime]] = ()) -> dict[str, Any]:
    """`started`: run id -> input of every acknowledged start; the rest: rows of the workflow queue
    (jobs with their dl_workflow_runs columns, dl_workflow_steps, the probe's chaos_wf_steps, the
    journal's `queued` and `workflow_gather` rows, dl_workflow_signals). `outages`: when the
    database was down; a wake is held to its bound less the part of them between its wake_at and
    its first step (nothing can run a step while PostgreSQL restarts: promise 10's weather)."""
    by_id = {j["job_id"]: j for j in jobs}
    steps_of: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for s in steps:
        steps_of[s["run_id"]][s["seq"]] = s
    probes_of: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for p in probes:
        probes_of[(p["run_id"], p["name"])].append(p)
    events_of: dict[str, Counter[str]] = defaultdict(Counter)
    for e in events:
        payload = _json(e["payload"]) or {}
        events_of[e["job_id"]][e["kind"] if e["kind"] == "queued" else f"gather:{payload.get('state')}"] += 1

    lost, not_succeeded, wrong_result = [], [], []
    after_record, wrong_key, no_probe, not_a_call = [], [], [], []
    gathers_bad, children_bad, signal_bad, late_wakes, early_wakes = [], [], [], [], []
    reruns: Counter[str] = Counter()
    wakes: list[float] = []
    slowest: list[dict[str, Any]] = []

    # every step function's calls, against its recorded position (parents and children alike)
    for (run_id, name), calls in probes_of.items():
        rec = next((s for s in steps_of.get(run_id, {}).values() if s["kind"] == "step" and s["name"] == name), None)
        if rec is None or rec["state"] != "done":
            no_probe.append(f"{run_id} step {name!r}: ran {len(calls)}x, recorded {rec and rec['state']}")
            continue
        key = f"{run_id}:{rec['seq']}"
        wrong_key += [f"{run_id} step {name!r}: key {p['step_key']}, recorded at {key}" for p in calls
                      if p["step_key"] != key]
        after_record += [f"{key} ({name}) started at {p['started_at'].isoformat()} on {p['node']}, recorded at "
                         f"{rec['finished_at'].isoformat()}" for p in calls if p["started_at"] > rec["finished_at"]]
        if len(calls) > 1:
            reruns[name] += 1
        if (_json(rec["result"]) or {}).get("invocation") not in {p["invocation"] for p in calls}:
            not_a_call.append(f"{key} ({name}): recorded result {rec['result']} is none of its {len(calls)} calls")
    for run_id, recs in steps_of.items():
        no_probe += [f"{run_id}:{s['seq']} ({s['name']}) recorded done, never ran" for s in recs.values()
                     if s["kind"] == "step" and s["state"] == "done" and not probes_of.get((run_id, s["name"]))]

    for run_id, order in started.items():
        job = by_id.get(run_id)
        if job is None:
            lost.append(f"{run_id} (n={order['n']}): acknowledged, no job")
            continue
        if job["status"] != "succeeded":
            not_succeeded.append(f"{run_id} (n={order['n']}): {job['status']}")
            continue
        recs = steps_of.get(run_id, {})
        kinds = [(recs[q]["kind"], recs[q]["name"], recs[q]["state"]) for q in sorted(recs)]
        want = [("step", "prepare", "done"), ("sleep", "sleep", "done"), ("step", "after-sleep", "done"),
                ("wait", SIGNAL, "done"), ("gather", "+".join([PART] * children), "done"), ("step", "finish", "done")]
        if kinds != want:
            wrong_result.append(f"{run_id}: history {kinds}")
            continue
        # the wait took the run's own signal, and it was consumed by that wait alone
        if _json(recs[4]["result"]) != {"n": order["n"]}:
            signal_bad.append(f"{run_id}: wait returned {recs[4]['result']}, sent {{'n': {order['n']}}}")
        consumed = [s for s in signals if s["run_id"] == run_id and s["consumed_seq"] is not None]
        if [s["consumed_seq"] for s in consumed] != [4]:
            signal_bad.append(f"{run_id}: signals consumed at {[s['consumed_seq'] for s in consumed]}")
        # the sleep's wake: the first call of the step after it, against its wake_at
        woke = [p["started_at"] for p in probes_of.get((run_id, "after-sleep"), [])]
        if woke and recs[2]["wake_at"] is not None:
            late = _sec(min(woke), recs[2]["wake_at"])
            down = sum(max(0.0, _sec(min(end, min(woke)), max(start, recs[2]["wake_at"]))) for start, end in outages)
            wakes.append(late)
            slowest.append({"run_id": run_id, "wake_at": recs[2]["wake_at"], "late_sec": round(late, 2),
                            "database_down_sec": round(down, 2)})
            if late - down > wake_bound:
                late_wakes.append(f"{run_id}: woke {late:.2f}s after wake_at, {down:.2f}s of it with the database "
                                  f"down (bound {wake_bound:g}s)")
            if late < -EARLY_TOLERANCE_SEC:
                early_wakes.append(f"{run_id}: the step after the sleep started {-late:.3f}s before wake_at")
        # the join: exactly `children` children, with the derived ids, each enqueued once, counted once,
        # and the gather recorded done once with each child's result
        expected_ids = [str(uuid.uuid5(uuid.UUID(run_id), f"5:{i}")) for i in range(children)]
        mine = sorted(j["job_id"] for j in jobs if j["parent_run_id"] == run_id)
        if mine != sorted(expected_ids):
            children_bad.append(f"{run_id}: children {mine}, expected {expected_ids}")
        for cid in expected_ids:
            child = by_id.get(cid)
            if child is None:
                continue
            if events_of[cid]["queued"] != 1 or child["parent_seq"] != 5 or not child["joined"]:
                children_bad.append(f"child {cid}: enqueued {events_of[cid]['queued']}x, parent_seq "
                                    f"{child['parent_seq']}, joined {child['joined']}")
            if child["status"] != "succeeded":
                not_succeeded.append(f"child {cid} of {run_id}: {child['status']}")
        gathered = _json(recs[5]["result"]) or []
        want_parts = []
        for i, cid in enumerate(expected_ids):
            child = by_id.get(cid)
            want_parts.append({"run_id": cid, "status": "succeeded",
                               "result": _json(child["result"]) if child else None})
            if child is not None and (_json(child["result"]) or {}).get("i") != i:
                wrong_result.append(f"child {cid}: result {child['result']}")
        got = [{k: g.get(k) for k in ("run_id", "status", "result")} for g in gathered]
        if got != want_parts or events_of[run_id]["gather:done"] != 1:
            gathers_bad.append(f"{run_id}: gather recorded {got}, journal done rows "
                               f"{events_of[run_id]['gather:done']}")
        result = _json(job["result"]) or {}
        if result != {"n": order["n"], "signal": {"n": order["n"]}, "parts": [p["result"] for p in want_parts],
                      "keys": [f"{run_id}:1", f"{run_id}:3", f"{run_id}:6"]}:
            wrong_result.append(f"{run_id}: result {job['result']}")
    strangers = [j["job_id"] for j in jobs if j["job_id"] not in started and j["parent_run_id"] not in started]
    step_calls = Counter(len(calls) for calls in probes_of.values())
    return {
        "checks": {
            "workflow_runs_lost (acknowledged, no run)": len(lost),
            "workflow_runs_not_succeeded (run or child)": len(not_succeeded),
            "workflow_wrong_results (history or result)": len(wrong_result),
            "workflow_stranger_runs (in the queue, not ours)": len(strangers),
            "steps_run_after_record (probe start > finished_at)": len(after_record),
            "steps_rerun_with_another_key": len(wrong_key),
            "steps_not_matching_probe (ran unrecorded / recorded unrun)": len(no_probe),
            "steps_recorded_result_not_a_call": len(not_a_call),
            "gathers_not_once (join wrong or recorded twice)": len(gathers_bad),
            "children_not_once (ids, enqueues, joined)": len(children_bad),
            "signals_not_taken_once": len(signal_bad),
            "sleeps_woke_late (first step after > bound)": len(late_wakes),
            "sleeps_woke_early (first step after < wake_at)": len(early_wakes),
        },
        "examples": [*lost[:3], *not_succeeded[:3], *wrong_result[:3], *strangers[:3], *after_record[:3],
                     *wrong_key[:3], *no_probe[:3], *not_a_call[:3], *gathers_bad[:3], *children_bad[:3],
                     *signal_bad[:3], *late_wakes[:3], *early_wakes[:3]],
        "counts": {
            "runs": len(started), "children": sum(1 for j in jobs if j["parent_run_id"] in started),
            "steps_recorded": sum(1 for s in steps if s["kind"] == "step" and s["state"] == "done"),
            "step_calls": len(probes),
            "steps_run_more_than_once": sum(reruns.values()),
            "steps_rerun_by_name": dict(reruns),
            "calls_per_step": {str(k): v for k, v in sorted(step_calls.items())},
            "run_attempts_max": max((j["attempt"] for j in jobs), default=0),
            "wake_after_wake_at_sec": ({"sleeps": len(wakes), "median": round(statistics.median(wakes), 2),
                                        "max": round(max(wakes), 2), "bound": wake_bound} if wakes else None),
        },
        "slowest_wakes": sorted(slowest, key=lambda w: -w["late_sec"])[:3],
    }
