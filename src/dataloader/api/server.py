"""`dataloader serve`: uvicorn with the app, the workers and the reaper in one process."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from dataloader.api import create_app
from dataloader.config import Settings
from dataloader.exceptions import DataloaderError, exit_code
from dataloader.logger.uvicorn_logging_config import uvicorn_log_config

log = logging.getLogger("dataloader")


def _ignore(signum: int, frame: FrameType | None) -> None:
    pass


def head_timeout_protocol(base: type[asyncio.Protocol], timeout_sec: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol `base` (httptools or h11) that closes a connection whose request head
    (request line and headers) has not fully arrived within `timeout_sec`: uvicorn bounds an idle
    keep-alive connection, but one that sends a few bytes of a head and then nothing (or a byte a
    minute) would hold its socket forever. The clock starts with the connection, or with the
    first byte after the previous answer, and is not reset by later bytes."""

    class HeadTimeoutProtocol(base):  # type: ignore[valid-type, misc]
        _head_timer: asyncio.TimerHandle | None = None
        _head_of: object = None  # the request cycle that was current when the clock started

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            self._start_head_clock()

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            if (cycle is None or cycle.response_complete) and (self._head_timer is None or self._head_of is not cycle):
                self._start_head_clock()
            super().data_received(data)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().connection_lost(exc)

        def _start_head_clock(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_of = self.cycle
            self._head_timer = self.loop.call_later(timeout_sec, self._head_expired)

        def _head_expired(self) -> None:
            self._head_timer = None
            # A new cycle means the head arrived (its request is being served, or was).
            if self.cycle is self._head_of and not self.transport.is_closing():
                log.info("closing a connection whose request head did not arrive in time",
                         extra={"timeout_sec": timeout_sec})
                self.transport.close()

    HeadTimeoutProtocol.__name__ = HeadTimeoutProtocol.__qualname__ = f"HeadTimeout{base.__name__}"
    return HeadTimeoutProtocol


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


class _Server(uvicorn.Server):
    """uvicorn's server, which says where it listens once it does also on a socket it was handed
    (uvicorn leaves that line to whoever bound the socket)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and sockets:
            host, port = sockets[0].getsockname()[:2]
            shown = f"[{host}]" if ":" in host else host
            logging.getLogger("uvicorn.error").info("Uvicorn running on http://%s:%d (Press CTRL+C to quit)",
                                                    shown, port)


def run_server(settings: Settings, *, sock: socket.socket) -> int:
    """Serve on `sock` (bound by the caller, before anything starts: a taken port is found before
    the database is) until SIGTERM/SIGINT; returns the process exit code (0 after a clean
    shutdown)."""
    app = _StartupFailure(create_app(settings))
    host, port = sock.getsockname()[:2]
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
        # Request heads: at most 16 KiB (h11's limit, stated) and DL_API_HEADER_TIMEOUT_SEC to arrive;
        # an idle keep-alive connection is closed after 5 s. Bodies: ApiGuardMiddleware.
        http=head_timeout_protocol(AutoHTTPProtocol, settings.api_header_timeout_sec),
        h11_max_incomplete_event_size=16 * 1024,
        timeout_keep_alive=5,
    )
    server = _Server(config)
    # uvicorn re-raises the signal it caught once it has shut down, so that the default action
    # kills the process; with these no-op handlers in place the re-raise is harmless and a
    # graceful SIGTERM ends with exit code 0.
    previous = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run(sockets=[sock])
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
