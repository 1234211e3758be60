"""The jobs filter as it lives in a console URL (shareable: every field is a query parameter) and
its translation into the `JobFilter` mapping every face validates the same way.

Times: an RFC 3339 time (a time without a zone is UTC) or an age back from now ("15m", "2h",
"7d"), so "failed in the last hour" is a link that stays true. `args_contains` is a JSON object."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import ImmutableMultiDict, QueryParams

from dataloader.exceptions import ValidationFailed

# Query parameter -> JobFilter field. Lists may repeat the parameter.
LISTS = {"queue": "queues", "task": "tasks", "status": "statuses"}
TEXTS = {"error": "error", "args_path": "args_path", "lock_key_prefix": "lock_key_prefix"}
TIMES = ("created_from", "created_to", "finished_from", "finished_to")
FIELDS = (*LISTS, *TEXTS, *TIMES, "args_contains", "held")
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d)\s*$")
_UNIT = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def _problem(name: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"{name}: {message}", [{"loc": [name], "msg": message, "type": "value_error"}])


def parse_time(name: str, text: str, now: datetime) -> datetime:
    age = _AGE.match(text)
    if age:
        seconds = float(age.group(1)) * _UNIT[age.group(2)]
        if seconds > 3650 * 86400:
            raise _problem(name, "an age of at most 10 years")
        return now - timedelta(seconds=seconds)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise _problem(name, f"{text[:60]!r} is neither a time (2026-01-31T12:00Z) nor an age (15m, 2h, 7d)") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def form_values(query: QueryParams | ImmutableMultiDict[str, str]) -> dict[str, Any]:
    """What the search form shows back: lists as lists, the rest as the text typed."""
    values: dict[str, Any] = {name: [v for v in query.getlist(name) if v] for name in LISTS}
    for name in (*TEXTS, *TIMES, "args_contains", "held"):
        values[name] = query.get(name, "")
    return values


def job_filter(values: dict[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """The JobFilter mapping of the form's values (the App validates it; this only translates)."""
    now = now or datetime.now(UTC)
    out: dict[str, Any] = {}
    for param, field in LISTS.items():
        if values.get(param):
            out[field] = list(values[param])
    for param, field in TEXTS.items():
        if values.get(param):
            out[field] = values[param]
    for name in TIMES:
        if values.get(name):
            out[name] = parse_time(name, values[name], now)
    if values.get("args_contains"):
        try:
            out["args_contains"] = json.loads(values["args_contains"])
        except ValueError:
            raise _problem("args_contains", "must be a JSON object, like {\"customer\": 42}") from None
    if values.get("held") in ("yes", "no"):
        out["held"] = values["held"] == "yes"
    return out


def query_string(values: dict[str, Any], **extra: str) -> str:
    """The URL query of these form values (for links: next page, bulk actions, top errors)."""
    pairs: list[tuple[str, str]] = []
    for name in FIELDS:
        value = values.get(name)
        if isinstance(value, list):
            pairs.extend((name, v) for v in value)
        elif value:
            pairs.append((name, value))
    pairs.extend((k, v) for k, v in extra.items() if v)
    return urlencode(pairs)
