"""The pure decisions of observers (observers/policy.py), without a database: the machine-derived
capacity, the restart backoff, the crash streak and the retry budget, and the self-fencing
deadline that keeps "never two copies" (with the settings check that refuses a dead bound too short
for it)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dataloader.observers import policy
from dataloader.observers.node_registry import NodeSettings

GiB = 1024**3


@pytest.mark.parametrize(("cpus", "memory", "expected"), [
    (2, 24 * GiB, 50),  # cores bound it
    (64, 4 * GiB, 64),  # memory bounds it (64 MiB per observer)
    (1, 32 * 1024**2, 1),  # never below one
])
def test_machine_capacity(cpus, memory, expected):
    assert policy.machine_capacity(cpus, memory) == expected


def test_machine_capacity_reads_this_machine():
    assert policy.machine_capacity() >= 1


@pytest.mark.parametrize(("failures", "delay"), [(0, 0.0), (1, 1.0), (2, 2.0), (3, 4.0), (6, 32.0), (7, 60.0),
                                                 (10_000, 60.0)])
def test_restart_delay_doubles_and_is_capped(failures, delay):
    assert policy.restart_delay(failures, 1.0, 60.0) == delay


def test_a_long_healthy_run_ends_the_crash_streak():
    assert policy.failures_after_crash(5, ran_sec=10, healthy_after_sec=300) == 6
    assert policy.failures_after_crash(5, ran_sec=300, healthy_after_sec=300) == 1


@pytest.mark.parametrize(("failures", "max_restarts", "gives_up"), [
    (1, None, False), (10**6, None, False), (1, 0, True), (3, 3, False), (4, 3, True)])
def test_retry_budget(failures, max_restarts, gives_up):
    assert policy.gives_up(failures, max_restarts) is gives_up


def test_fencing_stops_observers_a_heartbeat_before_anyone_may_take_them():
    settings = NodeSettings(heartbeat_sec=2, dead_after_sec=15, stop_grace_sec=3, capacity=1)
    assert settings.fence_after == 10
    # fence + forced stop + one heartbeat of margin == the dead bound
    assert settings.fence_after + settings.stop_grace_sec + settings.heartbeat_sec == settings.dead_after_sec


def test_a_dead_bound_too_short_to_fence_is_refused():
    with pytest.raises(ValidationError, match="DL_NODE_DEAD_AFTER_SEC"):
        NodeSettings(heartbeat_sec=2, dead_after_sec=6, stop_grace_sec=3, capacity=1)
