"""The ids and idempotency keys of the jobs a run derives from its history: a gather's children
(and any other child-like job started at a position: one job per (position, index)).

Derived, not random, so a start cut off and repeated by the next attempt inserts nothing twice.
Derived from the run's restart *generation* too: a restart that cuts a position gives the replay
new ids there, so the replay starts new jobs that join anew instead of finding the old ones (which
the restart cancels, and whose ends the join no longer counts: migration 0037). Generation 0 keeps
the form runs had before restarts existed, so runs in flight across that upgrade keep their ids.

Anything that starts a job a run joins must take its id and key from here and record the run's
generation with it (`dl_workflow_runs.parent_generation`, which insert_runs.sql sets): that is all
the join and a restart need to tell the generations apart.
"""

from __future__ import annotations

import uuid


def _position(generation: int, seq: int, index: int) -> str:
    return f"{seq}:{index}" if generation == 0 else f"g{generation}:{seq}:{index}"


def derived_job_id(run_id: uuid.UUID, generation: int, seq: int, index: int) -> uuid.UUID:
    """The id of the job run `run_id` starts at history position `seq` (the `index`-th there) in
    its generation `generation`: the same on every replay of that generation."""
    return uuid.uuid5(run_id, _position(generation, seq, index))


def derived_key(run_id: uuid.UUID, generation: int, seq: int, index: int) -> str:
    """That job's idempotency key (`workflow:<run>:<seq>:<index>`, with `g<generation>:` after a restart)."""
    return f"workflow:{run_id}:{_position(generation, seq, index)}"
