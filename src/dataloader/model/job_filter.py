"""The operator's job filter: which jobs a search lists, a count counts and a bulk operation acts
on. One value for every face (Python, HTTP, CLI) and every use, so "the jobs I saw in the
search" and "the jobs the bulk requeue touched" are the same set by construction.

Every field narrows the set; an empty filter matches every job. `error` is a case-insensitive
pattern over the whole error text where `*` is any run of characters and `?` one character
("*ConnectionResetError*", "ImportError: *"). `args_contains` is a JSON object the job's args must
contain (jsonb `@>`); `args_path` a jsonpath that must find something in them (jsonb `@?`, e.g.
`$.customer ? (@ == "acme")`). A leaf module: every layer may use it.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from pydantic import AwareDatetime, Field, field_validator, model_validator

from dataloader.base import StrictModel
from dataloader.model.clock import refuse_number_as_time
from dataloader.model.job import JobStatus
from dataloader.model.storable import MAX_JSON_DEPTH, nests_deeper_than

_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
_LATEST = datetime(9999, 1, 1, tzinfo=UTC)


# A glob is matched by ILIKE, whose cost grows with the number of `*` runs it must try against each
# text; a regex (jsonpath like_regex) with a quantified group that holds a quantifier can take
# exponential time in the text's length. Either would let one search hold a database core for
# minutes over a large table, so both are bounded before any query runs.
MAX_GLOB_STARS = 10
MAX_REGEX_REPEAT = 100
_WILDCARD_RUN = re.compile(r"[*?]+")
_QUANTIFIER = re.compile(r"[*+?]|\{(\d*)(,(\d*))?\}")


def normal_glob(pattern: str) -> str:
    """The pattern with every run of wildcards that holds a `*` written as its `?`s then one `*`
    (`*?*?` is "at least two characters", `??*`): the same matches, with one `*` to try per run."""
    def run(match: re.Match[str]) -> str:
        text = match.group(0)
        return "?" * text.count("?") + "*" if "*" in text else text
    return _WILDCARD_RUN.sub(run, pattern)


def check_glob(pattern: str) -> str:
    """A glob whose cost is bounded: at most MAX_GLOB_STARS runs of `*` (after normal_glob)."""
    if normal_glob(pattern).count("*") > MAX_GLOB_STARS:
        raise ValueError(f"at most {MAX_GLOB_STARS} * in a pattern (runs of wildcards count once)")
    return pattern


def glob_to_ilike(pattern: str) -> str:
    """An operator's pattern as ILIKE's: * and ? become % and _, and their own % _ \\ match
    themselves (runs of wildcards made one `*` first: normal_glob)."""
    pattern = normal_glob(pattern)
    escaped = pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%").replace("?", "_")


def check_regex(pattern: str) -> str:
    """Refuse a regex that can take exponential time: a quantified group that holds a quantifier
    (`(a+)+`, `(.*a){25}`, `(([a-z])+.)+`), back-references, and counts above MAX_REGEX_REPEAT.
    A linear scan: escapes are skipped, bracket expressions are one atom."""
    # Each open group: whether a quantifier occurs inside it (at any depth).
    groups: list[bool] = []
    last_group_quantified = False  # the atom just closed was a group with a quantifier inside
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            if i + 1 < len(pattern) and pattern[i + 1].isdigit():
                raise ValueError("back-references (\\1) are not allowed in a filter's regex")
            i += 2
            last_group_quantified = False
            continue
        if ch == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1:i + 2] in ("]", "^") else i + 1)
            if pattern[i + 1:i + 3] == "^]":
                end = pattern.find("]", i + 3)
            i = len(pattern) if end < 0 else end + 1
            last_group_quantified = False
            continue
        if ch == "(":
            groups.append(False)
            i += 1
            continue
        if ch == ")":
            inner = groups.pop() if groups else False
            last_group_quantified = inner
            if inner and groups:
                groups[-1] = True
            i += 1
            continue
        match = _QUANTIFIER.match(pattern, i)
        if match is not None and (ch != "{" or match.group(1) or match.group(3)):
            for bound in (match.group(1), match.group(3)):
                if bound and int(bound) > MAX_REGEX_REPEAT:
                    raise ValueError(f"a count in a filter's regex must be at most {MAX_REGEX_REPEAT}")
            if last_group_quantified:
                raise ValueError("a regex with a repeated group that repeats inside ((a+)+, (.*a){25}) can "
                                 "take exponential time; write it without the nested repetition")
            if groups:
                groups[-1] = True
            i = match.end()
            # A lazy or possessive mark belongs to the quantifier.
            if i < len(pattern) and pattern[i] in "?+":
                i += 1
            last_group_quantified = False
            continue
        last_group_quantified = False
        i += 1
    return pattern


def _jsonpath_strings(path: str) -> list[tuple[int, str]]:
    """The double-quoted string literals of a jsonpath, as (start offset, decoded text)."""
    found: list[tuple[int, str]] = []
    i = 0
    while i < len(path):
        if path[i] != '"':
            i += 1
            continue
        start, i, text = i, i + 1, []
        while i < len(path) and path[i] != '"':
            if path[i] == "\\" and i + 1 < len(path):
                text.append(path[i + 1])
                i += 2
            else:
                text.append(path[i])
                i += 1
        found.append((start, "".join(text)))
        i += 1
    return found


def check_jsonpath(path: str) -> str:
    """What PostgreSQL's jsonpath parser accepts but a search cannot run: a variable (`$name`,
    `$"name"`: a filter passes none, so it fails every row with an error), and a like_regex
    that check_regex refuses. (The syntax itself is PostgreSQL's to check: JobSearch.checked.)"""
    outside = list(path)
    for start, text in _jsonpath_strings(path):
        end = start + 1
        while end < len(path) and path[end] != '"':
            end += 2 if path[end] == "\\" else 1
        for k in range(start + 1, min(end, len(path))):
            outside[k] = " "
        if path[:start].rstrip().endswith("like_regex"):
            try:
                check_regex(text)
            except ValueError as exc:
                raise ValueError(f"like_regex: {exc}") from None
    bare = "".join(outside)
    variable = re.search(r'\$(?=["\w])', bare)
    if variable is not None:
        name = re.match(r'\$(?:"[^"]*"?|\w+)', path[variable.start():])
        raise ValueError(f"uses a variable ({name.group(0)[:40] if name else '$'}); "
                         "a filter's jsonpath can use none: write the value itself")
    return path


def storable_time(value: datetime | None) -> datetime | None:
    """A filter's time bound as the database can compare it (1970 to 9999), or ValueError."""
    if value is None:
        return None
    try:
        in_range = _EARLIEST <= value.astimezone(UTC) <= _LATEST
    except OverflowError:  # 9999-12-31T23:00:00-05:00 is past datetime.max in UTC
        in_range = False
    if not in_range:
        raise ValueError("must be between 1970-01-01 and 9999-01-01")
    return value


class JobFilter(StrictModel):
    queues: list[str] | None = Field(default=None, max_length=100, description="Any of these queues")
    tasks: list[str] | None = Field(default=None, max_length=100, description="Any of these tasks")
    statuses: list[JobStatus] | None = Field(default=None, max_length=6, description="Any of these statuses")
    error: str | None = Field(default=None, min_length=1, max_length=1000,
                              description="Error text pattern, case-insensitive: * any text, ? one character")
    created_from: AwareDatetime | None = Field(default=None, description="created_at >= this")
    created_to: AwareDatetime | None = Field(default=None, description="created_at < this")
    finished_from: AwareDatetime | None = Field(default=None, description="finished_at >= this")
    finished_to: AwareDatetime | None = Field(default=None, description="finished_at < this")
    args_contains: dict[str, Any] | None = Field(default=None, description="JSON object the args contain (@>)")
    args_path: str | None = Field(default=None, min_length=1, max_length=1000,
                                  description="jsonpath that must match in the args (@?)")
    lock_key_prefix: str | None = Field(default=None, min_length=1, max_length=512)
    # Strict, as dry_run is: 1 or "false" is a mistake to point out, not a guess to make.
    held: bool | None = Field(default=None, strict=True, description="Only held jobs (true), only not held (false)")

    @field_validator("queues", "tasks")
    @classmethod
    def _names(cls, values: list[str] | None) -> list[str] | None:
        if values is None:
            return None
        if not values:
            raise ValueError("must name at least one (leave it out to match any)")
        for value in values:
            if not value or len(value) > 200 or "\x00" in value:
                raise ValueError("each must be 1-200 characters without NUL")
        return sorted(set(values))

    @field_validator("statuses")
    @classmethod
    def _statuses(cls, values: list[JobStatus] | None) -> list[JobStatus] | None:
        if values is not None and not values:
            raise ValueError("must name at least one (leave it out to match any)")
        return None if values is None else sorted(set(values))

    @field_validator("error", "args_path", "lock_key_prefix")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise ValueError("must not contain NUL characters")
        return value

    @field_validator("error")
    @classmethod
    def _glob(cls, value: str | None) -> str | None:
        return None if value is None else check_glob(value)

    @field_validator("args_path")
    @classmethod
    def _jsonpath(cls, value: str | None) -> str | None:
        return None if value is None else check_jsonpath(value)

    @field_validator("args_contains")
    @classmethod
    def _args(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        if nests_deeper_than(value, MAX_JSON_DEPTH):  # the rule of job args, before anything reads it
            raise ValueError(f"nests deeper than {MAX_JSON_DEPTH} levels")
        try:
            encoded = json.dumps(value, allow_nan=False)
        except (ValueError, TypeError, RecursionError):
            raise ValueError("must be a JSON object without NaN or Infinity") from None
        if "\\u0000" in encoded or len(encoded) > 64 * 1024:
            raise ValueError("must be at most 64 KiB of JSON without NUL characters")
        return value

    @field_validator("created_from", "created_to", "finished_from", "finished_to", mode="before")
    @classmethod
    def _no_number(cls, value: object) -> object:
        return refuse_number_as_time(value)

    @field_validator("created_from", "created_to", "finished_from", "finished_to")
    @classmethod
    def _storable_time(cls, value: datetime | None) -> datetime | None:
        return storable_time(value)

    @model_validator(mode="after")
    def _ranges(self) -> JobFilter:
        for name, low, high in (("created", self.created_from, self.created_to),
                                ("finished", self.finished_from, self.finished_to)):
            if low is not None and high is not None and low >= high:
                raise ValueError(f"{name}_from must be before {name}_to")
        return self

    def error_like(self) -> str | None:
        """`error` as an ILIKE pattern: the user's * and ? become % and _, and their own % _ \\
        match themselves."""
        return None if self.error is None else glob_to_ilike(self.error)

    def describe(self) -> dict[str, Any]:
        """The filter as JSON (stored with a bulk operation; shown back to the operator)."""
        return self.model_dump(mode="json", exclude_none=True)

    @property
    def times(self) -> tuple[datetime | None, datetime | None, datetime | None, datetime | None]:
        return self.created_from, self.created_to, self.finished_from, self.finished_to
