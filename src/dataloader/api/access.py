"""Who a request to /api/ is, and whether its route allows it: the HTTP face of the access model
(model/principal.py, docs/security.md "Tokens and scopes").

Who (`resolve`, called by ApiGuardMiddleware before the body is read):
- `Bearer <DL_API_TOKEN>`: the single-user admin (`admin_token:DL_API_TOKEN`);
- `Bearer dlt_…`: the API token it names, with its scopes (`token:<name>`); unknown, expired or
  revoked is 401, counted by the auth throttle like any wrong token;
- no bearer (or one that is neither): 401 when the API is closed — DL_API_TOKEN is set, or at
  least one API token is not revoked (expired ones count, so a token running out never opens the
  API; revoking the last one does: an operator's explicit act) — otherwise `anonymous`, with every
  action, as the API has always been open without DL_API_TOKEN;
- the completion of a workflow's wait token (its own credential is in its path): `wait-token`,
  allowed `enqueue` only.

Whether (`guard_routes`): each /api/v1 route's ASGI app is wrapped once with the action its
route needs (model/http_actions.py, the one table); a principal without it gets 403 `forbidden`
before its body is parsed or anything is written. A route missing from the table stops the app
from being built. The wrapper reads the principal the middleware put in the request's scope, so a
request that never passed the middleware is refused (401), never run as the library's admin."""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as AsgiScope

from dataloader.api.v1.exceptions import ApiError, error_response, error_responses
from dataloader.api.v1.models import ErrorCode
from dataloader.api.v1.utils import flat_routes
from dataloader.exceptions import Forbidden
from dataloader.model.api_token import looks_like_token
from dataloader.model.http_actions import HTTP_ACTIONS, scopes_granting
from dataloader.model.principal import Action, Principal, PrincipalKind, Role, allows

if TYPE_CHECKING:
    from dataloader.app import App
    from dataloader.config import Settings


class Runtime(Protocol):
    """What `resolve` needs of the app's runtime (api/runtime.py `Runtime`, which imports this module)."""

    settings: Settings

    def require_app(self) -> App: ...

# Where the middleware leaves the request's principal for the route guard (and the routes).
PRINCIPAL_KEY = "dataloader.principal"
GUARDED_PREFIX = "/api/v1/"

# A wait token is completed by a third party who holds that token, not the API's: the token (192
# random bits, answered once) is the credential (docs/workflows.md "Wait tokens").
TOKEN_COMPLETION_PREFIX = "/api/v1/workflows/tokens/"


def needs_api_token(path: str, method: str, prefix: str = "/api/") -> bool:
    """Whether a request to `path` needs a bearer (when the API is closed): all of /api/ but a
    wait token's completion."""
    if not path.startswith(prefix):
        return False
    return not (method.upper() == "POST" and path.startswith(TOKEN_COMPLETION_PREFIX))


def bearer_of(header_value: str | None) -> bytes | None:
    """The bytes of `Authorization: Bearer <value>` as the client sent them, or None."""
    if not header_value:
        return None
    scheme, _, token = header_value.partition(" ")
    if scheme.lower() != "bearer":
        return None
    # Starlette decodes header bytes as latin-1; encoding back gives the bytes the client sent,
    # which for a non-ASCII token are its UTF-8.
    try:
        return token.strip().encode("latin-1")
    except UnicodeEncodeError:
        return None


def unauthorized(detail: str = "missing or wrong bearer token (Authorization: Bearer <token>)") -> ApiError:
    return ApiError(ErrorCode.unauthorized, detail, headers={"WWW-Authenticate": "Bearer"})


async def resolve(runtime: Runtime, method: str, path: str, authorization: str | None,
                  address: str | None) -> Principal:
    """The principal of a request to /api/, or ApiError: 401, or 503 while the App is not open."""
    if method.upper() == "POST" and path.startswith(TOKEN_COMPLETION_PREFIX):
        return Principal(PrincipalKind.ANONYMOUS, "wait-token", frozenset({Action.ENQUEUE}), address)
    expected = runtime.settings.api_token
    sent = bearer_of(authorization)
    if sent is not None and expected and hmac.compare_digest(sent, expected.encode("utf-8")):
        return Principal.with_role(PrincipalKind.ADMIN_TOKEN, "DL_API_TOKEN", Role.ADMIN, address)
    text = sent.decode("utf-8", "replace") if sent is not None else ""
    if looks_like_token(text):
        principal = await runtime.require_app().tokens.authenticate(text, address)
        if principal is None:
            raise unauthorized("unknown, expired or revoked API token")
        return principal
    if expected or await runtime.require_app().tokens.any_live():
        raise unauthorized()
    return Principal.with_role(PrincipalKind.ANONYMOUS, "anonymous", Role.ADMIN, address)


def forbidden(principal: Principal, action: Action) -> Forbidden:
    """The one refusal of every face (HTTP 403 `forbidden` through the error handlers)."""
    return Forbidden(f"{principal.label} may not {action.value}: it needs a token with scope "
                     f"{' or '.join(s.value for s in scopes_granting(action))}")


