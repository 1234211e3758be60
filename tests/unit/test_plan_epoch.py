"""When the queue worker's statements are prepared anew (storage/plan_epoch.py): a pure decision."""

from __future__ import annotations

import pytest

from dataloader.storage import plan_epoch


@pytest.fixture(autouse=True)
def fresh_epoch():
    plan_epoch.reset()
    yield
    plan_epoch.reset()


def test_plans_are_made_anew_once_the_table_outgrows_four_times_their_size():
    assert not plan_epoch.observe_table_pages(plan_epoch.FLOOR_PAGES * plan_epoch.GROWTH)
    assert plan_epoch.current_epoch() == 0
    assert plan_epoch.observe_table_pages(plan_epoch.FLOOR_PAGES * plan_epoch.GROWTH + 1)
    assert plan_epoch.current_epoch() == 1
    grown = plan_epoch.FLOOR_PAGES * plan_epoch.GROWTH + 1
    assert not plan_epoch.observe_table_pages(grown * plan_epoch.GROWTH)
    assert plan_epoch.observe_table_pages(grown * plan_epoch.GROWTH + 1)
    assert plan_epoch.current_epoch() == 2


def test_a_shrinking_table_keeps_its_plans_and_growth_counts_from_the_smaller_size():
    assert plan_epoch.observe_table_pages(10_000)
    assert not plan_epoch.observe_table_pages(500)
    assert plan_epoch.current_epoch() == 1
    assert plan_epoch.observe_table_pages(2_001)
    assert plan_epoch.current_epoch() == 2


def test_the_statement_text_changes_with_the_epoch_only():
    text = "SELECT 1"
    assert plan_epoch.in_epoch(text) == text
    plan_epoch.observe_table_pages(100_000)
    tagged = plan_epoch.in_epoch(text)
    assert tagged != text and tagged.startswith(text) and tagged == plan_epoch.in_epoch(text)
