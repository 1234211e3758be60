"""bench/workflows.py's recovery check: a step recorded before the kill that the second worker ran
again is a violation; a step cut off by the kill (run twice, never recorded before it) is not."""

from bench.workflows import recovery_check


def test_a_recorded_step_run_by_the_second_worker_is_counted():
    rows = [("r1", 0, 10), ("r1", 1, 10), ("r1", 1, 20), ("r1", 2, 20), ("r2", 0, 10), ("r2", 0, 20)]
    recorded = {("r1", 0), ("r2", 0)}  # r2's step 0 was recorded, yet worker 20 ran it again
    check = recovery_check(rows, recorded, first_pid=10)
    assert check == {"recovery.recorded_rerun": 1, "recovery.steps_run_twice": 2, "recovery.executions": 6}


def test_a_clean_recovery_has_no_rerun():
    rows = [("r1", 0, 10), ("r1", 1, 10), ("r1", 1, 20), ("r1", 2, 20)]
    assert recovery_check(rows, {("r1", 0)}, first_pid=10)["recovery.recorded_rerun"] == 0
