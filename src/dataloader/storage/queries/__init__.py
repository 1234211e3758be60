"""Every SQL statement of the engine lives in a file here, loaded by name.

"Where is the claim query?" → `claim_jobs.sql`.
"""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def sql(name: str) -> str:
    """Text of `queries/<name>.sql`."""
    return resources.files(__package__).joinpath(f"{name}.sql").read_text(encoding="utf-8")
