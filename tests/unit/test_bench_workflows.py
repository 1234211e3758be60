"""bench/workflows.py's pure parts: the recovery check (a step recorded before the kill that the second
worker ran again is a violation; a step cut off by the kill is not), the table of N systems with a
ratio dataloader / peer per run, and the refusal of a system it does not know."""

import pytest
from bench.workflows import main, merge, recovery_check, table


def test_a_recorded_step_run_by_the_second_worker_is_counted():
    rows = [("r1", 0, 10), ("r1", 1, 10), ("r1", 1, 20), ("r1", 2, 20), ("r2", 0, 10), ("r2", 0, 20)]
    recorded = {("r1", 0), ("r2", 0)}  # r2's step 0 was recorded, yet worker 20 ran it again
    check = recovery_check(rows, recorded, first_pid=10)
    assert check == {"recovery.recorded_rerun": 1, "recovery.steps_run_twice": 2, "recovery.executions": 6}


def test_a_clean_recovery_has_no_rerun():
    rows = [("r1", 0, 10), ("r1", 1, 10), ("r1", 1, 20), ("r1", 2, 20)]
    assert recovery_check(rows, {("r1", 0)}, first_pid=10)["recovery.recorded_rerun"] == 0


def _results(runs: dict[str, list[dict[str, float | None]]]) -> dict:
    return {"runs": runs}


def test_the_table_has_a_column_per_system_and_a_ratio_per_peer_paired_by_run():
    text = table(_results({
        "dataloader": [{"three.per_sec": 600.0}, {"three.per_sec": 700.0}],
        "dbos": [{"three.per_sec": 100.0}, {"three.per_sec": 70.0}],
        "absurd": [{"three.per_sec": 200.0}, {"three.per_sec": 350.0}],
    }))
    head, rule, row = text.splitlines()
    assert head == ("| measure | unit | dataloader | dbos | absurd | ratio dl/dbos, per run (median) "
                    "| ratio dl/absurd, per run (median) |")
    assert rule == "|" + "---|" * 7
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:] == ["650 (600–700)", "85 (70–100)", "275 (200–350)",
                         "6.00, 10.00 (8.00)", "3.00, 2.00 (2.50)"]


def test_a_run_a_system_failed_is_left_out_of_its_ratio_and_rows_nobody_measured_are_dropped():
    text = table(_results({
        "dataloader": [{"fanout.db_sec": 1.0}, {"fanout.db_sec": 2.0}],
        "absurd": [{}, {"fanout.db_sec": 8.0}],
    }))
    rows = text.splitlines()[2:]
    assert len(rows) == 1  # only the fan-out row had a value
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[2:] == ["1.50 (1.00–2.00)", "8.00", "0.25 (0.25)"]


def test_a_system_the_bench_does_not_know_is_refused_before_anything_runs(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--systems", "dataloader,temporal"])
    assert exit_.value.code == 2
    assert "unknown system(s) ['temporal']" in capsys.readouterr().err


def _file(version: str, runs: dict) -> dict:
    return {"postgres": {"kind": "embedded", "server_version": version}, "runs": runs}


def test_merged_files_keep_the_runs_paired_when_a_system_is_missing_from_one():
    merged = merge([
        _file("18.4", {"dataloader": [{"x": 1}, {"x": 2}], "absurd": [{"x": 10}, {"x": 20}]}),
        _file("18.4", {"dataloader": [{"x": 3}], "dbos": [{"x": 30}]}),
    ])
    assert merged["runs"] == {
        "dataloader": [{"x": 1}, {"x": 2}, {"x": 3}],
        "absurd": [{"x": 10}, {"x": 20}, {}],
        "dbos": [{}, {}, {"x": 30}],
    }


def test_files_of_two_servers_are_not_merged():
    with pytest.raises(ValueError, match="different servers"):
        merge([_file("18.4", {"dataloader": [{}]}), _file("15.20", {"dataloader": [{}]})])
