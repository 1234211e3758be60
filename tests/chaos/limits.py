"""The queue's flow limits in the chaos run, checked from the journal (`dl_job_events`) alone.

The chaos queue runs with a global concurrency limit, a per-partition concurrency limit and a rate
(docs/flow-control.md), set through DL_QUEUES_JSON on every node, under the same kill -9s,
PostgreSQL restart and SIGTERM as everything else. Afterwards, from the journal:

- **concurrency**: an attempt holds a slot from its `picked` row to the row that ends it (`done`,
  `failed`, `canceled`, `lost`, or a `requeue` of any reason: the reaper's `lease_expired` after a
  kill -9, `shutdown` after a SIGTERM). Replayed in `event_id` order, never more than the limit at
  once, globally and per `partition_key`. Why `event_id` order is the gate's view: the gate
  (dl_flow_gate) counts `running` rows in a snapshot taken after it locked the queue's flow row, and
  the claim writes its `picked` rows after the gate in the same statement; an ending row's
  `event_id` is drawn before its transaction commits. So when the gate saw a job's end, that end's
  `event_id` is below the new `picked` row's; the replay can only count fewer running than the gate
  did, never more. (A kill -9ed node's attempt holds its slot until the reaper's `requeue`, exactly
  as the gate counts it: the row stays `running` until then.)
- **rate**: the gate stamps the starts of one claim with its clock after its lock (its rows of
  `dl_flow_starts`, kept a minute), and allows at most `rate` in any window of `period` ending at
  that stamp; a gated claim's `picked` rows carry `clock_timestamp()` taken after the gate in the
  same statement (claim_gate_take.sql), normally a few ms later, more if the backend was
  descheduled in between. With the gate's stamps (`gate_starts`: the chaos harness copies
  `dl_flow_starts` every few seconds, before the gate prunes it), each `picked` row is matched to
  its job's latest unused stamp at most a second before it (none: `starts_not_counted_by_the_gate`),
  and any `rate + 1` consecutive starts must span at least `period` by those stamps, exactly.
  Without them, by the `picked` times, at least `period - RATE_TOLERANCE_SEC`.

Each check is a pure function over rows, self-tested with planted violations in
test_chaos_short.py, and the short run requires every limit to have been reached (a limit never
reached proves nothing).
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from typing import Any

# The gate's stamps of the chaos queue's starts, copied out of dl_flow_starts (which the gate prunes
# after a minute) every few seconds during the run.
FLOW_STARTS_DDL = """
CREATE TABLE IF NOT EXISTS chaos_flow_starts (
    job_id uuid NOT NULL,
    started_at timestamptz NOT NULL,
    PRIMARY KEY (job_id, started_at)
)
"""
COPY_FLOW_STARTS_SQL = ("INSERT INTO chaos_flow_starts (job_id, started_at) SELECT job_id, started_at "
                        "FROM dl_flow_starts WHERE queue = $1 ON CONFLICT DO NOTHING")

# From the gate's stamp to the clock_timestamp() of the same statement's journal insert: the rest of
# the gate (counting, recording the starts), the advisory locks and the update of the claimed rows.
RATE_TOLERANCE_SEC = 0.05
ENDS = {"done", "failed", "canceled", "lost", "requeue"}


def _payload(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return json.loads(value)
    return dict(value or {})


def _ts(value: Any) -> float:
    return value.timestamp() if isinstance(value, datetime) else float(value)


def check_limits(events: list[dict[str, Any]], partition_of: dict[str, str], *, concurrency: int | None,
                 partition_concurrency: int | None, rate_limit: int | None,
                 rate_period_sec: float | None,
                 gate_starts: dict[str, list[Any]] | None = None) -> dict[str, Any]:
    """`events`: the queue's journal rows (job_id, event_id, kind, ts), any order; `partition_of`:
    job_id -> partition_key; `gate_starts`: job_id -> the gate's stamps of its starts (optional)."""
    ordered = sorted(events, key=lambda e: e["event_id"])
    running: set[str] = set()
    per_key: Counter[str] = Counter()
    top, top_key = 0, 0
    over, over_key = [], []
    picks: list[tuple[float, str]] = []
    for e in ordered:
        job, kind = e["job_id"], e["kind"]
        key = partition_of.get(job, "")
        if kind == "picked":
            running.add(job)
            per_key[key] += 1
            picks.append((_ts(e["ts"]), job))
            top, top_key = max(top, len(running)), max(top_key, per_key[key])
            if concurrency is not None and len(running) > concurrency:
                over.append(f"event {e['event_id']}: {len(running)} running (limit {concurrency})")
            if partition_concurrency is not None and per_key[key] > partition_concurrency:
                over_key.append(f"event {e['event_id']}: {per_key[key]} running of {key!r} "
                                f"(limit {partition_concurrency})")
        elif kind in ENDS and job in running:
            running.discard(job)
            per_key[key] -= 1
    picks.sort()
    uncounted: list[str] = []
    lag: list[float] = []
    tolerance = RATE_TOLERANCE_SEC
    if gate_starts is not None:
        stamps = {job: sorted(_ts(g) for g in gs) for job, gs in gate_starts.items()}
        timed: list[tuple[float, str]] = []
        for s, job in picks:
            mine = stamps.get(job, [])
            best = max((g for g in mine if s - 1.0 <= g <= s), default=None)
            if best is None:
                uncounted.append(f"job {job} picked at {s:.3f}: no start of the gate at most 1 s before")
                continue
            mine.remove(best)
            lag.append(s - best)
            timed.append((best, job))
        picks, tolerance = sorted(timed), 0.0
    too_fast, densest = [], 0
    if rate_limit is not None and rate_period_sec is not None:
        least = rate_period_sec - tolerance
        j = 0
        for i, (t, _) in enumerate(picks):  # the most starts in any window (period less the tolerance)
            while j < len(picks) and picks[j][0] < t + least:
                j += 1
            densest = max(densest, j - i)
        for i in range(len(picks) - rate_limit):
            span = picks[i + rate_limit][0] - picks[i][0]
            if span < least - 1e-6:
                too_fast.append(f"{rate_limit + 1} starts in {span:.3f}s (rate {rate_limit}/{rate_period_sec}s)")
    return {
        "checks": {
            "concurrency_exceeded (journal: more running than the limit)": len(over),
            "partition_concurrency_exceeded (journal, per partition_key)": len(over_key),
            "rate_exceeded (journal: more starts in a window than the rate)": len(too_fast),
            **({"starts_not_counted_by_the_gate (a pick with no gate stamp)": len(uncounted)}
               if gate_starts is not None else {}),
        },
        "examples": {"limits": [*over[:5], *over_key[:5], *too_fast[:5], *uncounted[:5]]},
        "counts": {"most_running": top, "most_running_of_a_partition": top_key,
                   "most_starts_in_a_window": densest, "starts": len(picks),
                   "gate_to_journal_ms": ({"median": round(1000 * sorted(lag)[len(lag) // 2], 1),
                                           "max": round(1000 * max(lag), 1)} if lag else None),
                   "limits": {"concurrency": concurrency, "partition_concurrency": partition_concurrency,
                              "rate": f"{rate_limit}/{rate_period_sec}s" if rate_limit else None}},
    }


def limits_reached(counts: dict[str, Any]) -> dict[str, bool]:
    """Whether the run pushed each limit to its value (else its check proved nothing)."""
    lim = counts["limits"]
    rate = lim["rate"]
    return {
        "concurrency": lim["concurrency"] is None or counts["most_running"] == lim["concurrency"],
        "partition_concurrency": (lim["partition_concurrency"] is None
                                  or counts["most_running_of_a_partition"] == lim["partition_concurrency"]),
        "rate": rate is None or counts["most_starts_in_a_window"] >= int(rate.split("/")[0]),
    }
