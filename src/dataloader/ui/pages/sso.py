"""Single sign-on's two pages (ui/sso.py): /ui/login/oidc sends the browser to the provider,
/ui/login/oidc/callback takes it back, makes or updates the user the claims name with the role
they map to, and opens the same database session a password sign-in opens. A refusal (a stale or
foreign state, a token that does not check out, a claim without a role here, a disabled user) is
the login page with the reason, and counts in the auth throttle as a wrong password does."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from dataloader.ui import auth, sso
from dataloader.ui.pages.login import _next, _page, signed_in_response

NAV = None
TOPICS: dict = {}

log = logging.getLogger("dataloader.ui.auth")


def _state_cookie_options(request: Request, max_age: int) -> dict[str, object]:
    return {"path": request.scope.get("root_path", "") + "/login/oidc", "httponly": True, "samesite": "lax",
            "secure": request.url.scheme == "https", "max_age": max_age}


async def begin(request: Request) -> Response:
    console = request.app.state.console
    if console.oidc is None:
        return await _page(request, status=404, next=_next(request, None), problem="Single sign-on is not set up.")
    target = _next(request, request.query_params.get("next"))
    url, kept = await sso.start(console.oidc, request, target)
    response = RedirectResponse(url, status_code=303)
    response.set_cookie(sso.STATE_COOKIE, kept, **_state_cookie_options(request, sso.STATE_TTL_SEC))  # type: ignore[arg-type]
    return response


async def callback(request: Request) -> Response:
    console = request.app.state.console
    address = auth.client_address(request)
    if console.oidc is None:
        return await _page(request, status=404, next=_next(request, None), problem="Single sign-on is not set up.")
    wait = console.throttle.retry_after(address)
    if wait is not None:
        refused = await _page(request, status=429, next=_next(request, None),
                              problem=f"Too many failed sign-ins from this address; try again in {wait} s.")
        refused.headers["Retry-After"] = str(wait)
        return refused
    app = console.app()
    try:
        kept = sso.kept_state(request.cookies.get(sso.STATE_COOKIE))
        name, role = console.oidc.user_of(await sso.finish(console.oidc, request, kept))
        user = await app.users.sso_sign_in(name, role)
        if user is None:
            raise sso.SsoRefused(f"{name} is disabled here")
    except sso.SsoRefused as exc:
        console.throttle.failed(address)
        log.warning("console single sign-on refused", extra={"client": address, "reason": str(exc)[:300]})
        refused = await _page(request, status=401, next=_next(request, None), problem=f"Single sign-on refused: {exc}")
        refused.delete_cookie(sso.STATE_COOKIE, path=request.scope.get("root_path", "") + "/login/oidc")
        return refused
    response = await signed_in_response(request, user, _next(request, kept.get("next")), how="single sign-on")
    response.delete_cookie(sso.STATE_COOKIE, path=request.scope.get("root_path", "") + "/login/oidc")
    return response


routes = [Route("/login/oidc", begin, methods=["GET"]), Route("/login/oidc/callback", callback, methods=["GET"])]
