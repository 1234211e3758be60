"""How deep a JSON value given to dataloader may nest: one rule for job args (every face) and for
the JSON inside a filter (`args_contains`), checked before anything else reads the value.

Deeper values are refused rather than stored because the layers below each have their own, lower
limits (pydantic's serializer, json.dumps' recursion): a value past them would fail later, after a
query ran, as a 500 instead of a 422 naming the field."""

from __future__ import annotations

from typing import Any

MAX_JSON_DEPTH = 64


def nests_deeper_than(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether lists and dicts in `value` nest more than `limit` levels below it (iterative: a value
    nested far past the limit, or past Python's recursion limit, is answered without recursing)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth >= limit and any(isinstance(c, (dict, list)) for c in children):
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
