"""Users (docs/security.md), for admins only (Action.MANAGE_ACCESS, the page and every form): who
may sign in, with which role, when they last did; add a user, change a role, set a new password
(which signs the user out everywhere), disable or enable, delete. The rules are app.users'
(users/manager.py): a bad name or a short password is the page's error, the last enabled admin is
kept."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dataloader.model.principal import Action
from dataloader.model.user import PASSWORD_MIN_LENGTH, ROLES
from dataloader.ui import render
from dataloader.ui.actions import action_form, ask, confirmed, require, to

NAV = ("Users", "/users")
TOPICS: dict = {}


async def show(request: Request) -> Response:
    require(Action.MANAGE_ACCESS)  # who may sign in is an admin's to read, as to change
    users = await request.app.state.console.app().users.list()
    return render.page(request, "users.html", users=users, roles=ROLES, min_length=PASSWORD_MIN_LENGTH)


async def add(request: Request) -> Response:
    form = await action_form(request)
    user = await request.app.state.console.app().users.create(form.get("name", "").strip(), form.get("password", ""),
                                                              form.get("role", ""))
    return to(request, "/users", f"User {user.name} added as {user.role.value}.")


async def set_role(request: Request) -> Response:
    form = await action_form(request)
    user = await request.app.state.console.app().users.set_role(request.path_params["name"], form.get("role", ""))
    return to(request, "/users", f"{user.name} is now {user.role.value}: it holds from their next request.")


async def set_password(request: Request) -> Response:
    form = await action_form(request)
    user = await request.app.state.console.app().users.set_password(request.path_params["name"],
                                                                    form.get("password", ""))
    return to(request, "/users", f"New password for {user.name}; every session of theirs is ended.")


async def disable(request: Request) -> Response:
    await action_form(request)
    user = await request.app.state.console.app().users.disable(request.path_params["name"])
    return to(request, "/users", f"{user.name} disabled: signed out everywhere, and may not sign in.")


async def enable(request: Request) -> Response:
    await action_form(request)
    user = await request.app.state.console.app().users.enable(request.path_params["name"])
    return to(request, "/users", f"{user.name} enabled: they may sign in again.")


async def delete(request: Request) -> Response:
    """Destructive (the name is freed, the sessions end): asks first (ui/actions.py)."""
    form = await action_form(request)
    name = request.path_params["name"]
    users = request.app.state.console.app().users
    if not confirmed(form):
        current = await users.get(name)  # an unknown name is its error page, not a question
        return ask(request, form, question=f"Delete user {name}?", button="Delete the user",
                   consequence=f"{current.name} ({current.role.value}) is signed out everywhere and can no longer "
                               "sign in; the name may be given to somebody else.", keep="/users")
    await users.delete(name)
    return to(request, "/users", f"User {name} deleted.")


BASE = "/users/{name}"
routes = [Route("/users", show, methods=["GET"]), Route("/users", add, methods=["POST"]),
          Route(BASE + "/role", set_role, methods=["POST"]), Route(BASE + "/password", set_password, methods=["POST"]),
          Route(BASE + "/disable", disable, methods=["POST"]), Route(BASE + "/enable", enable, methods=["POST"]),
          Route(BASE + "/delete", delete, methods=["POST"])]
