"""Who may use the console, who a request acts as, and that an action was sent by the console's own page.

Who must sign in (docs/security.md "Sign-in"): nobody while DL_API_TOKEN is unset, no user exists
and no single sign-on is set up (the console is open, as the API is, and acts as an admin,
`anonymous`); everybody once any of them is. A user signs in with name and password
(users/manager.py checks it) or through the provider (ui/sso.py), the single-user set-up with
DL_API_TOKEN (an admin, kind `admin_token`). Each request then acts as the session's
`Principal` (kind `user` with the user's role read from dl_users on this very request, so a
demotion or a disable holds from the next request; or the token's admin); DL_UI_READ_ONLY caps
whoever it is at a viewer's actions.

Sessions: the login page opens a session: a row of
`dl_console_sessions` (migration 0028) named by the SHA-256 of a random secret that the cookie
holds (`dl_console`: HttpOnly, SameSite=Strict, path /ui, Max-Age of the session). So:
- every sign-in gets a new secret (rotation), and the browser's previous session is deleted;
- a session expires DL_UI_SESSION_TTL after its sign-in (default 12 h), on the database's clock;
- "Sign out" deletes the row: a copy of the cookie replayed afterwards, on this node or any other
  sharing the database, after a restart or not, signs nobody in;
- a token session's row keeps an HMAC of a label under the token it was opened with, so changing
  the token still signs every browser out; the token itself never sits in the browser or in the
  table; a user's row names the user (migration 0041): deleting, disabling the user or setting a
  new password deletes their sessions;
- a cookie that is not a live session's, whatever it holds, is refused (one primary-key look-up
  per console request; nothing is cached, so a sign-out anywhere is seen by the next request).
Wrong tokens and wrong passwords at the login page count against the client's address
(auth_throttle.py, shared with the API's bearer check): past DL_AUTH_MAX_FAILURES it answers 429
with Retry-After.

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

from dataloader.config import Settings
from dataloader.model.principal import Principal, PrincipalKind, Role, role_actions
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
    """A POST without a matching CSRF token, or an action the principal's role may not do."""


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


def has_cookie(request: Request) -> bool:
    """Whether the browser carries a session cookie of the right shape (live or not)."""
    return _cookie_secret(request) is not None


def client_address(request: Request) -> str | None:
    return request.client.host if request.client else None


async def authenticate(request: Request, settings: Settings, sessions: ConsoleSessionRepository
                       ) -> Principal | None:
    """Who this request acts as, or None: it must sign in first (the console's guard asks, once per
    request; `signed_in` and `shown` read the answer afterwards). May raise the database's errors:
    the guard answers them with its unavailable page."""
    token = settings.api_token
    secret = _cookie_secret(request)
    check = await sessions.check(_session_hash(secret) if secret else None, token_mac(token) if token else None)
    address = client_address(request)
    if check.expires_at is not None:
        request.state.console_session = check.expires_at
        if check.user is not None and check.role is not None:
            principal = Principal.with_role(PrincipalKind.USER, check.user, check.role, address)
        else:
            principal = Principal.with_role(PrincipalKind.ADMIN_TOKEN, "DL_API_TOKEN", Role.ADMIN, address)
    elif token or check.users_exist or settings.oidc_issuer:
        return None
    else:  # nothing to sign in with: open, as the API is without a token
        principal = Principal.with_role(PrincipalKind.ANONYMOUS, "anonymous", Role.ADMIN, address)
    if settings.ui_read_only:  # everybody is at most a viewer
        principal = Principal(principal.kind, principal.name, principal.actions & role_actions(Role.VIEWER),
                              principal.address)
    request.state.principal = principal
    return principal


def signed_in(request: Request) -> bool:
    """Whether the guard found this request's session alive (an open console has none)."""
    return getattr(request.state, "console_session", None) is not None


def shown(request: Request) -> str | None:
    """Who the page header says is signed in: `alice (operator)`, `DL_API_TOKEN (admin)`."""
    principal: Principal | None = getattr(request.state, "principal", None)
    if principal is None or not signed_in(request):
        return None
    role = next((r.value for r in reversed(Role) if role_actions(r) == principal.actions), "viewer")
    return f"{principal.name} ({role})"


async def open_session(request: Request, sessions: ConsoleSessionRepository, ttl_sec: float, *,
                       token: str | None = None, user: str | None = None) -> str:
    """A new session of `token` (DL_API_TOKEN) or of `user`, for this browser (its previous one, if
    it carried one, is deleted): the cookie's value to set."""
    secret = secrets.token_urlsafe(32)
    previous = _cookie_secret(request)
    await sessions.open(_session_hash(secret), token_mac(token) if token else None, ttl_sec,
                        previous=_session_hash(previous) if previous else None, client=client_address(request),
                        user=user)
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
