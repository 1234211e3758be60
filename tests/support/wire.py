"""A proxy between a client under test and PostgreSQL that counts statements and can cut the link
silently. Every statement the client sends is seen on the wire, so a test can count them exactly
(sampling pg_stat_activity misses statements between samples; pg_stat_database counters lag behind
idle backends; pg_stat_statements needs a preloaded library). Works the same on the embedded server
(Unix socket) and an external one (TCP).

The proxy listens on 127.0.0.1; a client connects to `proxy.dsn` instead of the real DSN. It refuses
SSL/GSS encryption itself (answers 'N', as a server without SSL does; libpq and asyncpg then go on
in clear text), forwards the startup message and every byte both ways, and parses the frontend
stream: each message is a type byte and a length. A statement is a simple Query ('Q') or an Execute
('E') of the extended protocol; both are recorded with the time they passed.

`partition()` is a silent partition: nothing is forwarded either way any more and no connection is
closed, so statements hang (no error, as when packets are dropped) and new connections hang in their
start-up; `heal()` lets everything that waited through, late, as a healed network does.
`hold_replies()` delays only the server's answers (statements still reach the server and commit;
their replies wait), and `cut_then_deliver()` then silences the client's side and lets the held
replies through: a reply that came late, after which the link went dead.
"""

from __future__ import annotations

import asyncio
import struct
import time
from contextlib import suppress
from urllib.parse import parse_qs, urlsplit, urlunsplit

SSL_REQUEST, GSSENC_REQUEST = 80877103, 80877104
STATEMENTS = (b"Q", b"E")


class CountingProxy:
    def __init__(self, dsn: str, port: int) -> None:
        """`dsn`: the real server; `port`: the server's port (names its Unix socket)."""
        self.target = dsn
        self.server_port = port
        self.statements: list[tuple[float, str]] = []  # (time.monotonic(), message type)
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._flowing = asyncio.Event()
        self._requests = asyncio.Event()  # the client's side only
        self._replies = asyncio.Event()  # the server's side only
        for event in (self._flowing, self._requests, self._replies):
            event.set()

    def partition(self) -> None:
        self._flowing.clear()

    def heal(self) -> None:
        for event in (self._flowing, self._requests, self._replies):
            event.set()

    def hold_replies(self) -> None:
        self._replies.clear()

    def cut_then_deliver(self) -> None:
        """Stop forwarding the client's messages, then deliver the replies held so far."""
        self._requests.clear()
        self._replies.set()

    @property
    def dsn(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        parts = urlsplit(self.target)
        user = parts.username or "postgres"
        auth = f"{user}:{parts.password}@" if parts.password else f"{user}@"
        return urlunsplit((parts.scheme, f"{auth}127.0.0.1:{port}", parts.path, "", ""))

    def count_since(self, since: float) -> int:
        return sum(1 for at, _ in self.statements if at >= since)

    async def __aenter__(self) -> CountingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with suppress(BaseException):
                await task

    async def _upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        parts = urlsplit(self.target)
        host = parse_qs(parts.query).get("host", [parts.hostname or "127.0.0.1"])[0]
        if host.startswith("/"):
            return await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{self.server_port}")
        return await asyncio.open_connection(host, parts.port or 5432)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(client_w)
        server_w: asyncio.StreamWriter | None = None
        try:
            while True:  # the startup phase: untyped messages (length, code, ...)
                head = await client_r.readexactly(8)
                length, code = struct.unpack("!ii", head)
                rest = await client_r.readexactly(length - 8)
                if code in (SSL_REQUEST, GSSENC_REQUEST):
                    client_w.write(b"N")
                    await client_w.drain()
                    continue
                break
            await self._flowing.wait()
            server_r, server_w = await self._upstream()
            self._writers.add(server_w)
            server_w.write(head + rest)
            await server_w.drain()
            back = asyncio.create_task(self._pipe(server_r, client_w, (self._flowing, self._replies)))
            self._tasks.add(back)
            try:
                while True:
                    kind = await client_r.readexactly(1)
                    (length,) = struct.unpack("!i", await client_r.readexactly(4))
                    body = await client_r.readexactly(length - 4)
                    await self._flowing.wait()
                    await self._requests.wait()
                    if kind in STATEMENTS:
                        self.statements.append((time.monotonic(), kind.decode()))
                    server_w.write(kind + struct.pack("!i", length) + body)
                    await server_w.drain()
            finally:
                back.cancel()
                self._tasks.discard(back)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for writer in (client_w, server_w):
                if writer is not None:
                    writer.close()
                    self._writers.discard(writer)
            self._tasks.discard(task)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    flowing: tuple[asyncio.Event, ...]) -> None:
        with suppress(ConnectionError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                for event in flowing:
                    await event.wait()
                writer.write(data)
                await writer.drain()
        writer.close()
