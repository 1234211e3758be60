"""docs/processes.md's worked example runs as documented."""

from __future__ import annotations

import pytest

from dataloader import ProcessTaskFailed, ProcessWrongStatus
from tests.conftest import wait_until
from tests.processes.payment_example import make_payments


async def test_payment_authorized_then_refunded_and_one_that_expires(app, ns):
    make_payments(ns)
    async with app.running():
        assert await app.processes.init(ns, "pay-1", {"amount": 100}) == {"state": "pending"}
        assert await app.processes.call(ns, "pay-1", {"op": "authorized"}) == {"state": "authorized"}
        assert await app.processes.call(ns, "pay-1", {"op": "refund", "amount": 30}) == {"refunded": 30}
        with pytest.raises(ProcessTaskFailed, match="exceeds"):
            await app.processes.call(ns, "pay-1", {"op": "refund", "amount": 80})
        # the failed call put the payment in error: an operator looks, then repairs it
        with pytest.raises(ProcessWrongStatus):
            await app.processes.call(ns, "pay-1", {"op": "refund", "amount": 10})
        await app.processes.simple_repair(ns, "pay-1")
        assert await app.processes.call(ns, "pay-1", {"op": "refund", "amount": 10}) == {"refunded": 40}

        await app.processes.init(ns, "pay-2", {"amount": 5, "auth_timeout": 0.3})

        async def expired() -> bool:
            return (await app.processes.get(ns, "pay-2")).aux_state["state"] == "expired"

        await wait_until(expired, timeout=15)
        process = await app.processes.get(ns, "pay-2")
        assert [e.payload["type"] for e in process.history] == ["created", "expired"]
        assert process.timer is not None and process.timer.type == "remove"
    history = (await app.processes.get(ns, "pay-1")).history
    assert [e.payload["type"] for e in history] == ["created", "authorized", "refunded", "refunded"]
