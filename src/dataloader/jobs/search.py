"""Search: the operator's filter over every job, newest first with cursor paging and an
optional count. Rules only; the statements are `storage/search_repository.py`'s. "Top errors in
the last hour" is the stats error grouping (`App.stats_errors`, `retention/stats.py`), which reads
the hourly rollup instead of the jobs table."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from dataloader.exceptions import InvalidJobRequest, TooManyQueries, ValidationFailed
from dataloader.jobs.manager import MAX_LIST_LIMIT, decode_cursor, encode_cursor
from dataloader.model import payload_crypto
from dataloader.model.job import Job
from dataloader.model.job_filter import JobFilter
from dataloader.storage.search_repository import SearchRepository

# A count beyond this is reported as "at least" (count_capped): an exact count of millions of rows
# is a long read the operator rarely needs to answer "how bad is it?".
MAX_COUNT = 10_000_000


def check_at_most(at_most: int | None) -> None:
    """A capped count's cap is at least 1."""
    if at_most is not None and at_most < 1:
        raise ValidationFailed(f"at_most must be at least 1, not {at_most}",
                               [{"loc": ["at_most"], "msg": "must be at least 1", "type": "value_error"}])


class ExpensiveQueries:
    """At most `limit` expensive queries (searches, counts, an operation's dry run) at once in this
    process; one more is refused at once with TooManyQueries (a 429) rather than queued, so a burst
    of slow searches can neither hold every API connection nor pile up behind one another past their
    clients' patience. One event loop: a plain counter is enough."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.running = 0

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self.running >= self.limit:
            raise TooManyQueries(f"this node already runs {self.limit} searches or counts "
                                 "(DL_API_MAX_EXPENSIVE_QUERIES); retry in a moment")
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1


@asynccontextmanager
async def _no_limit() -> AsyncIterator[None]:
    yield


@dataclass(frozen=True)
class SearchPage:
    jobs: list[Job]
    next_cursor: str | None
    count: int | None = None  # how many match in all (asked for with count=True)
    count_capped: bool = False  # count is a lower bound: at least MAX_COUNT match
    filter: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"jobs": [j.to_dict() for j in self.jobs], "next_cursor": self.next_cursor,
                "count": self.count, "count_capped": self.count_capped, "filter": self.filter}


def parse_filter(value: JobFilter | Mapping[str, Any] | None) -> JobFilter:
    """A JobFilter from a mapping of its fields; any problem is one InvalidJobRequest (a 4xx)."""
    if isinstance(value, JobFilter):
        return value
    try:
        return JobFilter.model_validate(dict(value or {}))
    except ValidationError as exc:
        raise filter_error(exc) from None


def filter_error(exc: ValidationError) -> InvalidJobRequest:
    """A filter's first validation problem as one ValidationFailed (an InvalidJobRequest) naming the
    field: HTTP's validation_error for the same filter in a body."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])  # empty for a rule over several fields
    message = err["msg"].removeprefix("Value error, ")
    return ValidationFailed(f"filter {where}: {message}" if where else f"filter: {message}",
                            ValidationFailed.from_errors(exc.errors(), prefix=("filter",)).fields)


class JobSearch:
    def __init__(self, repo: SearchRepository, expensive: ExpensiveQueries | None = None) -> None:
        self.repo = repo
        self.expensive = expensive

    def expensive_slot(self) -> AbstractAsyncContextManager[None]:
        """Held around an expensive query (see ExpensiveQueries); no limit without one."""
        return self.expensive.slot() if self.expensive is not None else _no_limit()

    async def checked(self, value: JobFilter | Mapping[str, Any] | None) -> JobFilter:
        """The filter, validated, its jsonpath parsed by the database."""
        f = parse_filter(value)
        if f.args_path is not None:
            problem = await self.repo.check_jsonpath(f.args_path)
            if problem is not None:
                raise InvalidJobRequest(f"filter args_path is not a jsonpath: {problem}")
        encrypted_args_problem(f)
        return f

    async def search(self, value: JobFilter | Mapping[str, Any] | None = None, *, cursor: str | None = None,
                     limit: int = 100, count: bool = False) -> SearchPage:
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidJobRequest(f"limit must be between 1 and {MAX_LIST_LIMIT}")
        before = decode_cursor(cursor) if cursor else None
        f = await self.checked(value)
        total: int | None = None
        async with self.expensive_slot():
            jobs = [job.shown() for job in await self.repo.search(f, before=before, limit=limit + 1)]
            if count:
                total = await self.repo.count(f, at_most=MAX_COUNT)
        next_cursor = None
        if len(jobs) > limit:
            jobs = jobs[:limit]
            next_cursor = encode_cursor(jobs[-1].created_at, jobs[-1].id)
        return SearchPage(jobs, next_cursor, total, total is not None and total >= MAX_COUNT, f.describe())

    async def count(self, value: JobFilter | Mapping[str, Any] | None = None, *, at_most: int | None = None) -> int:
        """How many jobs match; with `at_most` (at least 1), counting stops there."""
        check_at_most(at_most)
        f = await self.checked(value)
        async with self.expensive_slot():
            return await self.repo.count(f, at_most=at_most)


_TOP_FIELD = re.compile(r'^\s*(?:strict\s+|lax\s+)?\$\s*\.\s*(?:"((?:[^"\\]|\\.)*)"|([A-Za-z_][A-Za-z0-9_]*))')


def encrypted_args_problem(f: JobFilter) -> None:
    """With args encrypted at rest, only the fields declared in clear (DL_ENCRYPTION_CLEAR_FIELDS,
    for every task the filter names) are in the stored args: a filter on any other would match
    nothing, silently. InvalidJobRequest names the field instead."""
    ring = payload_crypto.active()
    if ring is None or (f.args_contains is None and f.args_path is None):
        return
    tasks = f.tasks or [None]
    searchable = frozenset.intersection(*(ring.clear.for_task(t) for t in tasks))
    asked = set(f.args_contains or ())
    if f.args_path is not None:
        match = _TOP_FIELD.match(f.args_path)
        if match is None:
            raise InvalidJobRequest("filter args_path: with args encrypted at rest, a path must start at one "
                                    "declared clear field ($.field ...); searchable: "
                                    f"{', '.join(sorted(searchable)) or 'none'} (DL_ENCRYPTION_CLEAR_FIELDS)")
        asked.add(match.group(1) if match.group(1) is not None else match.group(2))
    hidden = sorted(asked - searchable)
    if hidden:
        raise InvalidJobRequest(
            f"filter: args field {', '.join(map(repr, hidden))} is encrypted at rest and cannot be searched; "
            f"searchable: {', '.join(sorted(searchable)) or 'none'} (declare fields in DL_ENCRYPTION_CLEAR_FIELDS)")
