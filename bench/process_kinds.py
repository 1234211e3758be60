"""The processor of bench/processes.py (loaded by its worker through DL_PIPELINE_MODULES, and by
the driver to call it): every task appends one event; init and each timeout arm the next timer
BENCH_TIMER_SEC ahead; a call answers at once."""

from __future__ import annotations

import os

from dataloader import Intent, SetTimer, processor

TIMER_SEC = float(os.environ.get("BENCH_TIMER_SEC", "5"))
CONCURRENCY = int(os.environ.get("BENCH_PROCESS_CONCURRENCY", "16"))


@processor("bench", concurrency=CONCURRENCY)
async def bench(task, process, ctx) -> Intent:
    if task.type == "call":
        return Intent(events=[{"call": task.args}], response={"ok": True, "events": process.last_event_id})
    return Intent(events=[{"t": task.type.value}], action=SetTimer(after=TIMER_SEC))
