"""bench/drain_floor.py's diagnostics cut one part each out of step_succeeded_claim.sql by pattern:
a change of the statement that moves a part must fail here, not leave a diagnostic that cuts
nothing (or cuts something else) and reports our own statement under another name."""

import re

import pytest
from bench import drain_floor
from bench.drain_floor import CUTS, cut_statement

from dataloader.storage.queue_connection import step_claim_sql


@pytest.mark.parametrize("cut", list(CUTS))
def test_each_cut_removes_its_part_and_only_that(cut):
    pattern, replacement = CUTS[cut]
    cut_text = cut_statement(16, cut)
    part = re.search(pattern, step_claim_sql(16), flags=re.S)
    assert part is not None
    assert part.group(0) not in cut_text and replacement in cut_text
    # every other part is still there to be cut
    assert all(re.search(p, cut_text, flags=re.S) for name, (p, _) in CUTS.items() if name != cut)


def test_a_cut_whose_part_is_gone_is_refused(monkeypatch):
    monkeypatch.setitem(drain_floor.CUTS, "a part the statement lacks", ("no such text", "x"))
    with pytest.raises(AssertionError, match=r"no longer in step_succeeded_claim\.sql"):
        cut_statement(16, "a part the statement lacks")
