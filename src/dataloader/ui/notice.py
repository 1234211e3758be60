"""The outcome of an action, shown once on the page the browser is sent back to ("Job … canceled",
"Queue default paused", "Limits of default set: …").

An action answers with a redirect (POST/redirect/GET), so what it did travels in a short-lived
cookie (`dl_notice`: HttpOnly, SameSite=Strict, path /ui, a minute at most) that the next page
rendered shows and clears. A cookie rather than a query parameter: a link someone sends cannot make
the console claim that something was done. The text is escaped like all data on a page."""

from __future__ import annotations

from urllib.parse import quote, unquote

from starlette.requests import Request
from starlette.responses import Response

from dataloader.ui import auth

COOKIE = "dl_notice"
MAX_CHARS = 500
MAX_AGE_SEC = 60


def put(request: Request, response: Response, text: str) -> Response:
    """`response` carries `text` to the next page this browser opens."""
    response.set_cookie(COOKIE, quote(text[:MAX_CHARS], safe=""), max_age=MAX_AGE_SEC,
                        **auth.cookie_options(request))  # type: ignore[arg-type]
    return response


def pending(request: Request) -> str | None:
    """The notice waiting for this browser, if any (the page that shows it calls `clear`)."""
    value = request.cookies.get(COOKIE)
    return unquote(value)[:MAX_CHARS] if value else None


def clear(request: Request, response: Response) -> None:
    response.delete_cookie(COOKIE, path=auth.COOKIE_PATH)
