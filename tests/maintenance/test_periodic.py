"""The periodic base and the reaper's settings, without a database or real time: a tick at start
and then every jittered period, a failing tick logged (warning for an unreachable database, error
with traceback otherwise) and retried next period, and a stop that does not wait out the period."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest
from pydantic import ValidationError

from dataloader import metrics
from dataloader.jobs.reaper import Reaper, ReaperSettings
from dataloader.maintenance import PeriodicService, PeriodicSettings
from dataloader.model.clock import ManualClock
from tests.support.engine import make_settings


class Ticker(PeriodicService):
    name = "ticker"

    def __init__(self, clock: ManualClock, outcomes: list[BaseException | None], seed: int = 7) -> None:
        super().__init__(PeriodicSettings(period_sec=10, jitter=0.1), clock=clock, rng=random.Random(seed))
        self.outcomes = outcomes
        self.calls = 0

    async def tick(self) -> None:
        self.calls += 1
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is not None:
            raise outcome


async def _parked_after(clock: ManualClock, service: Ticker, calls: int) -> float:
    [deadline] = await clock.parked(1)
    assert service.calls == calls
    return deadline - clock.monotonic()


async def test_ticks_at_start_then_every_jittered_period():
    clock = ManualClock()
    ticker = Ticker(clock, [])
    expected = random.Random(7)
    observed_before = metrics.SERVICE_TICK_SECONDS.labels("ticker")._sum.get()
    await ticker.start()
    for calls in range(1, 5):
        delay = await _parked_after(clock, ticker, calls)
        assert delay == pytest.approx(10 * expected.uniform(0.9, 1.1))
        assert 9 <= delay <= 11
        assert ticker.last_tick_at == clock.wall()
        clock.advance(delay)
    await _parked_after(clock, ticker, 5)
    await ticker.stop()
    assert ticker.ticks == ticker.calls == 5
    assert metrics.SERVICE_TICK_SECONDS.labels("ticker")._sum.get() == observed_before  # no time passed in a tick


async def test_a_failing_tick_is_logged_and_retried_next_period(caplog):
    clock = ManualClock()
    ticker = Ticker(clock, [ConnectionRefusedError("db down"), ValueError("bad row"), None])
    with caplog.at_level(logging.WARNING, logger="dataloader.maintenance"):
        await ticker.start()
        clock.advance(await _parked_after(clock, ticker, 1))
        clock.advance(await _parked_after(clock, ticker, 2))
        await _parked_after(clock, ticker, 3)
    assert ticker.running  # neither error ended the loop
    [down, bad] = [r for r in caplog.records if r.name == "dataloader.maintenance"]
    assert down.levelno == logging.WARNING and "database unavailable" in down.getMessage()
    assert down.exc_info is None
    assert bad.levelno == logging.ERROR and "tick failed" in bad.getMessage()
    assert bad.exc_info is not None and isinstance(bad.exc_info[1], ValueError)
    assert ticker.last_error == "ValueError: bad row"
    await ticker.stop()


async def test_stop_does_not_wait_out_the_period():
    clock = ManualClock()
    ticker = Ticker(clock, [])
    await ticker.start()
    await clock.parked(1)
    await asyncio.wait_for(ticker.stop(), timeout=5)  # a bound for a hang, never reached when it works
    assert not ticker.running and ticker.calls == 1 and clock.deadlines() == []


async def test_a_restarted_service_starts_afresh():
    clock = ManualClock()
    ticker = Ticker(clock, [])
    await ticker.start()
    await clock.parked(1)
    await ticker.stop()
    await ticker.start()  # what the supervisor does after a crash
    await _parked_after(clock, ticker, 2)
    await ticker.stop()


def test_reaper_settings_come_from_the_global_settings_and_are_validated():
    settings = make_settings("postgresql://unused/unused", reaper_period_sec=3)
    assert ReaperSettings.from_settings(settings) == ReaperSettings(period_sec=3, batch_size=1000, jitter=0.1)
    reaper = Reaper(repo=None, period=2, batch_size=50)  # type: ignore[arg-type]
    assert (reaper.settings.period_sec, reaper.settings.batch_size) == (2, 50)
    with pytest.raises(ValidationError):
        Reaper(repo=None, period=0)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        ReaperSettings(period_sec=1, surprise=True)  # type: ignore[call-arg]
