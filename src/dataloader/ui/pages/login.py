"""Sign in with DL_API_TOKEN (a session held by the database: ui/auth.py), and sign out (the session ends
on every node)."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from dataloader.ui import auth, notice, render
from dataloader.ui.actions import safe_local

NAV = None
TOPICS: dict = {}

# Who signed in and out, and the refused tries, for the operator (never the token itself).
log = logging.getLogger("dataloader.ui.auth")


def _next(request: Request, given: str | None) -> str:
    root = request.scope.get("root_path", "")
    return given if given and safe_local(given, root) else root + "/"


async def show(request: Request) -> Response:
    return render.page(request, "login.html", next=_next(request, request.query_params.get("next")), problem=None)


async def sign_in(request: Request) -> Response:
    form = await auth.checked_form(request)
    console = request.app.state.console
    token = console.settings.api_token
    target = _next(request, form.get("next"))
    if not token:
        return RedirectResponse(target, status_code=303)
    throttle = console.throttle
    address = auth.client_address(request)
    wait = throttle.retry_after(address)
    if wait is not None:
        log.warning("console sign-in refused: too many wrong tokens from this address",
                    extra={"client": address, "retry_after_sec": wait})
        refused = render.page(request, "login.html", status=429, next=target,
                              problem=f"Too many wrong tokens from this address; try again in {wait} s.")
        refused.headers["Retry-After"] = str(wait)
        return refused
    if not auth.token_matches(token, form.get("token", "")):
        throttle.failed(address)
        log.warning("console sign-in with a wrong token", extra={"client": address})
        return render.page(request, "login.html", status=401, next=target, problem="That is not the token.")
    throttle.succeeded(address)
    ttl = console.settings.ui_session_ttl
    secret = await auth.open_session(request, token, console.app().console_sessions, ttl)
    log.info("console signed in", extra={"client": address, "session_ttl_sec": ttl})
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(auth.SESSION_COOKIE, secret, **auth.cookie_options(request, max_age=ttl))  # type: ignore[arg-type]
    return notice.put(request, response, f"Signed in. The session ends at sign-out or after {_duration(ttl)}.")


def _duration(seconds: float) -> str:
    hours, rest = divmod(int(seconds), 3600)
    if hours and not rest:
        return f"{hours} h"
    return f"{hours} h {rest // 60} min" if hours else f"{max(1, rest // 60)} min"


async def sign_out(request: Request) -> Response:
    """Ends the session on the server (every node refuses its cookie from now on) and clears it."""
    await auth.checked_form(request)
    console = request.app.state.console
    if console.settings.api_token:
        await auth.close_session(request, console.app().console_sessions)
        log.info("console signed out", extra={"client": auth.client_address(request)})
    root = request.scope.get("root_path", "")
    response = RedirectResponse(root + "/login", status_code=303)
    response.delete_cookie(auth.SESSION_COOKIE, path=auth.COOKIE_PATH, httponly=True, samesite="strict",
                           secure=request.url.scheme == "https")
    if console.settings.api_token:
        notice.put(request, response, "Signed out: this session is ended on every node.")
    return response


routes = [Route("/login", show, methods=["GET"]), Route("/login", sign_in, methods=["POST"]),
          Route("/logout", sign_out, methods=["POST"])]
