"""HTTP middleware (pure ASGI, so context variables set here reach the route and its log lines).

`RequestContextMiddleware` (outermost): request id (X-Request-ID in, or a new one; echoed back),
one access log line and the HTTP metrics per request, the face the audit trail names (console under
/ui, http elsewhere), and the last-resort handler that turns an
unexpected exception into a logged 500 JSON body.

`ApiGuardMiddleware` (every request: the API, the console at /ui, the probes): the raw body size
limit, before the body is read or parsed; the body's time limit; and the cancel of a request whose
client went away, counted as 499. Under /api/ first who the request is (api/access.py `resolve`:
DL_API_TOKEN, an API token, or anonymous while no auth is configured; 401 otherwise), and the rest
of the request runs as that principal (`acting_as`); the console has its own sign-in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl, unquote

from starlette.datastructures import Headers
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dataloader import metrics
from dataloader.api.access import PRINCIPAL_KEY
from dataloader.api.v1.exceptions import ApiError, error_response
from dataloader.api.v1.models import ErrorCode
from dataloader.api.v1.utils import escape_segment, flat_routes, safe_text
from dataloader.auth_throttle import AuthThrottle
from dataloader.logger.context_vars import ClientState, client_var, request_id_var
from dataloader.logger.utils import mask
from dataloader.model.audit import Face, through
from dataloader.model.principal import Principal, acting_as
from dataloader.storage.db import is_connection_error

access_log = logging.getLogger("dataloader.access")
log = logging.getLogger("dataloader.api")

REQUEST_ID_HEADER = "X-Request-ID"
# nginx's code for "the client closed the connection before the answer": neither a success nor the
# server's failure, so it never counts among the 5xx an operator alerts on.
CLIENT_CLOSED_REQUEST = 499
# A caller's id is kept only if it is short and plain: it goes into every log line and the journal.
_GOOD_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:/+=@-]{1,128}$")


def request_id_from(headers: Headers) -> str:
    given = headers.get(REQUEST_ID_HEADER)
    if given and _GOOD_REQUEST_ID.match(given):
        return given
    return uuid.uuid4().hex


def route_template(scope: Scope) -> str:
    """The route template of a request, for the access log and the HTTP metrics.

    Routing sets scope["route"]; a request refused before routing (ApiGuardMiddleware's 401 and
    413) has none, so match it here against the app's routes as the router would have (a full
    match first, else a path that matched with another method). Unknown paths are `unmatched`,
    which keeps the label's values bounded."""
    path = getattr(scope.get("route"), "path", None)
    if path:
        return path
    partial: str | None = None
    for route in flat_routes(getattr(getattr(scope.get("app"), "router", None), "routes", ())):
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return getattr(route, "path", None) or "unmatched"
        if match is Match.PARTIAL and partial is None:
            partial = getattr(route, "path", None)
    return partial or "unmatched"


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_from(Headers(scope=scope))
        token = request_id_var.set(request_id)
        client = ClientState()
        client_token = client_var.set(client)
        started = time.perf_counter()
        status = 500
        response_started = False
        answered = False  # the answer began while the client was still there

        async def send_with_id(message: Message) -> None:
            nonlocal status, response_started, answered
            if message["type"] == "http.response.start":
                response_started = True
                answered = not client.gone
                status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((REQUEST_ID_HEADER.lower().encode(), request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        path = scope.get("path", "")
        # the audit trail's face (model/audit.py): the console under /ui, the HTTP API elsewhere
        face = Face.CONSOLE if path == "/ui" or path.startswith("/ui/") else Face.HTTP
        try:
            with through(face):
                await self.app(scope, receive, send_with_id)
        except Exception as exc:
            if client.gone:
                # What the cancel of a request left behind (a statement interrupted, its connection
                # closed): nobody is waiting for an answer, and nothing is wrong with the server.
                log.info("client disconnected; request ended with %s", type(exc).__name__)
            elif is_connection_error(exc):
                log.warning("database unavailable", extra={"error": safe_text(repr(exc))})
                response = error_response(ErrorCode.database_unavailable,
                                          "the database cannot be reached right now; retry later")
            else:
                log.exception("unhandled error while serving a request")
                response = error_response(ErrorCode.internal_error,
                                          f"internal error; quote request id {request_id} when reporting it")
            if not response_started and not client.gone:
                await response(scope, receive, send_with_id)
        finally:
            if client.gone and not answered:
                status = CLIENT_CLOSED_REQUEST
            elapsed = time.perf_counter() - started
            route_path = route_template(scope)
            method = scope.get("method", "")
            metrics.HTTP_REQUESTS.labels(method, route_path, str(status)).inc()
            metrics.HTTP_SECONDS.labels(method, route_path).observe(elapsed)
            self._log_access(scope, status, elapsed, route_path)
            client_var.reset(client_token)
            request_id_var.reset(token)

    @staticmethod
    def _log_access(scope: Scope, status: int, elapsed: float, route: str) -> None:
        level = logging.ERROR if status >= 500 else logging.INFO
        if not access_log.isEnabledFor(level):
            return
        path = scope.get("path", "")
        extra: dict[str, object] = {
            "method": scope.get("method"), "path": safe_text(path, 500), "route": route,
            "status": status, "duration_ms": round(elapsed * 1000, 2),
        }
        client = scope.get("client")
        if client:
            extra["client"] = client[0]
        query = scope.get("query_string", b"")
        if query:
            # Masked like any logged field: a token passed as ?token=... must not reach the log.
            extra["query"] = mask(dict(parse_qsl(query.decode("latin-1"))))
        access_log.log(level, "%s %s %s", scope.get("method"), safe_text(path, 500), status, extra=extra)



class ApiGuardMiddleware:
    """For every request (the API, the console, the probes): the body's size, checked before the
    body is read; the body itself, read here within `body_timeout_sec` (a body that never arrives,
    or trickles in, is a 408 instead of a connection held forever); and the request cancelled when
    its client goes away before the answer (so its query is cancelled too, instead of running on
    for nobody). Under `prefix` (/api/) who the request is first (`resolve`: method, path, the
    Authorization header and the client address -> the Principal, or an ApiError); None: no check
    (an app of a test). The console signs in its own way."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int,
                 resolve: Callable[[str, str, str | None, str | None], Awaitable[Principal]] | None = None,
                 body_timeout_sec: float = 30.0, prefix: str = "/api/", throttle: AuthThrottle | None = None) -> None:
        self.app = app
        self.resolve = resolve
        self.throttle = throttle  # wrong bearer tokens per client address (auth_throttle.py)
        self.max_body_bytes = max_body_bytes
        self.body_timeout_sec = body_timeout_sec
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        principal: Principal | None = None
        if self.resolve is not None and scope.get("path", "").startswith(self.prefix):
            principal = await self._principal(scope, headers.get("authorization"), receive, send)
            if principal is None:
                return
            scope[PRINCIPAL_KEY] = principal
        length = headers.get("content-length")
        # The server enforces Content-Length, so a declared size within bounds is a real bound; a
        # chunked body is counted as it arrives.
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            await self._too_large(scope, receive, send)
            return
        body = bytearray()
        try:
            async with asyncio.timeout(self.body_timeout_sec):
                more = True
                while more:
                    message = await receive()
                    if message["type"] != "http.request":
                        _client_left()
                        return
                    body += message.get("body", b"")
                    more = message.get("more_body", False)
                    if len(body) > self.max_body_bytes:
                        await self._too_large(scope, receive, send)
                        return
        except TimeoutError:
            await error_response(
                ErrorCode.request_timeout,
                f"the request body did not arrive within {self.body_timeout_sec:g} s (DL_API_BODY_TIMEOUT_SEC)",
                headers={"Connection": "close"})(scope, receive, send)
            return
        if principal is None:
            await self._serve(scope, bytes(body), receive, send)
            return
        # The request's task (started in _serve) copies the context: everything it does, down to the
        # transaction that writes an audit row, acts for this principal.
        with acting_as(principal):
            await self._serve(scope, bytes(body), receive, send)

    async def _principal(self, scope: Scope, authorization: str | None, receive: Receive,
                         send: Send) -> Principal | None:
        """The request's principal; otherwise None and the answer is sent: 401, 503 while the App
        is not open, or 429 with Retry-After once this client address sent too many wrong tokens
        (the token is not looked at then)."""
        assert self.resolve is not None
        client = scope.get("client")
        address = client[0] if client else None
        throttle = self.throttle
        wait = throttle.retry_after(address) if throttle is not None else None
        if wait is not None:
            await error_response(ErrorCode.too_many_failures,
                                 f"too many wrong tokens from this address; try again in {wait} s "
                                 "(DL_AUTH_MAX_FAILURES)", headers={"Retry-After": str(wait)})(scope, receive, send)
            return None
        try:
            principal = await self.resolve(scope.get("method", ""), scope.get("path", ""), authorization, address)
        except ApiError as exc:
            if throttle is not None and exc.code == ErrorCode.unauthorized:
                throttle.failed(address)
            await error_response(exc.code, str(exc), headers=exc.headers)(scope, receive, send)
            return None
        if throttle is not None and authorization:
            throttle.succeeded(address)
        return principal

    async def _serve(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
        """Run the app on the buffered body while watching the connection: the server's next
        message after the body is `http.disconnect`, which arrives when the client leaves (or once
        the answer is sent). A client that leaves first cancels the request, and with it any
        statement in flight (asyncpg sends PostgreSQL a cancel)."""
        async def disconnected() -> Message:
            # Only a disconnect counts: a server may also hand over an empty `http.request`.
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return message

        watch = asyncio.ensure_future(disconnected())
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await asyncio.shield(watch)

        serving = asyncio.ensure_future(self.app(scope, replay, send))
        try:
            await asyncio.wait({serving, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not serving.done():
                # The client left before the answer: nobody is waiting for the rest of this work.
                log.info("client disconnected; request cancelled",
                         extra={"path": safe_text(scope.get("path", ""), 500)})
                _client_left()
                serving.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await serving
                return
            await serving
        finally:
            if not serving.done():  # this task itself was cancelled (server shutdown)
                serving.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await serving
            if not watch.done():
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await watch

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(
            ErrorCode.request_too_large,
            f"request body is larger than {self.max_body_bytes} bytes (see DL_MAX_ARGS_BYTES)",
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)


def _client_left() -> None:
    state = client_var.get()
    if state is not None:
        state.gone = True


class OneSegmentPaths:
    """Routes `/api/v1/processes/...` on the raw path's segments, so a process id holding '/' (sent
    as `%2F`, as any client encodes a path parameter) stays one segment: `GET …/{ns}/a%2Fb` is the
    process `a/b`, `GET …/{ns}/a%2Ftrace` the process `a/trace`, and `GET …/{ns}/a/trace` the trace
    of `a`. Inside a segment a decoded '/' is kept as `%2F` and '%' as `%25` (api/v1/utils.py
    `escape_segment`); the processes router's path parameters decode them (`one_segment`). Only a
    path that has an encoded '/' or '%' is touched, and only when the raw path is the one the server
    decoded (no proxy rewrote one of them)."""

    PREFIX = "/api/v1/processes/"

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path")
            if raw and (b"%2" in raw) and self.PREFIX in scope["path"]:
                routed = one_segment_path(raw)
                if routed is not None and unquote(routed) == scope["path"]:
                    scope = {**scope, "path": routed}
        await self.app(scope, receive, send)


def one_segment_path(raw: bytes) -> str | None:
    """The raw path decoded segment by segment, each segment's '/' and '%' escaped; None when it
    needs nothing of the kind."""
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    if not re.search("%2[fF5]", text):
        return None
    return "/".join(escape_segment(unquote(segment)) for segment in text.split("/"))
