"""Who may do what over HTTP (docs/security.md "Tokens and scopes"): every /api/v1 route names its
action in the one table (model/http_actions.py), and every route × every principal (each token
scope, each role, DL_API_TOKEN, the open API) is allowed or refused with 403 in the one error
shape, a refused request writing nothing. Then the tokens' life: revocation and expiry on the next
request, a replayed revoked token (401, throttled), and the rule that tokens close an API without
DL_API_TOKEN."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from dataloader.api import access, create_app
from dataloader.api.access import TOKEN_COMPLETION_PREFIX, route_actions
from dataloader.api.middleware import ApiGuardMiddleware
from dataloader.api.v1.utils import flat_routes
from dataloader.app import App
from dataloader.model.http_actions import HTTP_ACTIONS, WAIT_TOKEN_ROUTE
from dataloader.model.principal import Action, Principal, PrincipalKind, Role, Scope, role_actions, scope_actions
from tests.api.v1.conftest import client_for, next_xid, sessions_of_the_server, tables_content
from tests.api.v1.constants import TRIGGER, job_body
from tests.support.api_apps import api_for

# A value for each path parameter that routes (its resource need not exist).
PATH_VALUES = {"job_id": str(uuid.UUID(int=1)), "chain_id": str(uuid.UUID(int=1)), "run_id": str(uuid.UUID(int=1)),
               "operation_id": str(uuid.UUID(int=1)), "name": "matrix", "ns": "matrix", "id": "p-1",
               "action": "cancel", "token": "matrix-none", "queue": "matrix-q", "task": "matrix-t"}
ROUTES = sorted(HTTP_ACTIONS)


def concrete(path: str) -> str:
    return re.sub(r"{(\w+)(:\w+)?}", lambda m: PATH_VALUES[m.group(1)], path)


@pytest.fixture
async def no_tokens(pool: asyncpg.Pool, app_ctx: App) -> AsyncIterator[None]:
    """No API token before or after the test: a token left behind would close the API of the
    session's App for every later test (and its cache is dropped with it)."""
    await pool.execute("DELETE FROM dl_api_tokens")
    app_ctx.tokens.forget()
    yield
    await pool.execute("DELETE FROM dl_api_tokens")
    app_ctx.tokens.forget()


def test_every_api_route_names_its_action_and_every_entry_names_a_route() -> None:
    app = create_app_for_schema()
    found = route_actions(app.routes)
    missing = sorted(key for key, action in found.items() if action is None)
    assert not missing, f"routes with no action in model/http_actions.py: {missing}"
    stale = sorted(set(HTTP_ACTIONS) - set(found))
    assert not stale, f"HTTP_ACTIONS entries that name no route: {stale}"
    assert len(found) >= 60


def test_the_walk_sees_a_route_without_an_action() -> None:
    """The check can fail: a route added without an entry is found, and the app refuses to build."""
    from fastapi import APIRouter

    from dataloader.api.access import guard_routes

    stray = APIRouter(prefix="/api/v1/stray")

    @stray.get("")
    async def stray_route() -> None: ...

    assert route_actions(stray.routes) == {("GET", "/api/v1/stray"): None}
    with pytest.raises(RuntimeError, match="GET /api/v1/stray"):
        guard_routes(stray.routes)


def create_app_for_schema() -> Any:
    from tests.api.v1.conftest import api_settings

    return create_app(api_settings("postgresql://unused@127.0.0.1:1/unused"))


def acting_app(app_ctx: App, principal: Principal) -> Any:
    """The API app on `app_ctx` whose guard finds `principal` for every request: a console user's
    role, which no bearer carries (the users' sign-in is the console's)."""
    app = create_app(app_ctx.settings, context=app_ctx)

    async def resolve(method: str, path: str, authorization: str | None, address: str | None) -> Principal:
        if method == "POST" and path.startswith(TOKEN_COMPLETION_PREFIX):  # its own credential, as always
            return await access.resolve(app.state.runtime, method, path, authorization, address)
        return principal

    guard = next(m for m in app.user_middleware if m.cls is ApiGuardMiddleware)
    guard.kwargs["resolve"] = resolve
    return app


