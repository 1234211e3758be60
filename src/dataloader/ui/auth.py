"""Who may use the console, and that an action was sent by the console's own page.

Sign-in: with DL_API_TOKEN set, the login page takes the token and sets a session cookie (HttpOnly,
SameSite=Strict, path /ui) whose value is an HMAC of a fixed label under the token: the token
itself never sits in the browser, every node of the service accepts the cookie without shared
state, and changing the token signs every browser out. Without a token the console is open, as the
API is.

CSRF: every POST carries a form field that must equal the `dl_csrf` cookie (a double-submit token,
random per browser). A page of another site can neither read the cookie nor (SameSite=Strict) get
it sent along, so it cannot forge the pair; this holds with and without DL_API_TOKEN."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from urllib.parse import parse_qsl

from starlette.datastructures import ImmutableMultiDict
from starlette.requests import Request

SESSION_COOKIE = "dl_console"
CSRF_COOKIE = "dl_csrf"
CSRF_FIELD = "csrf"
COOKIE_PATH = "/ui"
_SESSION_LABEL = b"dataloader console session v1"
_CSRF_SHAPE = re.compile(r"^[A-Za-z0-9_-]{32,64}$")
# Console forms are a few short fields; a larger body is not one of ours.
MAX_FORM_BYTES = 64 * 1024


class Forbidden(Exception):
    """A POST without a matching CSRF token, or an action in read-only mode."""


def session_value(token: str) -> str:
    return hmac.new(token.encode("utf-8"), _SESSION_LABEL, hashlib.sha256).hexdigest()


def token_matches(token: str, given: str) -> bool:
    """Constant-time in the token; non-ASCII input compares as its UTF-8 bytes."""
    return hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8"))


def signed_in(request: Request, token: str | None) -> bool:
    if not token:
        return True
    cookie = request.cookies.get(SESSION_COOKIE, "")
    return hmac.compare_digest(cookie.encode("utf-8", "replace"), session_value(token).encode("ascii"))


def csrf_token(request: Request) -> str:
    """This browser's CSRF token: the cookie's when it is well-formed, else a new one that the
    response sets (`new_csrf_cookie`)."""
    current = request.cookies.get(CSRF_COOKIE, "")
    if _CSRF_SHAPE.match(current):
        return current
    fresh = getattr(request.state, "csrf_fresh", None)
    if fresh is None:
        fresh = request.state.csrf_fresh = secrets.token_urlsafe(32)
    return fresh


def new_csrf_cookie(request: Request) -> str | None:
    """The token to set as a cookie on this response, when the request made one."""
    return getattr(request.state, "csrf_fresh", None)


def cookie_options(request: Request) -> dict[str, object]:
    return {"path": COOKIE_PATH, "httponly": True, "samesite": "strict", "secure": request.url.scheme == "https"}


async def checked_form(request: Request) -> ImmutableMultiDict[str, str]:
    """The POSTed form (urlencoded), once its CSRF field matched the cookie; Forbidden otherwise."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise Forbidden("the form is larger than the console sends")
    form = ImmutableMultiDict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    sent = form.get(CSRF_FIELD, "")
    cookie = request.cookies.get(CSRF_COOKIE, "")
    if not _CSRF_SHAPE.match(cookie) or not hmac.compare_digest(sent.encode("utf-8", "replace"),
                                                                 cookie.encode("ascii")):
        raise Forbidden("the form's CSRF token does not match this browser's; reload the page and try again")
    return form
