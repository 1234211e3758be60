"""`dataloader serve`: uvicorn with the app, the workers and the reaper in one process."""

from __future__ import annotations

import logging
import signal
import sys
from types import FrameType
from typing import Any

import uvicorn

from dataloader.api import create_app
from dataloader.config import Settings
from dataloader.exceptions import DataloaderError, exit_code
from dataloader.logger.uvicorn_logging_config import uvicorn_log_config

log = logging.getLogger("dataloader")


def _ignore(signum: int, frame: FrameType | None) -> None:
    pass


class _StartupFailure:
    """The ASGI app, with a start-up that fails on a dataloader error (a setting, the database
    unreachable) reported as one log line instead of the traceback Starlette hands uvicorn, and the
    error kept so `run_server` returns the CLI's exit code for it (docs/errors.md), not uvicorn's 3.
    Any other start-up failure is a bug and keeps its traceback."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.error: DataloaderError | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            return await self.app(scope, receive, send)

        async def send_one_line(message: Any) -> None:
            # Starlette sends startup.failed from inside its `except`, so the error is at hand.
            error = sys.exc_info()[1]
            if message["type"] == "lifespan.startup.failed" and isinstance(error, DataloaderError):
                self.error = error
                label = "configuration error" if error.code == "config_error" else error.code
                message = {**message, "message": f"start-up failed: {label}: {error}"}
            await send(message)

        await self.app(scope, receive, send_one_line)


def run_server(settings: Settings, *, host: str, port: int) -> int:
    """Serve until SIGTERM/SIGINT; returns the process exit code (0 after a clean shutdown)."""
    app = _StartupFailure(create_app(settings))
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="on",
        # Our middleware writes the one access line per request, through our formatter.
        access_log=False,
        log_config=uvicorn_log_config(settings.log_level, settings.log_format),
        # In-flight requests get this long to finish before the lifespan drains the workers. API
        # calls hold no long transactions, so a few seconds is plenty and keeps the whole stop
        # close to DL_SHUTDOWN_TIMEOUT_SEC (which the worker drain uses).
        timeout_graceful_shutdown=max(1, min(5, int(settings.shutdown_timeout_sec))),
        server_header=False,
    )
    server = uvicorn.Server(config)
    # uvicorn re-raises the signal it caught once it has shut down, so that the default action
    # kills the process; with these no-op handlers in place the re-raise is harmless and a
    # graceful SIGTERM ends with exit code 0.
    previous = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits this way when start-up or binding fails
        if app.error is not None:
            return exit_code(app.error)
        code = exc.code if isinstance(exc.code, int) else 1
        log.error("server did not start", extra={"exit_code": code})
        return code or 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if server.started else 1