CASES = ["anonymous", "admin_token", *(f"scope:{s.value}" for s in Scope), *(f"role:{r.value}" for r in Role)]


def allowed_actions(case: str) -> frozenset[Action]:
    kind, _, value = case.partition(":")
    if kind == "scope":
        return scope_actions(Scope(value))
    if kind == "role":
        return role_actions(Role(value))
    return frozenset(Action)


@pytest.mark.parametrize("case", CASES)
async def test_every_route_allows_or_refuses_each_principal(case: str, db: asyncpg.Pool, app_ctx: App,
                                                            no_tokens: None) -> None:
    headers: dict[str, str] = {}
    if case == "admin_token":
        app = create_app(app_ctx.settings.model_copy(update={"api_token": "matrix-admin"}), context=app_ctx)
        headers["Authorization"] = "Bearer matrix-admin"
    elif case.startswith("scope:"):
        created = await app_ctx.tokens.create(name=f"matrix-{case[6:]}", scopes=[case[6:]])
        app, headers["Authorization"] = api_for(app_ctx), f"Bearer {created.secret}"
    elif case.startswith("role:"):
        role = Role(case[5:])
        app = acting_app(app_ctx, Principal.with_role(PrincipalKind.USER, f"matrix-{role.value}", role))
    else:
        app = api_for(app_ctx)
    may = allowed_actions(case)
    async with client_for(app) as client:
        client.headers.update(headers)
        # A first request looks the token up (and stamps its last_used_at); every refusal after it
        # must take no transaction id at all: nothing written, in any table.
        assert (await client.get("/api/v1/nodes")).status_code in (200, 403)
        before, content = await next_xid(db), await tables_content(db)
        refused: list[str] = []
        for method, path in ROUTES:
            action = HTTP_ACTIONS[(method, path)]
            body = {"matrix": True} if method in ("POST", "PUT", "PATCH") else None
            response = await client.request(method, concrete(path), json=body)
            assert response.status_code < 500, (method, path, response.text)
            expected_allowed = action in may or (method, path) == WAIT_TOKEN_ROUTE
            if expected_allowed:
                assert response.status_code not in (401, 403), (case, method, path, response.text)
            else:
                assert response.status_code == 403, (case, method, path, response.text)
                assert response.json()["error"] == "forbidden" and action.value in response.json()["detail"]
                refused.append(f"{method} {path}")
                if await next_xid(db) != before:
                    pytest.fail(f"{case}: the refused {method} {path} wrote something, or another session did: "
                                f"{await sessions_of_the_server(db)}")
            before = await next_xid(db)
        assert len(refused) == sum(1 for key in ROUTES if HTTP_ACTIONS[key] not in may and key != WAIT_TOKEN_ROUTE)
        if case in ("scope:read", "role:viewer"):  # nothing at all changes for a reader
            assert await tables_content(db) == content


async def test_a_bulk_delete_needs_delete_beyond_operate(db: asyncpg.Pool, app_ctx: App, no_tokens: None) -> None:
    operate = await app_ctx.tokens.create(name="matrix-operate", scopes=["operate"])
    async with client_for(api_for(app_ctx)) as client:
        client.headers["Authorization"] = f"Bearer {operate.secret}"
        await client.post(TRIGGER, json=job_body())
        before = await tables_content(db)
        body = {"kind": "delete", "filter": {"statuses": ["succeeded"]}}
        refused = await client.post("/api/v1/operations", json=body)
        assert refused.status_code == 403 and refused.json()["error"] == "forbidden", refused.text
        assert await tables_content(db) == before
        dry = await client.post("/api/v1/operations", json={**body, "dry_run": True})
        assert dry.status_code == 200, dry.text


