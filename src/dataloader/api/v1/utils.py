"""Helpers of the HTTP adapter: the checks that keep input storable.

PostgreSQL refuses some values Python's JSON parser accepts (NaN, lone UTF-16 surrogates, NUL
characters), and very deep nesting overflows the recursion of json.dumps further down. Refusing
them here turns what would be a 500 from the driver into a 422 that names the field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, field_validator
from starlette.routing import BaseRoute

from dataloader.model.json_depth import MAX_JSON_DEPTH

MAX_ARGS_DEPTH = MAX_JSON_DEPTH  # one rule in every face: model/json_depth.py
RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
)


def flat_routes(routes: Iterable[BaseRoute]) -> Iterator[BaseRoute]:
    """Every route of an app, with included routers opened up."""
    # Recent FastAPI keeps an included router as one entry (its routes under `original_router`);
    # older versions copy the routes into the app's list. Either way, yield the routes themselves.
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from flat_routes(inner.routes)
        else:
            yield route


# An id inside one path segment may hold '/' or '%' (a process id is any text). The server decodes
# the path before routing, so `a%2Fb` would become two segments; `OneSegmentPaths` (api/middleware.py)
# routes on the raw path instead, keeping a decoded '/' as `%2F` and a decoded '%' as `%25` inside
# its segment, and `one_segment` turns the parameter back into the text the client encoded.
_SEGMENT_ESCAPES = {"%25": "%", "%2F": "/"}
_SEGMENT_ESCAPED = re.compile("%25|%2F")


def escape_segment(text: str) -> str:
    return text.replace("%", "%25").replace("/", "%2F")


def one_segment(value: Any) -> Any:
    """A path parameter as the client encoded it (the reverse of `escape_segment`)."""
    if isinstance(value, str) and "%" in value:
        return _SEGMENT_ESCAPED.sub(lambda m: _SEGMENT_ESCAPES[m.group(0)], value)
    return value


def location(*segments: str) -> str:
    """A Location header's path from its segments, each percent-encoded (UTF-8): a header is
    Latin-1 on the wire, so an id like "zh-Ж" sent raw cannot be encoded and would fail the answer
    after the resource was created. Callers build it before they change anything."""
    # RFC 3986 pchar: what a path segment may hold as is (an observer "binance:BTC-USDT" keeps its colon).
    return "/" + "/".join(quote(segment, safe=":@!$&'()*+,;=") for segment in segments)


def check_rfc3339(value: Any) -> Any:
    """Accept only an RFC 3339 string with a timezone (no epoch numbers, no dates without time)."""
    if not isinstance(value, str) or not RFC3339.match(value):
        raise ValueError("must be an RFC 3339 time with a timezone, e.g. 2030-01-01T12:00:00Z")
    return value


def check_utc_representable(value: datetime) -> datetime:
    # 9999-12-31T23:00:00-05:00 parses but is past datetime.max in UTC; the driver would overflow.
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise ValueError("is out of range once converted to UTC") from None
    return value


def storable_text_problem(value: str) -> str | None:
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must not contain unpaired UTF-16 surrogates"
    return None


def json_storage_problem(value: Any, _depth: int = 0) -> str | None:
    """Why PostgreSQL jsonb would refuse `value` (a parsed JSON document), or None."""
    if _depth > MAX_ARGS_DEPTH:
        return f"nests deeper than {MAX_ARGS_DEPTH} levels"
    if isinstance(value, str):
        return storable_text_problem(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "must not contain NaN or Infinity"
    if isinstance(value, dict):
        for key, item in value.items():
            problem = (storable_text_problem(key) if isinstance(key, str) else None) or \
                json_storage_problem(item, _depth + 1)
            if problem:
                return problem
    elif isinstance(value, list):
        for item in value:
            problem = json_storage_problem(item, _depth + 1)
            if problem:
                return problem
    return None


def safe_text(value: object, limit: int = 300) -> str:
    """`value` as text that can always be put in a JSON response or a log line."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        text = text[:limit] + "…"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class StorableFields(BaseModel):
    """Mixed into a request body: every text field must be storable as PostgreSQL text and every
    object field as jsonb (no NUL, no unpaired surrogates, bounded nesting), checked at the edge
    so bad input is a 422 that writes nothing. One validator for every body that has such fields."""

    @field_validator("*", mode="after")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        if isinstance(value, str):
            problem = storable_text_problem(value)
        elif isinstance(value, dict):
            problem = json_storage_problem(value)
        else:
            return value
        if problem:
            raise ValueError(problem)
        return value
