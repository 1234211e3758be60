"""The worked example of docs/processes.md, verbatim: a payment with an authorization timeout and
a refund call (test_payment_example.py runs it)."""

from datetime import timedelta

from dataloader import FatalError, Intent, Process, ProcessTask, RetryPolicy, SetTimer, UnsetTimer, processor


def make_payments(ns: str = "payments") -> None:
    @processor(ns, retry=RetryPolicy(initial_timeout=1, max_attempts=5), concurrency=8)
    async def payments(task: ProcessTask, process: Process, ctx) -> Intent:
        state = process.aux_state or {}
        if task.type == "init":  # a new payment waits for the bank's authorization
            return Intent(events=[{"type": "created", "amount": task.args["amount"]}],
                          aux_state={"amount": task.args["amount"], "state": "pending"},
                          action=SetTimer(after=timedelta(seconds=task.args.get("auth_timeout", 30))),
                          response={"state": "pending"})
        if task.type == "call" and task.args["op"] == "authorized":
            # the authorization came in time: no timeout any more
            return Intent(events=[{"type": "authorized"}], aux_state={**state, "state": "authorized"},
                          action=UnsetTimer(), response={"state": "authorized"})
        if task.type == "call" and task.args["op"] == "refund":
            if state.get("state") != "authorized":
                raise FatalError(f"cannot refund a {state.get('state')} payment")
            refunded = state.get("refunded", 0) + task.args["amount"]
            if refunded > state["amount"]:
                raise FatalError("refund exceeds the amount")
            return Intent(events=[{"type": "refunded", "amount": task.args["amount"]}],
                          aux_state={**state, "refunded": refunded}, response={"refunded": refunded})
        if task.type == "timeout":  # no authorization in time: cancel, and forget it in a day
            return Intent(events=[{"type": "expired"}], aux_state={**state, "state": "expired"},
                          action=SetTimer(after=timedelta(days=1), remove=True))
        raise FatalError(f"unexpected {task.type} {task.args}")
