"""Every statement fits asyncpg's statement cache. A statement longer than the connections'
`max_cacheable_statement_size` is not prepared once and reused: it is parsed and planned again on
every call. The one-statement step crossed asyncpg's default 15 KiB when comments were added to the
parts it includes, and PostgreSQL's CPU per job in the drain doubled with nothing failing."""

from __future__ import annotations

from importlib import resources

from dataloader.storage.db import MAX_CACHEABLE_STATEMENT_BYTES
from dataloader.storage.queries import sql
from dataloader.storage.queue_connection import claim_sql, fair_claim_sql, step_claim_sql

LARGEST_CLAIM = 64  # workers/queue_worker.py MAX_CLAIM_BATCH


def every_statement() -> dict[str, str]:
    root = resources.files("dataloader.storage.queries")
    names = [p.name.removesuffix(".sql") for p in root.iterdir() if p.name.endswith(".sql")]
    names += [f"{d.name}/{p.name.removesuffix('.sql')}" for d in root.iterdir() if d.is_dir()
              for p in d.iterdir() if p.name.endswith(".sql")]
    texts = {name: sql(name) for name in names}
    texts |= {f"{f.__name__}({LARGEST_CLAIM})": f(LARGEST_CLAIM) for f in (claim_sql, fair_claim_sql, step_claim_sql)}
    return texts


def test_every_statement_fits_the_statement_cache_with_room_to_grow() -> None:
    # Half the cap: a statement that grows past it is a signal to split it, well before it stops
    # being cached.
    sizes = {name: len(text.encode()) for name, text in every_statement().items()}
    assert len(sizes) > 50
    too_big = {name: size for name, size in sizes.items() if size > MAX_CACHEABLE_STATEMENT_BYTES // 2}
    assert not too_big, too_big
