"""Every SQL statement of the engine lives in a file here, loaded by name.

"Where is the claim query?" → `claim_jobs.sql`. A concern with several statements of its own gets a
folder, named with a slash: `sql("maintenance/leader_try_lock")` → `maintenance/leader_try_lock.sql`.
A line `-- @include <name>` is replaced by that file's text: a part two statements must share.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

# Lower-case words joined by `_`, in at most one folder: no `..`, no absolute paths.
_NAME = re.compile(r"[a-z0-9_]+(/[a-z0-9_]+)?")
_INCLUDE = re.compile(r"^-- @include ([a-z0-9_]+(?:/[a-z0-9_]+)?)$", re.MULTILINE)


@cache
def sql(name: str) -> str:
    """Text of `queries/<name>.sql`."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"not a query name: {name!r}")
    text = resources.files(__package__).joinpath(*f"{name}.sql".split("/")).read_text(encoding="utf-8")
    return _INCLUDE.sub(lambda m: sql(m.group(1)), text)
