"""Who may use the console, and that an action was sent by the console's own page.

Sign-in: with DL_API_TOKEN set, the login page takes the token and opens a session: a row of
`dl_console_sessions` (migration 0028) named by the SHA-256 of a random secret that the cookie
holds (`dl_console`: HttpOnly, SameSite=Strict, path /ui, Max-Age of the session). So:
- every sign-in gets a new secret (rotation), and the browser's previous session is deleted;
- a session expires DL_UI_SESSION_TTL after its sign-in (default 12 h), on the database's clock;
- "Sign out" deletes the row: a copy of the cookie replayed afterwards, on this node or any other
  sharing the database, after a restart or not, signs nobody in;
- the row keeps an HMAC of a label under the token it was opened with, so changing the token
  still signs every browser out; the token itself never sits in the browser or in the table;
- a cookie that is not a live session's, whatever it holds, is refused (one primary-key look-up
  per console request; nothing is cached, so a sign-out anywhere is seen by the next request).
Wrong tokens at the login page count against the client's address (auth_throttle.py, shared with
the API's bearer check): past DL_AUTH_MAX_FAILURES it answers 429 with Retry-After. Without a
token the console is open, as the API is.

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

from dataloader.storage.console_session_repository import ConsoleSessionRepository

SESSION_COOKIE = "dl_console"
CSRF_COOKIE = "dl_csrf"
CSRF_FIELD = "csrf"
COOKIE_PATH = "/ui"
_SESSION_LABEL = b"dataloader console session v1"
_CSRF_SHAPE = re.compile(r"^[A-Za-z0-9_-]{32,64}$")
# A session cookie's secret: secrets.token_urlsafe(32), 43 characters.
_SESSION_SHAPE = re.compile(r"^[A-Za-z0-9_-]{43}$")
# Console forms are a few short fields; a larger body is not one of ours.
MAX_FORM_BYTES = 64 * 1024


class Forbidden(Exception):
    """A POST without a matching CSRF token, or an action in read-only mode."""


def token_mac(token: str) -> str:
    """What a session row keeps of the token it was opened with: an HMAC of a fixed label under it
    (a session of another token does not sign in; the token is not stored)."""
    return hmac.new(token.encode("utf-8"), _SESSION_LABEL, hashlib.sha256).hexdigest()


def token_matches(token: str, given: str) -> bool:
    """Constant-time in the token; non-ASCII input compares as its UTF-8 bytes."""
    return hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8"))


def _session_hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("ascii")).digest()


def _cookie_secret(request: Request) -> str | None:
    cookie = request.cookies.get(SESSION_COOKIE, "")
    return cookie if _SESSION_SHAPE.match(cookie) else None


def client_address(request: Request) -> str | None:
    return request.client.host if request.client else None


async def authenticate(request: Request, token: str | None, sessions: ConsoleSessionRepository) -> bool:
    """Whether this request's cookie is a live session of the current token (the console's guard
    asks, once per request; `signed_in` reads the answer afterwards). May raise the database's
    errors: the guard answers them with its unavailable page."""
    if not token:
        return True
    secret = _cookie_secret(request)
    if secret is None:
        return False
    expires_at = await sessions.alive(_session_hash(secret), token_mac(token))
    if expires_at is None:
        return False
    request.state.console_session = expires_at
    return True


def signed_in(request: Request, token: str | None) -> bool:
    """True when no token is set, or the guard found this request's session alive."""
    if not token:
        return True
    return getattr(request.state, "console_session", None) is not None


async def open_session(request: Request, token: str, sessions: ConsoleSessionRepository,
                       ttl_sec: float) -> str:
    """A new session for this browser (its previous one, if it carried one, is deleted): the
    cookie's value to set."""
    secret = secrets.token_urlsafe(32)
    previous = _cookie_secret(request)
    await sessions.open(_session_hash(secret), token_mac(token), ttl_sec,
                        previous=_session_hash(previous) if previous else None, client=client_address(request))
    return secret


async def close_session(request: Request, sessions: ConsoleSessionRepository) -> None:
    """End this browser's session everywhere (its row is deleted)."""
    secret = _cookie_secret(request)
    if secret is not None:
        await sessions.close(_session_hash(secret))


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


def cookie_options(request: Request, max_age: float | None = None) -> dict[str, object]:
    options: dict[str, object] = {"path": COOKIE_PATH, "httponly": True, "samesite": "strict",
                                  "secure": request.url.scheme == "https"}
    if max_age is not None:
        options["max_age"] = int(max_age)
    return options


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
