"""The console's ASGI app, mounted by the HTTP app at /ui: the pages' routes, the sign-in guard (which
puts the request's `Principal` in force: `acting_as`, model/principal.py) and security headers, the
live endpoint (server-sent events from the shared poll), the static assets, and the error pages.

A page is one module in `pages/` (its routes, its navigation entry, its live topics) and one
template in `templates/`; `pages/__init__.py` lists them. docs/console.md "Adding a page"."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dataloader.auth_throttle import AuthThrottle
from dataloader.config import Settings
from dataloader.exceptions import DatabaseUnavailable, DataloaderError, Forbidden
from dataloader.logger.context_vars import client_gone
from dataloader.model.principal import Action, Principal, PrincipalKind, acting_as, current_principal
from dataloader.storage.db import is_connection_error
from dataloader.ui import auth, render
from dataloader.ui.live import LiveHub, sse_event
from dataloader.ui.pages import PAGES
from dataloader.ui.sso import Oidc
from dataloader.ui.topic import Topic

if TYPE_CHECKING:
    from dataloader.app import App

log = logging.getLogger("dataloader.ui")

STATIC = Path(__file__).parent / "static"
MOUNT = "/ui"
MAX_TOPICS = 8
KEEP_ALIVE_SEC = 15.0
# An open live stream asks again whether its session is alive this often: a stream opened before a
# sign-out (in another tab, or with a copied cookie) ends within this, not when its browser leaves.
SESSION_RECHECK_SEC = 15.0
# Paths a browser may open before signing in.
OPEN_PATHS = ("/login", "/static/")

SECURITY_HEADERS = [
    # No inline script runs, whatever a job's args hold: scripts come from /ui/static only.
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                 b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]


@dataclass
class Console:
    settings: Settings
    get_app: Callable[[], App | None]
    nav: list[tuple[str, str]] = field(default_factory=list)
    topics: dict[str, Topic] = field(default_factory=dict)
    hub: LiveHub | None = None
    root: str = MOUNT
    # Wrong tokens at the login page, per client address (shared with the API's bearer check).
    throttle: AuthThrottle | None = None
    # Single sign-on's provider (DL_OIDC_ISSUER), checked when the console is built.
    oidc: Oidc | None = None

    def app(self) -> App:
        app = self.get_app()
        if app is None:  # only while the service starts or stops
            raise DatabaseUnavailable("the service is starting or stopping")
        return app

    async def render_topic(self, keyed: str) -> str | None:
        """A topic as `live_key` named it: rendered for the actions named in its key."""
        app = self.get_app()
        if app is None:
            return None
        topic, _, level = keyed.rpartition(LEVEL_SEPARATOR)
        name, _, arg = topic.partition(":")
        actions = frozenset(Action(a) for a in level.split(",") if a)
        return await self.topics[name].render(app, arg, self.root, render.can_for(actions))


# A live fragment shows the forms of the actions its viewer may take: the shared poll renders each
# topic once per distinct set of actions watching it (at most one per role), never per browser.
LEVEL_SEPARATOR = "|"


def live_key(topic: str, actions: frozenset[Action]) -> str:
    return topic + LEVEL_SEPARATOR + ",".join(sorted(actions))


def status_of(error: DataloaderError) -> int:
    code = error.code
    if code.endswith("not_found"):
        return 404
    if code in ("validation_error", "invalid_request", "config_error"):
        return 422
    if code == "database_unavailable":
        return 503
    if code == "forbidden":
        return 403
    if code == "too_many_queries":
        return 429
    if code == "forbidden":  # the access model's refusal (dataloader.Forbidden), as the API answers it
        return 403
    return 409


def error_page(request: Request, title: str, message: str, status: int) -> Response:
    return render.page(request, "error.html", status=status, title=title, message=message)


async def dataloader_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DataloaderError)
    return error_page(request, exc.code, str(exc), status_of(exc))


async def forbidden(request: Request, exc: Exception) -> Response:
    return error_page(request, "forbidden", str(exc), 403)


async def live(request: Request) -> Response:
    """GET /ui/live?topic=overview&topic=job:<id>: server-sent events, one per changed fragment."""
    console: Console = request.app.state.console
    topics = request.query_params.getlist("topic")
    if not 1 <= len(topics) <= MAX_TOPICS:
        return PlainTextResponse(f"ask for 1 to {MAX_TOPICS} topics", status_code=400)
    for topic in topics:
        name, _, arg = topic.partition(":")
        spec = console.topics.get(name)
        if spec is None or not spec.accepts(arg):
            return PlainTextResponse("unknown topic", status_code=400)
    hub = console.hub
    assert hub is not None
    actions = current_principal().actions
    keyed = frozenset(live_key(topic, actions) for topic in topics)
    loop = asyncio.get_running_loop()

    async def stream() -> Any:
        checked_at = loop.time()
        async with hub.subscribe(keyed) as queue:
            yield ": connected\n\n"
            while True:
                try:
                    topic, html = await asyncio.wait_for(queue.get(), min(KEEP_ALIVE_SEC, SESSION_RECHECK_SEC))
                except TimeoutError:
                    topic = html = None
                if loop.time() - checked_at >= SESSION_RECHECK_SEC:
                    checked_at = loop.time()
                    if not await _session_still_alive(request, console, actions):
                        return  # the browser reconnects, and gets the fragments of its role now
                if topic is None:
                    yield ": keep-alive\n\n"
                    continue
                yield sse_event(topic.rpartition(LEVEL_SEPARATOR)[0], html)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


async def _session_still_alive(request: Request, console: Console, actions: frozenset[Action]) -> bool:
    """For an open live stream: is its session still alive, with the role it had (a demotion ends
    the stream too)? A database away is no sign-out: the stream goes on (and asks again at the
    next recheck)."""
    try:
        principal = await auth.authenticate(request, console.settings, console.app().users.sessions)
        return principal is not None and principal.actions == actions
    except Exception as exc:
        if isinstance(exc, DatabaseUnavailable) or is_connection_error(exc):
            return True
        raise


class ConsoleGuard:
    """Signed-in check (a browser that is not goes to the login page), security headers on every
    answer, and an HTML page instead of the API's JSON when the database is away."""

    def __init__(self, app: ASGIApp, console: Console) -> None:
        self.app = app
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        root = scope.get("root_path", "")
        path = scope["path"][len(root):] if scope["path"].startswith(root) else scope["path"]
        request = Request(scope, receive)
        principal: Principal | None = None
        try:
            if not path.startswith(OPEN_PATHS):
                principal = await auth.authenticate(request, self.console.settings, self.console.app().users.sessions)
            allowed = principal is not None or path.startswith(OPEN_PATHS)
        except Exception as exc:  # the session's look-up: the database is away (or the App not ready)
            if not (isinstance(exc, DatabaseUnavailable) or is_connection_error(exc)):
                raise
            log.warning("database unavailable", extra={"error": repr(exc)[:300]})
            page = error_page(request, "database_unavailable",
                              "the database cannot be reached right now; this page retries when you reload it", 503)
            await page(scope, receive, self._with_headers(send))
            return
        if not allowed:
            if scope.get("method") in ("GET", "HEAD") and path != "/live":
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                response: Response = Response(status_code=303, headers={
                    "Location": f"{root}/login?{_next_query(target)}"})
            else:
                response = PlainTextResponse("sign in first", status_code=401)
            await response(scope, receive, self._with_headers(send))
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await self._with_headers(send)(message)

        try:
            # Everything the request does acts for its principal (the audit trail reads it); the
            # login page's, before anybody signed in, for nobody in particular.
            with acting_as(principal or Principal(PrincipalKind.ANONYMOUS, "signing-in",
                                                  address=auth.client_address(request))):
                await self.app(scope, receive, tracked)
        except Exception as exc:
            if started or not is_connection_error(exc):
                raise
            if client_gone():  # the browser left and the cancel closed the statement's connection
                log.info("client disconnected; its statement was interrupted", extra={"error": repr(exc)[:300]})
                return
            log.warning("database unavailable", extra={"error": repr(exc)[:300]})
            page = error_page(request, "database_unavailable",
                              "the database cannot be reached right now; this page retries when you reload it", 503)
            await page(scope, receive, tracked)
        finally:
            # The access log and HTTP metrics label a request by its route's template: the console's
            # routes are relative to the mount, so name them with it (/ui/jobs/{job_id:uuid}).
            route = scope.get("route")
            template = getattr(route, "path", None)
            if isinstance(template, str) and not template.startswith(root + "/"):
                scope["route"] = SimpleNamespace(path=root + template)

    @staticmethod
    def _with_headers(send: Send) -> Send:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = Headers(raw=message.get("headers", []))
                extra = [h for h in SECURITY_HEADERS if h[0].decode() not in headers]
                if "cache-control" not in headers:
                    # Pages show live state and a CSRF token: never cached. Assets change only with the package.
                    kind = headers.get("content-type", "")
                    static = message.get("status") == 200 and ("javascript" in kind or "text/css" in kind
                                                               or "image/" in kind)
                    extra.append((b"cache-control", b"max-age=300" if static else b"no-store"))
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)
        return sending


def _next_query(target: str) -> str:
    return urlencode({"next": target})


def console_app(settings: Settings, get_app: Callable[[], App | None],
                throttle: AuthThrottle | None = None) -> ASGIApp:
    """The console for the HTTP app to mount at /ui; `get_app` gives the App requests use (None
    while the service starts or stops); `throttle` counts wrong tokens (the API's, to share it)."""
    console = Console(settings=settings, get_app=get_app, throttle=throttle or AuthThrottle(
        settings.auth_max_failures, settings.auth_failure_window_sec), oidc=Oidc.of(settings))
    routes: list[Any] = [Route("/live", live, methods=["GET"]),
                         Mount("/static", app=StaticFiles(directory=STATIC), name="static")]
    for module in PAGES:
        routes.extend(module.routes)
        if getattr(module, "NAV", None):
            console.nav.append(module.NAV)
        console.topics.update(getattr(module, "TOPICS", {}))
    console.hub = LiveHub(console.render_topic, settings.ui_live_poll_sec)
    app = Starlette(routes=routes, exception_handlers={DataloaderError: dataloader_error, auth.Forbidden: forbidden,
                                                      Forbidden: forbidden},
                    middleware=[Middleware(ConsoleGuard, console=console)])
    app.state.console = console
    return app
