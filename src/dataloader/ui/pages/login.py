"""Sign in with a user's name and password, or with DL_API_TOKEN (a session held by the database:
ui/auth.py), and sign out (the session ends on every node).

Wrong passwords and wrong tokens count alike against the client's address (auth_throttle.py);
the answer to a wrong password does not say whether the name exists. Neither the password nor the
token is ever logged; the user's name is (who signed in, who failed)."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from dataloader.model.user import User
from dataloader.ui import auth, notice, render
from dataloader.ui.actions import safe_local

NAV = None
TOPICS: dict = {}

# Who signed in and out, and the refused tries, for the operator (never a password or the token).
log = logging.getLogger("dataloader.ui.auth")


def _next(request: Request, given: str | None) -> str:
    root = request.scope.get("root_path", "")
    return given if given and safe_local(given, root) else root + "/"


async def _page(request: Request, *, status: int = 200, next: str, problem: str | None) -> Response:
    console = request.app.state.console
    sessions = console.app().users.sessions
    users_exist = (await sessions.check(None, None)).users_exist
    return render.page(request, "login.html", status=status, next=next, problem=problem, users_exist=users_exist,
                       token_set=bool(console.settings.api_token), sso=console.oidc is not None)


async def show(request: Request) -> Response:
    return await _page(request, next=_next(request, request.query_params.get("next")), problem=None)


async def sign_in(request: Request) -> Response:
    form = await auth.checked_form(request)
    console = request.app.state.console
    app = console.app()
    token = console.settings.api_token
    target = _next(request, form.get("next"))
    by_token = "token" in form
    if by_token and not token:
        return await _page(request, status=401, next=target, problem="This service has no API token.")
    throttle = console.throttle
    address = auth.client_address(request)
    wait = throttle.retry_after(address)
    if wait is not None:
        log.warning("console sign-in refused: too many failures from this address",
                    extra={"client": address, "retry_after_sec": wait})
        refused = await _page(request, status=429, next=target,
                              problem=f"Too many failed sign-ins from this address; try again in {wait} s.")
        refused.headers["Retry-After"] = str(wait)
        return refused
    user = None
    if by_token:
        if not auth.token_matches(token, form.get("token", "")):
            throttle.failed(address)
            log.warning("console sign-in with a wrong token", extra={"client": address})
            return await _page(request, status=401, next=target, problem="That is not the token.")
    else:
        name = form.get("user", "").strip()
        user = await app.users.authenticate(name, form.get("password", ""))
        if user is None:
            throttle.failed(address)
            log.warning("console sign-in refused: wrong name or password, or a disabled user",
                        extra={"client": address, "user": name[:64]})
            return await _page(request, status=401, next=target, problem="Wrong user name or password.")
    return await signed_in_response(request, user, target, token=token if by_token else None,
                                    how="password" if user else "token")


async def signed_in_response(request: Request, user: User | None, target: str, *, token: str | None = None,
                             how: str) -> Response:
    """A new session of `user` (or of the token) for this browser, and the redirect to `target`
    that sets its cookie and says so (a password, a token and a single sign-on end alike)."""
    console = request.app.state.console
    address = auth.client_address(request)
    console.throttle.succeeded(address)
    ttl = console.settings.ui_session_ttl
    secret = await auth.open_session(request, console.app().users.sessions, ttl, token=token,
                                     user=user.name if user else None)
    log.info("console signed in", extra={"client": address, "session_ttl_sec": ttl, "by": how,
                                         "user": user.name if user else "DL_API_TOKEN"})
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(auth.SESSION_COOKIE, secret, **auth.cookie_options(request, max_age=ttl))  # type: ignore[arg-type]
    who = f"as {user.name} ({user.role.value})" if user else "with the API token (admin)"
    return notice.put(request, response, f"Signed in {who}. The session ends at sign-out or after {_duration(ttl)}.")


def _duration(seconds: float) -> str:
    hours, rest = divmod(int(seconds), 3600)
    if hours and not rest:
        return f"{hours} h"
    return f"{hours} h {rest // 60} min" if hours else f"{max(1, rest // 60)} min"


async def sign_out(request: Request) -> Response:
    """Ends the session on the server (every node refuses its cookie from now on) and clears it."""
    await auth.checked_form(request)
    console = request.app.state.console
    had_session = auth.has_cookie(request)
    if had_session:
        await auth.close_session(request, console.app().users.sessions)
        log.info("console signed out", extra={"client": auth.client_address(request)})
    root = request.scope.get("root_path", "")
    response = RedirectResponse(root + "/login", status_code=303)
    response.delete_cookie(auth.SESSION_COOKIE, path=auth.COOKIE_PATH, httponly=True, samesite="strict",
                           secure=request.url.scheme == "https")
    if had_session:
        notice.put(request, response, "Signed out: this session is ended on every node.")
    return response


routes = [Route("/login", show, methods=["GET"]), Route("/login", sign_in, methods=["POST"]),
          Route("/logout", sign_out, methods=["POST"])]