def require(scope: AsgiScope, action: Action) -> None:
    """For a route whose body asks for more than its route's action (a bulk delete): Forbidden
    unless the request's principal allows `action` as well."""
    principal = scope.get(PRINCIPAL_KEY)
    if principal is None:
        raise unauthorized()
    if not allows(principal, action):
        raise forbidden(principal, action)


def _guarded(inner: ASGIApp, actions: dict[str, Action]) -> ASGIApp:
    async def guarded(scope: AsgiScope, receive: Receive, send: Send) -> None:
        principal: Principal | None = scope.get(PRINCIPAL_KEY)
        action = actions.get(scope.get("method", ""))
        if principal is not None and action is not None and allows(principal, action):
            await inner(scope, receive, send)
            return
        if principal is None or action is None:
            missing = unauthorized()
            response = error_response(missing.code, str(missing), headers=missing.headers)
        else:
            refused = forbidden(principal, action)
            response = error_response(refused.code, str(refused))
        await response(scope, receive, send)

    guarded.__dict__["dl_guarded"] = True
    return guarded


def route_actions(routes: Iterable[BaseRoute]) -> dict[tuple[str, str], Action | None]:
    """Every (method, path) of the /api/v1 routes among `routes`, with its action (None: none in the table)."""
    found: dict[tuple[str, str], Action | None] = {}
    for route in flat_routes(routes):
        path = getattr(route, "path", "")
        if path.startswith(GUARDED_PREFIX) or path == GUARDED_PREFIX.rstrip("/"):
            for method in sorted(getattr(route, "methods", None) or ()):
                found[(method, path)] = HTTP_ACTIONS.get((method, path))
    return found


def guard_routes(routes: Iterable[BaseRoute]) -> None:
    """Wrap every /api/v1 route with its action's check (once: routers are built once per process
    and shared by every app). A route with no action in the table is an error here, at build time."""
    routes = list(flat_routes(routes))
    missing = [f"{m} {p}" for (m, p), action in route_actions(routes).items() if action is None]
    if missing:
        raise RuntimeError(f"routes with no action in model/http_actions.py HTTP_ACTIONS: {missing}")
    for route in routes:
        path = getattr(route, "path", "")
        inner: Any = getattr(route, "app", None)
        if not path.startswith(GUARDED_PREFIX) or inner is None or getattr(inner, "dl_guarded", False):
            continue
        actions = {method: HTTP_ACTIONS[(method, path)] for method in getattr(route, "methods", None) or ()}
        route.app = _guarded(inner, actions)  # type: ignore[attr-defined]


def openapi_security(schema: dict[str, Any], *, admin_token_set: bool) -> None:
    """The bearer scheme, each /api/ route's action and the scopes that grant it, and its 401 and
    403, in the schema. Without DL_API_TOKEN a route may also be called with no credential (the
    API is open until an API token exists), which `{}` among its security options says."""

    schema.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
        "type": "http", "scheme": "bearer",
        "description": "DL_API_TOKEN (admin), or an API token `dlt_…` with its scopes (docs/security.md)"}
    content = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
    unauthorized_body = {"description": error_responses(ErrorCode.unauthorized)[401]["description"],
                         "content": content}
    forbidden_body = {"description": error_responses(ErrorCode.forbidden)[403]["description"], "content": content}
    throttled = ErrorCode.too_many_failures.value  # wrong tokens from one address (auth_throttle.py)
    for path, operations in schema.get("paths", {}).items():
        if not path.startswith("/api/"):
            continue
        for method, operation in operations.items():
            action = HTTP_ACTIONS.get((method.upper(), _template(path)))
            if action is None:
                continue
            scopes = [s.value for s in scopes_granting(action)]
            operation["x-dataloader-action"] = action.value
            operation["x-dataloader-scopes"] = scopes
            needs = f"Needs `{action.value}`: token scopes {', '.join(scopes)}."
            operation["description"] = f"{operation.get('description', '').rstrip()}\n\n{needs}".lstrip()
            responses = operation.setdefault("responses", {})
            responses["403"] = forbidden_body
            if not needs_api_token(path, method):
                continue  # its own credential (a wait token's completion)
            operation["security"] = [{"bearer": []}] if admin_token_set else [{"bearer": []}, {}]
            responses["401"] = unauthorized_body
            if "429" in responses:  # too_many_queries already: one answer, both codes
                responses["429"] = {**responses["429"],
                                    "description": f"{responses['429']['description']}, {throttled}"}
            else:
                responses["429"] = {"description": f"error: {throttled}", "content": content}


def _template(openapi_path: str) -> str:
    """The route template of an OpenAPI path: FastAPI drops a convertor (`{queue}` for `{queue:dl_queue}`)."""
    return _OPENAPI_TO_ROUTE.get(openapi_path, openapi_path)


# OpenAPI writes `{queue}` where the route's template says `{queue:dl_queue}`.
_OPENAPI_TO_ROUTE: dict[str, str] = {re.sub(r":\w+}", "}", route): route for _, route in HTTP_ACTIONS}
