"""bench/report.py's pair table: each ratio is run i of one system over run i of the other (they ran
back to back), the median and spread are those ratios', and a failed run drops its pair only."""

from bench.report import pair_ratios


def test_ratios_are_taken_pair_by_pair():
    results = {"measures": {"processing": {"metrics": {
        "processing.p1.active": {"dataloader": {"runs": [100.0, 300.0, None, 200.0]},
                                 "pgqueuer": {"runs": [100.0, 100.0, 100.0, 400.0]}},
    }}}}
    table = pair_ratios(results, "dataloader", "pgqueuer")
    row = next(line for line in table.splitlines() if "1 worker" in line)
    assert "1.00, 3.00, 0.50" in row and "1.00 (0.50–3.00)" in row and "> 1" in row


def test_nothing_to_pair_is_an_empty_table():
    assert pair_ratios({"measures": {}}, "dataloader", "pgqueuer") == ""
