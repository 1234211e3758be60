"""A test processor whose behaviour the task args choose, recording every step as events."""

from __future__ import annotations

import asyncio
from typing import Any

from dataloader.exceptions import FatalError
from dataloader.processes import Intent, NewEvent, Process, ProcessTask, RetryPolicy, SetTimer, UnsetTimer, processor

FAST_RETRY = RetryPolicy(initial_timeout=0.1, backoff_coefficient=2, max_timeout=0.5, max_attempts=3)


class Boom(Exception):
    pass


# Steps as the processor ran them, per namespace: ("start" | "end", "<task type>:<n>"), appended in
# the order they happened; a test reads them to prove order and non-overlap.
STEPS: dict[str, list[tuple[str, str]]] = {}
# A task with args {"gate": name} waits for GATES[name] before doing anything else: "this task is
# running" is then a state the test waits for (its "start" step), not a guess made with a sleep.
GATES: dict[str, asyncio.Event] = {}


def gate(name: str) -> asyncio.Event:
    return GATES.setdefault(name, asyncio.Event())


def started(ns: str, label: str) -> bool:
    return ("start", label) in STEPS.get(ns, [])


def action_of(args: dict[str, Any]) -> Any:
    if "timer" in args:
        return SetTimer(after=args["timer"])
    if "remove_in" in args:
        return SetTimer(after=args["remove_in"], remove=True)
    if args.get("unset"):
        return UnsetTimer()
    return None


def register(ns: str, **options: Any) -> None:
    options.setdefault("retry", FAST_RETRY)

    @processor(ns, **options)
    async def handle(task: ProcessTask, process: Process, ctx: Any) -> Intent:
        args = task.args if isinstance(task.args, dict) else {}
        label = f"{task.type.value}:{args.get('n')}"
        STEPS.setdefault(ns, []).append(("start", label))
        try:
            if args.get("gate"):
                await gate(args["gate"]).wait()
            return await step(task, process, args)
        finally:
            STEPS[ns].append(("end", label))

    async def step(task: ProcessTask, process: Process, args: dict[str, Any]) -> Intent:
        kind = task.type.value
        if kind == "timeout":
            fails = (process.aux_state or {}).get("timeout_fails", 0) if isinstance(process.aux_state, dict) else 0
            if fails == "always" or task.attempt <= fails:
                raise Boom(f"timeout attempt {task.attempt} fails")
            if fails == "fatal":
                raise FatalError("timeout refuses")
            next_action = (process.aux_state or {}).get("then") if isinstance(process.aux_state, dict) else None
            return Intent(events=[{"kind": "timeout", "attempt": task.attempt}],
                          action=action_of(next_action or {}))
        if args.get("sleep"):
            await asyncio.sleep(args["sleep"])
        if args.get("fail"):
            raise Boom(args["fail"])
        events: list[Any] = [{"kind": kind, "n": args.get("n")}]
        events += [NewEvent({"kind": "extra", "i": i}, {"m": i}) for i in range(args.get("extra", 0))]
        response = {"kind": kind, "n": args.get("n"), "history": len(process.history),
                    "first": process.history[0].event_id if process.history else None,
                    "last": process.history[-1].event_id if process.history else None}
        return Intent(events=events, action=action_of(args), response=response,
                      aux_state=args["aux"] if "aux" in args else process.aux_state)
