"""Field names of a structured log line (the contract of the JSON format)."""

from __future__ import annotations

# Attributes every LogRecord has; anything else passed via `extra=` is a field of the line.
STANDARD_RECORD_ATTRS = frozenset(
    {
        "name", "msg", "args", "levelname", "levelno", "pathname", "filename", "module", "exc_info",
        "exc_text", "stack_info", "lineno", "funcName", "created", "msecs", "relativeCreated",
        "thread", "threadName", "processName", "process", "message", "asctime", "taskName",
        "color_message",
    }
)
LINE_FIELDS = ("ts", "level", "logger", "message")