async def test_revocation_holds_on_the_next_request_and_a_replay_is_401_and_throttled(
        db: asyncpg.Pool, app_ctx: App, no_tokens: None) -> None:
    settings = app_ctx.settings.model_copy(update={"api_token": "matrix-admin", "auth_max_failures": 3})
    async with client_for(create_app(settings, context=app_ctx)) as client:
        admin = {"Authorization": "Bearer matrix-admin"}
        made = await client.post("/api/v1/tokens", json={"name": "ci", "scopes": ["enqueue"]}, headers=admin)
        assert made.status_code == 201 and made.json()["secret"].startswith("dlt_"), made.text
        assert made.headers["Cache-Control"] == "no-store"
        ci = {"Authorization": f"Bearer {made.json()['secret']}"}
        assert (await client.post(TRIGGER, json=job_body(), headers=ci)).status_code == 201
        assert (await client.get("/api/v1/jobs", headers=ci)).status_code == 403
        listed = (await client.get("/api/v1/tokens", headers=admin)).json()["tokens"]
        assert [t["name"] for t in listed] == ["ci"] and "secret" not in listed[0]
        assert listed[0]["last_used_at"] is not None and listed[0]["created_by"] == "admin_token:DL_API_TOKEN"
        revoked = await client.post("/api/v1/tokens/ci/revoke", headers=admin)
        assert revoked.status_code == 200 and revoked.json()["state"] == "revoked", revoked.text
        again = await client.post("/api/v1/tokens/ci/revoke", headers=admin)
        assert again.status_code == 404 and again.json()["error"] == "api_token_not_found"  # by name: none live
        by_id = await client.post(f"/api/v1/tokens/{made.json()['id']}/revoke", headers=admin)
        assert by_id.json()["revoked_at"] == revoked.json()["revoked_at"]  # idempotent: the first time stays
        jobs_before = await db.fetchval("SELECT count(*) FROM dl_jobs")
        for _ in range(3):  # the replays: 401, each one counted as a wrong token of this address
            replay = await client.post(TRIGGER, json=job_body(), headers=ci)
            assert replay.status_code == 401 and replay.json()["error"] == "unauthorized", replay.text
        throttled = await client.post(TRIGGER, json=job_body(), headers=ci)
        assert throttled.status_code == 429 and throttled.json()["error"] == "too_many_failures"
        assert await db.fetchval("SELECT count(*) FROM dl_jobs") == jobs_before


async def test_an_expired_token_is_refused_on_the_database_clock(db: asyncpg.Pool, app_ctx: App,
                                                                 no_tokens: None) -> None:
    created = await app_ctx.tokens.create(name="short", scopes=["read"], expires_in=60)
    async with client_for(api_for(app_ctx)) as client:
        client.headers["Authorization"] = f"Bearer {created.secret}"
        assert (await client.get("/api/v1/jobs")).status_code == 200
        # The minute passes on the database's clock; this node's cache is what a minute later holds.
        await db.execute("UPDATE dl_api_tokens SET expires_at = now() - interval '1 second'")
        app_ctx.tokens.forget()
        expired = await client.get("/api/v1/jobs")
        assert expired.status_code == 401 and "expired" in expired.json()["detail"], expired.text
        # An expired token still closes the API: the clock never opens it.
        assert (await client.get("/api/v1/jobs", headers={"Authorization": ""})).status_code == 401


async def test_tokens_close_an_api_without_dl_api_token_until_the_last_is_revoked(
        db: asyncpg.Pool, app_ctx: App, no_tokens: None) -> None:
    async with client_for(api_for(app_ctx)) as client:
        assert (await client.get("/api/v1/jobs")).status_code == 200  # open, as it always was
        created = await app_ctx.tokens.create(name="first", scopes=["admin"])
        closed = await client.get("/api/v1/jobs")
        assert closed.status_code == 401 and closed.headers["WWW-Authenticate"] == "Bearer"
        assert (await client.get("/api/v1/jobs", headers={"Authorization": "Bearer not-ours"})).status_code == 401
        token = {"Authorization": f"Bearer {created.secret}"}
        assert (await client.get("/api/v1/jobs", headers=token)).status_code == 200
        # A bad body from a caller that is not signed in learns nothing: 401 before validation.
        assert (await client.post(TRIGGER, json={"nope": 1})).status_code == 401
        await app_ctx.tokens.revoke("first")
        assert (await client.get("/api/v1/jobs")).status_code == 200
        assert (await client.get("/api/v1/jobs", headers=token)).status_code == 401  # revoked, even on an open API


