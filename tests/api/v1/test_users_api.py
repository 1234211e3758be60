"""`/api/v1/users` (issue 40): the console's users over HTTP, every route needing MANAGE_ACCESS
(model/http_actions.py, checked by api/access.py against the principal in force), every refusal in the one error
shape with nothing written, the password never echoed."""

from __future__ import annotations

import pytest
from fastapi.routing import APIRoute

from dataloader.api import create_app
from dataloader.model.http_actions import action_for
from dataloader.model.principal import Action, Principal, PrincipalKind, Role
from tests.api.v1.conftest import api_settings, client_for
from tests.api.v1.test_access import acting_app
from tests.ui.users_support import empty_users

USERS = "/api/v1/users"


@pytest.fixture(autouse=True)
async def no_users(db):
    await empty_users(db)
    yield
    await empty_users(db)


async def users_now(db) -> list[str]:
    return [f"{r['name']}:{r['role']}:{r['disabled']}" for r in
            await db.fetch("SELECT name, role, disabled FROM dl_users ORDER BY name")]


def test_every_users_route_needs_manage_access_and_says_so_in_openapi():
    app = create_app(api_settings("postgresql://unused@127.0.0.1:1/unused"))
    routes = [r for r in app.routes if isinstance(r, APIRoute) and r.path.startswith(USERS)]
    assert len(routes) == 8
    assert {action_for(m, r.path) for r in routes for m in r.methods} == {Action.MANAGE_ACCESS}
    paths = app.openapi()["paths"]
    for route in routes:
        for method in route.methods:
            operation = paths[route.path][method.lower()]
            assert operation["x-dataloader-action"] == "manage_access"
            assert "403" in operation["responses"]


async def test_create_list_change_and_delete(client, db):
    created = await client.post(USERS, json={"name": "alice", "password": "long enough pass", "role": "operator"})
    assert created.status_code == 201 and created.headers["location"] == f"{USERS}/alice"
    assert created.json()["role"] == "operator" and "password" not in created.text
    assert [u["name"] for u in (await client.get(USERS)).json()["users"]] == ["alice"]
    assert (await client.get(f"{USERS}/alice")).json()["last_login_at"] is None
    await client.post(USERS, json={"name": "bob", "password": "long enough pass", "role": "admin"})
    assert (await client.put(f"{USERS}/alice/role", json={"role": "admin"})).json()["role"] == "admin"
    assert (await client.put(f"{USERS}/alice/password", json={"password": "another long pass"})).status_code == 200
    disabled = await client.post(f"{USERS}/alice/disable")
    assert disabled.json()["disabled"] is True, disabled.text
    assert (await client.post(f"{USERS}/alice/enable")).json()["disabled"] is False
    assert (await client.delete(f"{USERS}/alice")).status_code == 204
    assert await users_now(db) == ["bob:admin:False"]


@pytest.mark.parametrize(("body", "field"), [
    ({"name": "Alice", "password": "long enough pass"}, "name"),
    ({"name": "alice", "password": "short"}, "password"),
    ({"name": "alice", "password": "long enough pass", "role": "root"}, "role"),
    ({"name": "alice", "password": "long enough pass", "extra": 1}, "extra"),
    ({"name": "alice"}, "password"),
])
async def test_bad_input_is_422_in_the_one_shape_and_writes_nothing(client, db, body, field):
    answer = await client.post(USERS, json=body)
    assert answer.status_code == 422, answer.text
    error = answer.json()
    assert error["error"] == "validation_error" and field in str(error["fields"])
    assert "short" not in answer.text or field != "password", "the password is not echoed"
    assert await users_now(db) == []


async def test_conflicts_and_unknown_names(client, db):
    await client.post(USERS, json={"name": "root", "password": "long enough pass", "role": "admin"})
    await client.post(USERS, json={"name": "ops", "password": "long enough pass", "role": "operator"})
    taken = await client.post(USERS, json={"name": "root", "password": "long enough pass"})
    assert (taken.status_code, taken.json()["error"]) == (409, "user_exists")
    for answer in (await client.put(f"{USERS}/root/role", json={"role": "viewer"}),
                   await client.post(f"{USERS}/root/disable"), await client.delete(f"{USERS}/root")):
        assert (answer.status_code, answer.json()["error"]) == (409, "last_admin")
    missing = await client.get(f"{USERS}/nobody")
    assert (missing.status_code, missing.json()["error"]) == (404, "user_not_found")
    assert (await client.get(f"{USERS}/Not%20A%20Name")).status_code == 422
    assert await users_now(db) == ["ops:operator:False", "root:admin:False"]


@pytest.mark.parametrize("role", [Role.VIEWER, Role.OPERATOR])
async def test_a_principal_without_manage_access_gets_403_and_writes_nothing(db, app_ctx, role):
    """The principal is whoever the API's guard resolves (a console user's role here, which no
    bearer carries: `acting_app` has the guard find it)."""
    async with client_for(acting_app(app_ctx, Principal.with_role(PrincipalKind.USER, "someone", role))) as client:
        for answer in (await client.get(USERS),
                       await client.post(USERS, json={"name": "eve", "password": "long enough pass", "role": "admin"})):
            assert answer.status_code == 403, answer.text
            error = answer.json()
            assert error["error"] == "forbidden" and "user:someone may not manage_access" in error["detail"]
    assert await users_now(db) == []
