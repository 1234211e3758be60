"""The supervisor's rules, without a database or real time: a crashed service comes back after
base × 2^(n-1) seconds capped at the maximum, a healthy run resets that, stops run in reverse
order, leader-only services follow leadership, and the state it reports matches."""

from __future__ import annotations

import asyncio

import pytest

from dataloader import metrics
from dataloader.maintenance import BackoffPolicy, Scope, ServiceSettings, ServiceState, Supervisor
from dataloader.model.clock import ManualClock
from tests.maintenance.helpers import Crashing, ManualElector, Recorder, Returning, Steady


def _state(supervisor: Supervisor, name: str) -> ServiceState:
    return next(s.state for s in supervisor.status() if s.name == name)


async def _until(predicate, rounds: int = 1000) -> None:
    """Let the event loop run until `predicate()` holds; no time passes on any clock."""
    for _ in range(rounds):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


def test_backoff_doubles_up_to_the_cap():
    policy = BackoffPolicy(base_sec=1, cap_sec=10)
    assert [policy.delay(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    assert policy.delay(10_000) == 10


async def test_a_crashing_service_is_restarted_with_capped_exponential_backoff():
    clock = ManualClock()
    service = Crashing(clock)
    supervisor = Supervisor([service], backoff=BackoffPolicy(base_sec=1, cap_sec=4, reset_after_sec=100),
                            clock=clock)
    restarts_before = metrics.SERVICE_RESTARTS.labels("crashing")._value.get()
    await supervisor.start()
    delays = []
    for expected_runs in range(1, 6):
        [deadline] = await clock.parked(1)
        assert service.runs == expected_runs
        delays.append(deadline - clock.monotonic())
        status = supervisor.status()[0]
        assert status.state is ServiceState.BACKOFF
        assert status.last_error == f"ValueError: boom {expected_runs}"
        assert status.last_error_at == clock.wall()
        assert metrics.SERVICE_UP.labels("crashing")._value.get() == 0
        clock.advance(deadline - clock.monotonic())
        await _until(lambda n=expected_runs: service.runs > n)
    assert delays == [1, 2, 4, 4, 4]
    assert supervisor.status()[0].restarts == 5
    assert metrics.SERVICE_RESTARTS.labels("crashing")._value.get() - restarts_before == 5
    await supervisor.stop()
    assert supervisor.status()[0].state is ServiceState.STOPPED


async def test_a_run_that_lasted_reset_after_starts_the_backoff_again():
    clock = ManualClock()
    service = Crashing(clock, healthy_for=30)
    supervisor = Supervisor([service], backoff=BackoffPolicy(base_sec=1, cap_sec=60, reset_after_sec=30),
                            clock=clock)
    await supervisor.start()
    for _ in range(3):
        [healthy_until] = await clock.parked(1)  # the service's own 30 s of healthy work
        assert supervisor.status()[0].state is ServiceState.RUNNING
        clock.advance(healthy_until - clock.monotonic())
        [restart_at] = await clock.parked(1)
        assert restart_at - clock.monotonic() == 1  # never 2, 4: each crash followed a healthy run
        clock.advance(1)
    await supervisor.stop()


async def test_stop_during_backoff_ends_without_another_run():
    clock = ManualClock()
    service = Crashing(clock)
    supervisor = Supervisor([service], clock=clock)
    await supervisor.start()
    await clock.parked(1)
    await supervisor.stop()
    assert service.runs == 1
    assert supervisor.status()[0].state is ServiceState.STOPPED
    assert clock.deadlines() == []


async def test_max_restarts_reached_leaves_the_service_crashed():
    clock = ManualClock()
    service = Crashing(clock)
    supervisor = Supervisor([service], backoff=BackoffPolicy(base_sec=1, max_restarts=2), clock=clock)
    await supervisor.start()
    for _ in range(2):
        [deadline] = await clock.parked(1)
        clock.advance(deadline - clock.monotonic())
    await _until(lambda: supervisor.status()[0].state is ServiceState.CRASHED)
    assert service.runs == 3 and supervisor.status()[0].restarts == 2
    await supervisor.stop()
    assert supervisor.status()[0].state is ServiceState.CRASHED  # stopping does not hide it


async def test_a_run_that_returns_by_itself_counts_as_a_crash():
    clock = ManualClock()
    supervisor = Supervisor([Returning(ServiceSettings())], clock=clock)
    await supervisor.start()
    await clock.parked(1)
    status = supervisor.status()[0]
    assert status.state is ServiceState.BACKOFF
    assert "returned without being asked to stop" in (status.last_error or "")
    await supervisor.stop()


async def test_services_start_in_order_and_stop_in_reverse():
    recorder = Recorder()
    services = [Steady(name, recorder) for name in ("a", "b", "c")]
    supervisor = Supervisor(services)
    await supervisor.start()
    await _until(lambda: len(recorder.events) == 3)
    assert recorder.events == ["start a", "start b", "start c"]
    assert [s.state for s in supervisor.status()] == [ServiceState.RUNNING] * 3
    assert metrics.SERVICE_UP.labels("b")._value.get() == 1
    await supervisor.stop()
    assert recorder.events[3:] == ["stop c", "stop b", "stop a"]
    assert [s.state for s in supervisor.status()] == [ServiceState.STOPPED] * 3
    assert metrics.SERVICE_UP.labels("b")._value.get() == 0


async def test_leader_only_services_follow_leadership():
    recorder = Recorder()
    elector = ManualElector()
    everywhere = Steady("everywhere", recorder)
    leader_a, leader_b = Steady("lead_a", recorder, scope=Scope.LEADER), Steady("lead_b", recorder, scope=Scope.LEADER)
    supervisor = Supervisor([everywhere, leader_a, leader_b], elector=elector)
    assert supervisor.services[0] is elector  # the elector starts first and stops last
    await supervisor.start()
    await _until(lambda: recorder.events == ["start everywhere"])
    assert supervisor.leading is False
    assert _state(supervisor, "lead_a") is ServiceState.STANDBY

    await elector.lead(True)
    await _until(lambda: leader_a.running and leader_b.running and len(recorder.events) == 3)
    assert supervisor.leading is True
    assert _state(supervisor, "lead_b") is ServiceState.RUNNING

    await elector.lead(False)  # returns only once the leader duties have stopped
    assert not leader_a.running and not leader_b.running
    assert recorder.events[3:] == ["stop lead_b", "stop lead_a"]
    assert _state(supervisor, "lead_a") is ServiceState.STANDBY
    assert _state(supervisor, "everywhere") is ServiceState.RUNNING

    await elector.lead(True)
    await _until(lambda: leader_a.runs == 2)
    await supervisor.stop()
    assert recorder.events[-3:] == ["stop lead_b", "stop lead_a", "stop everywhere"]


def test_names_must_be_unique_and_leader_services_need_an_elector():
    recorder = Recorder()
    with pytest.raises(ValueError, match="unique"):
        Supervisor([Steady("x", recorder), Steady("x", recorder)])
    with pytest.raises(ValueError, match="LeaderElector"):
        Supervisor([Steady("x", recorder, scope=Scope.LEADER)])
