"""The operator's filter is one block of SQL in three statements (the search page, the count, the
bulk operation batch): "the jobs the search showed" and "the jobs the bulk requeue touched" must be
the same set, so the three blocks must stay the same text."""

from __future__ import annotations

from dataloader.storage.queries import sql

STATEMENTS = ("search/jobs", "search/count", "operations/batch_ids")


def block(name: str) -> str:
    text = sql(name)
    return text[text.index("-- filter:begin"):text.index("-- filter:end")]


def test_the_filter_block_is_the_same_in_every_statement():
    blocks = {name: block(name) for name in STATEMENTS}
    assert len(set(blocks.values())) == 1, "the -- filter:begin/end blocks differ"
    assert "$12" in blocks["search/jobs"] and "$13" not in blocks["search/jobs"]
