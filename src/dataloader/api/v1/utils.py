"""Helpers of the HTTP adapter: routes, path segments, Location headers, RFC 3339 times, safe
text for answers. What a body may store is the model's rule (`dataloader.model.storable`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from starlette.routing import BaseRoute

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


def safe_text(value: object, limit: int = 300) -> str:
    """`value` as text that can always be put in a JSON response or a log line."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        text = text[:limit] + "…"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
