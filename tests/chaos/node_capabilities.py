"""The node side of the other capabilities in the chaos run: the processor of namespace "chaos" and
the observer kind "chaos.watch", each with its probe (see pipelines.py for the probe and the
tables, capabilities.py for the client and the checks).

Loaded by the chaos nodes only, through DL_PIPELINE_MODULES (nodes.py): importing it registers the
processor and the observer kind in the importing process, so a test process must not import it (its
App.running() would then serve `process:chaos` and offer `chaos.watch`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from dataloader import ObserverContext, observer
from dataloader.processes import Intent, Process, ProcessTask, RetryPolicy, SetTimer, processor
from tests.chaos.pipelines import (
    BEAT_SEC,
    CONNECTION_ERRORS,
    OBSERVER_KIND,
    PROCESS_NS,
    STEP_SEC,
    Probe,
    chaos_dsn,
)


def process_lock_key(process_id: str) -> str:
    return f"process:{PROCESS_NS}:{process_id}"


@processor(PROCESS_NS, retry=RetryPolicy(initial_timeout=0.2, backoff_coefficient=2, max_timeout=1, max_attempts=25),
           concurrency=4, lease_ttl_sec=4)
async def chaos_process(task: ProcessTask, process: Process, ctx: Any) -> Intent:
    """One step: probe the process's key, record the run, apply the task, record its end."""
    args = task.args if isinstance(task.args, dict) else {}
    probe = Probe(chaos_dsn(args), process_lock_key(ctx.process_id))
    run_id = None
    outcome = "stopped"
    try:
        # inside the try: a step stopped while taking its probe must still close it (pipelines.py)
        await probe.ensure_held()
        run_id = await probe.record_start(ctx.task_id, ctx.attempt)
        await asyncio.sleep(float(args.get("step_sec", STEP_SEC)))  # a step long enough to overlap
        await probe.ensure_held()
        state = dict(process.aux_state) if isinstance(process.aux_state, dict) else {}
        kind = task.type.value
        if kind == "init":
            state = {"calls": 0, "timers": 0, "timer_sec": float(args.get("timer_sec", 1.0))}
            intent = Intent(events=[{"kind": "init"}], aux_state=state, response={"calls": 0},
                            action=SetTimer(after=state["timer_sec"]))
        elif kind == "call":
            state["calls"] = state.get("calls", 0) + 1
            intent = Intent(events=[{"kind": "call", "seq": args["seq"]}], aux_state=state,
                            response={"calls": state["calls"], "seq": args["seq"]})
        elif kind == "timeout":
            state["timers"] = state.get("timers", 0) + 1
            intent = Intent(events=[{"kind": "timer", "n": state["timers"]}], aux_state=state,
                            action=SetTimer(after=state.get("timer_sec", 1.0)))
        else:
            intent = Intent(events=[{"kind": kind}])
        outcome = "completed"
        return intent
    finally:
        if run_id is None:
            await probe.close()
        else:
            await probe.record_end_and_close(run_id, outcome)


@observer(OBSERVER_KIND)
async def chaos_watch(ctx: ObserverContext) -> None:
    """Beat every BEAT_SEC until asked to stop. A beat is written only by a run that is alive at that
    moment (database clock); the end is written only on the run's own connection, never after a
    reconnect that might come late, so a run's interval never claims more than it really lived."""
    probe = Probe(chaos_dsn(ctx.args), f"observer:{ctx.name}")
    run_id = None
    try:
        # inside the try: a run stopped while taking its probe must still close it (pipelines.py)
        await probe.ensure_held()
        run_id = await probe.fetchval(
            "INSERT INTO chaos_observer_runs (name, epoch, node, started_at, last_beat_at, probe_ok) "
            "VALUES ($1, $2, $3, clock_timestamp(), clock_timestamp(), $4) RETURNING id",
            ctx.name, ctx.epoch, ctx.node_name, bool(probe.probe_ok))
        while not await ctx.sleep(BEAT_SEC):
            await probe.ensure_held()
            await probe.fetchval(
                "UPDATE chaos_observer_runs SET last_beat_at = clock_timestamp(), beats = beats + 1, "
                "probe_lost = $2, reprobe_failed = $3 WHERE id = $1 RETURNING id",
                run_id, lambda: probe.lost, lambda: probe.reprobe_failed)
    finally:
        conn = probe.conn
        try:
            if run_id is not None and conn is not None and not conn.is_closed():
                await conn.execute("UPDATE chaos_observer_runs SET ended_at = clock_timestamp(), "
                                   "last_beat_at = clock_timestamp() WHERE id = $1", run_id, timeout=2)
        except CONNECTION_ERRORS:
            pass
        finally:
            await probe.close()
