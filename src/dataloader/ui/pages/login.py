"""Sign in with DL_API_TOKEN (ui/auth.py says why the cookie is safe), and sign out."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from dataloader.ui import auth, render
from dataloader.ui.actions import safe_local

NAV = None
TOPICS: dict = {}


def _next(request: Request, given: str | None) -> str:
    root = request.scope.get("root_path", "")
    return given if given and safe_local(given, root) else root + "/"


async def show(request: Request) -> Response:
    return render.page(request, "login.html", next=_next(request, request.query_params.get("next")), problem=None)


async def sign_in(request: Request) -> Response:
    form = await auth.checked_form(request)
    token = request.app.state.console.settings.api_token
    target = _next(request, form.get("next"))
    if token and not auth.token_matches(token, form.get("token", "")):
        return render.page(request, "login.html", status=401, next=target, problem="That is not the token.")
    response = RedirectResponse(target, status_code=303)
    if token:
        response.set_cookie(auth.SESSION_COOKIE, auth.session_value(token), **auth.cookie_options(request))  # type: ignore[arg-type]
    return response


async def sign_out(request: Request) -> Response:
    await auth.checked_form(request)
    root = request.scope.get("root_path", "")
    response = RedirectResponse(root + "/login", status_code=303)
    response.delete_cookie(auth.SESSION_COOKIE, path=auth.COOKIE_PATH)
    return response


routes = [Route("/login", show, methods=["GET"]), Route("/login", sign_in, methods=["POST"]),
          Route("/logout", sign_out, methods=["POST"])]
