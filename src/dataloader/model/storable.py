"""What JSON and text dataloader may store: one rule for job args, process and observer args,
schedule args, a filter's JSON, results and a chain's stages, in every face (HTTP, App/SyncApp, CLI).

PostgreSQL refuses some values Python's JSON parser accepts (NaN, lone UTF-16 surrogates, NUL
characters), and very deep nesting overflows the recursion of the serializers further down
(pydantic's, json.dumps'). A value past them would fail later, after a query ran, as a 500 instead
of an error naming the field, so each face asks this module before anything is written.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import BaseModel, field_validator

from dataloader.exceptions import ArgsTooLarge

MAX_JSON_DEPTH = 64
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")  # a NUL escape, not an escaped backslash + "u0000"


def nests_deeper_than(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether lists and dicts in `value` nest more than `limit` levels below it (iterative: a value
    nested far past the limit, or past Python's recursion limit, is answered without recursing)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list | tuple) else None
        if children is None:
            continue
        if depth >= limit and any(isinstance(c, dict | list | tuple) for c in children):
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def storable_text_problem(value: str) -> str | None:
    """Why PostgreSQL text would refuse `value`, or None."""
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must not contain unpaired UTF-16 surrogates"
    return None


def json_storage_problem(value: Any, _depth: int = 0) -> str | None:
    """Why PostgreSQL jsonb would refuse `value` (a JSON-like value), or None."""
    if _depth > MAX_JSON_DEPTH:
        return f"nests deeper than {MAX_JSON_DEPTH} levels"
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
    elif isinstance(value, list | tuple):
        for item in value:
            problem = json_storage_problem(item, _depth + 1)
            if problem:
                return problem
    return None


def json_text_problem(value: Any, text: str) -> str | None:
    """`json_storage_problem(value)`, given `text`, the value's JSON (json.dumps): the walk runs only
    when the text shows a sign of trouble, so the common args cost a few scans of their text."""
    suspect = (not text.isascii() or "\\u0000" in text or "\\ud" in text or "NaN" in text
               or "Infinity" in text or text.count("[") + text.count("{") > MAX_JSON_DEPTH)
    return json_storage_problem(value) if suspect else None


def args_problem(value: Any, text: str, max_bytes: int) -> str | None:
    """Why `value`, whose JSON is `text`, cannot be stored as a job's or a process's args (its face
    raises its own error with this text), or None; ArgsTooLarge past `max_bytes` (DL_MAX_ARGS_BYTES)."""
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise ArgsTooLarge(f"args are {size} bytes; the limit is {max_bytes}")
    problem = json_text_problem(value, text)
    return f"args: {problem}" if problem else None


def check_storable(value: Any) -> Any:
    """`value` itself, or ValueError saying why it cannot be stored: for pydantic validators."""
    problem = storable_text_problem(value) if isinstance(value, str) else json_storage_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def encode_json(value: Any, max_bytes: int) -> tuple[str | None, str | None]:
    """(JSON text to store, None) or (None, why it cannot be stored), for a value code produced (a
    result, a step's value, a stage's args). None stores NULL (SQL NULL, not JSON null): most
    pipelines return nothing, and that must cost nothing."""
    if value is None:
        return None, None
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return None, f"not JSON-serialisable ({type(exc).__name__}: {exc})"
    if nests_deeper_than(value, MAX_JSON_DEPTH - 1):
        return None, f"it nests deeper than {MAX_JSON_DEPTH} levels"
    try:
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None, "it contains unpaired UTF-16 surrogates"
    if size > max_bytes:
        return None, f"it is {size} bytes of JSON; the limit is {max_bytes} (DL_MAX_ARGS_BYTES)"
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        return None, "it contains NUL (\\u0000) characters, which PostgreSQL jsonb cannot store"
    return text, None


class StorableFields(BaseModel):
    """Mixed into a request body: every text field must be storable as PostgreSQL text and every
    object field as jsonb (no NUL, no unpaired surrogates, bounded nesting), checked at the edge
    so bad input is a 422 that writes nothing. One validator for every body that has such fields."""

    @field_validator("*", mode="after")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        return check_storable(value) if isinstance(value, str | dict) else value
