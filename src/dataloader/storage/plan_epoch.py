"""Plans made for the size dl_jobs has now: a queue worker's statements are prepared anew when the
table has grown past what their cached plans were made for.

PostgreSQL caches a prepared statement's generic plan from its sixth run on, built from the table's
size at that moment. A plan built while dl_jobs was (nearly) empty treats every access path as free
and may walk a whole index per job once a burst arrives. The claim reports the table's
size in pages (`table_pages`, a relation-size call per claim); when it has grown more than
`GROWTH` times since the plans were made, the epoch moves on and every statement of the queue
worker is sent with a new text (a trailing comment), so asyncpg prepares it again: five custom
plans and then a generic one, all made at the table's present size. Old statements leave asyncpg's
cache by its LRU and lifetime (storage/db.py STATEMENT_LIFETIME_SEC).

One epoch per process: the size is the table's, whichever connection saw it.
"""

from __future__ import annotations

from functools import lru_cache

# Re-plan when the table has grown this many times (a plan made for n rows is still sound at a few
# times n; what breaks is a plan made for an empty table serving a backlog). Below FLOOR_PAGES
# (~a few thousand rows) a table counts as FLOOR_PAGES, so a table that grows from 0 to 10 pages
# is not re-planned at every step.
GROWTH = 4
FLOOR_PAGES = 64

# Until a claim has seen the table, plans count as made for an empty one: the first sight of a
# big table re-plans once.
_epoch = 0
_planned_pages = 0


def observe_table_pages(pages: int) -> bool:
    """Record dl_jobs' size as a claim saw it; True when the plans are to be made anew."""
    global _epoch, _planned_pages
    if pages > GROWTH * max(_planned_pages, FLOOR_PAGES):
        _epoch += 1
        _planned_pages = pages
        return True
    if pages < _planned_pages:
        # A smaller table needs no new plan (a plan for a big table reaches rows through indexes,
        # which stays right when it shrinks); growth is measured from here on.
        _planned_pages = pages
    return False


def current_epoch() -> int:
    return _epoch


def in_epoch(text: str) -> str:
    """The statement's text for the present epoch (the same text in epoch 0)."""
    return _tagged(text, _epoch)


@lru_cache(maxsize=256)
def _tagged(text: str, epoch: int) -> str:
    return text if epoch == 0 else f"{text}\n-- plan epoch {epoch}"


def reset() -> None:
    """Forget the observed size (tests)."""
    global _epoch, _planned_pages
    _epoch, _planned_pages = 0, 0
