"""Masking of sensitive values before anything is logged."""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
SENSITIVE_KEY = re.compile(
    r"pass(word|wd)?|secret|token|authorization|api[_-]?key|private[_-]?key|credential|cookie|session",
    re.IGNORECASE,
)
_DSN_PASSWORD = re.compile(r"(\w+://[^:/@\s]+:)([^@\s]+)(@)")
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+")


def mask(value: Any, _depth: int = 0) -> Any:
    """Copy of `value` with sensitive keys' values replaced, at any depth."""
    if _depth > 20:
        return value
    if isinstance(value, dict):
        return {
            k: (MASK if isinstance(k, str) and SENSITIVE_KEY.search(k) else mask(v, _depth + 1))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [mask(v, _depth + 1) for v in value]
    if isinstance(value, str):
        return mask_text(value)
    return value


def mask_text(text: str) -> str:
    """Hide passwords in DSNs and bearer tokens inside free text."""
    if "://" in text:
        text = _DSN_PASSWORD.sub(rf"\g<1>{MASK}\g<3>", text)
    if "earer" in text:
        text = _BEARER.sub(rf"\g<1>{MASK}", text)
    return text