@pytest.mark.parametrize("body", [
    {"name": "Bad Name", "scopes": ["read"]}, {"name": "x", "scopes": []}, {"name": "x", "scopes": ["root"]},
    {"name": "x", "scopes": ["read", "read"]}, {"name": "x", "scopes": ["read"], "expires_in_sec": 59},
    {"name": "x", "scopes": ["read"], "expires_in_sec": 731 * 86400}, {"name": "x", "scopes": ["read"], "extra": 1},
    {"name": str(uuid.UUID(int=5)), "scopes": ["read"]},
])
async def test_bad_token_bodies_are_422_and_write_nothing(body: dict[str, Any], db: asyncpg.Pool, app_ctx: App,
                                                          no_tokens: None) -> None:
    async with client_for(api_for(app_ctx)) as client:
        response = await client.post("/api/v1/tokens", json=body)
    assert response.status_code == 422 and response.json()["error"] == "validation_error", response.text
    assert await db.fetchval("SELECT count(*) FROM dl_api_tokens") == 0


def test_the_error_shape_of_a_refusal_is_the_one_shape() -> None:
    from dataloader.api.access import forbidden

    error = forbidden(Principal.with_scopes("ci", frozenset({Scope.ENQUEUE})), Action.DELETE)
    assert error.code == "forbidden" and str(error) == "token:ci may not delete: it needs a token with scope admin"


async def test_the_matrix_helper_reaches_every_route(app_ctx: App) -> None:
    """Every route's concrete path routes to that route (not to a neighbour's template)."""
    app = api_for(app_ctx)
    from starlette.routing import Match

    for method, path in ROUTES:
        scope = {"type": "http", "method": method, "path": concrete(path), "root_path": "", "headers": [],
                 "query_string": b""}
        matched = [getattr(r, "path", None) for r in flat_routes(app.routes) if r.matches(scope)[0] is Match.FULL]
        assert matched and matched[0] == path, (method, path, matched)


# The matrix follows the table; these pin the table's meaning for the routes a team relies on, so
# a mapping changed by mistake (a cancel made `read`) fails here, not in production.
PINNED = {
    ("POST", "/api/v1/jobs/trigger"): Action.ENQUEUE, ("POST", "/api/v1/workflows"): Action.ENQUEUE,
    ("GET", "/api/v1/jobs"): Action.READ, ("POST", "/api/v1/search"): Action.READ,
    ("POST", "/api/v1/jobs/{job_id}/cancel"): Action.OPERATE, ("POST", "/api/v1/jobs/{job_id}/retry"): Action.OPERATE,
    ("POST", "/api/v1/operations"): Action.OPERATE, ("POST", "/api/v1/queues/{queue:dl_queue}/pause"): Action.OPERATE,
    ("PATCH", "/api/v1/queues/{queue:dl_queue}"): Action.CONFIGURE, ("POST", "/api/v1/schedules"): Action.CONFIGURE,
    ("DELETE", "/api/v1/jobs/{job_id}"): Action.DELETE, ("POST", "/api/v1/maintenance/prune"): Action.DELETE,
    ("POST", "/api/v1/tokens"): Action.MANAGE_ACCESS, ("GET", "/api/v1/tokens"): Action.MANAGE_ACCESS,
}


def test_the_table_means_what_the_docs_say() -> None:
    assert {key: HTTP_ACTIONS[key] for key in PINNED} == PINNED
    # every GET reads, but who holds which access (tokens, users, keys) and who did what (the audit
    # trail) is for those who manage it
    access = ("/api/v1/tokens", "/api/v1/users", "/api/v1/audit", "/api/v1/encryption")
    assert all(action is Action.READ for (method, path), action in HTTP_ACTIONS.items()
               if method == "GET" and not path.startswith(access))
    assert Action.ENQUEUE in scope_actions(Scope.ENQUEUE) and Action.READ not in scope_actions(Scope.ENQUEUE)
