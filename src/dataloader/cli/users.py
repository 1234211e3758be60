"""Console users (docs/security.md): `dataloader users add|list|set-role|passwd|disable|enable|delete`.

A password is never an argument (it would sit in the shell's history and in `ps`): it is asked for
at a prompt (twice, hidden), or read as one line from stdin with `--password-stdin` for scripts.
Names, roles and passwords are checked by the model's rules (model/user.py) before the database is
opened, so bad input is one line and exit 2, as every command's."""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dataloader.cli.common import _print, _with_app
from dataloader.exceptions import ValidationFailed
from dataloader.model import user as rules

if TYPE_CHECKING:
    from dataloader.app import App
    from dataloader.model.user import User

users_app = typer.Typer(help="Console users and their roles: add, list, set-role, passwd, disable, enable, delete.",
                        no_args_is_help=True)

Name = Annotated[str, typer.Argument(help="The user's name: a-z, 0-9, '.', '_', '@', '-' (lower case)")]
PasswordStdin = Annotated[bool, typer.Option("--password-stdin",
                                             help="Read the password as one line from stdin (no prompt)")]


def _view(user: User) -> dict[str, Any]:
    return {**dataclasses.asdict(user), "role": user.role.value}


def _password(from_stdin: bool) -> str:
    """The password, checked by the rules (never echoed, never an argument)."""
    if from_stdin:
        line = sys.stdin.readline()
        given = line[:-1] if line.endswith("\n") else line
        given = given[:-1] if given.endswith("\r") else given
    else:
        given = typer.prompt("Password", hide_input=True, err=True)
        if typer.prompt("Again", hide_input=True, err=True) != given:
            raise ValidationFailed("password: the two entries differ",
                                   [{"loc": ["password"], "msg": "the two entries differ", "type": "value_error"}])
    return rules.password(given)


@users_app.command("add")
def users_add(
    name: Name,
    role: Annotated[str, typer.Option(help="viewer, operator or admin")] = "viewer",
    password_stdin: PasswordStdin = False,
) -> None:
    """Add a user who may sign in to the console with the role."""
    name, given_role = rules.user_name(name), rules.role(role)
    password = _password(password_stdin)

    async def run(app: App) -> dict[str, Any]:
        return _view(await app.users.create(name, password, given_role))

    _print(_with_app(run))


@users_app.command("list")
def users_list() -> None:
    """Every user by name, with role, state and last sign-in."""

    async def run(app: App) -> list[dict[str, Any]]:
        return [_view(u) for u in await app.users.list()]

    _print(_with_app(run))


@users_app.command("set-role")
def users_set_role(name: Name, role: Annotated[str, typer.Argument(help="viewer, operator or admin")]) -> None:
    """Change a user's role: it holds from their next console request."""
    name, given_role = rules.user_name(name), rules.role(role)

    async def run(app: App) -> dict[str, Any]:
        return _view(await app.users.set_role(name, given_role))

    _print(_with_app(run))


@users_app.command("passwd")
def users_passwd(name: Name, password_stdin: PasswordStdin = False) -> None:
    """Set a user's password; every console session of theirs ends."""
    name = rules.user_name(name)
    password = _password(password_stdin)

    async def run(app: App) -> dict[str, Any]:
        return _view(await app.users.set_password(name, password))

    _print(_with_app(run))


@users_app.command("disable")
def users_disable(name: Name) -> None:
    """Refuse the user's sign-in and end every session of theirs now (the name stays taken)."""
    name = rules.user_name(name)

    async def run(app: App) -> dict[str, Any]:
        return _view(await app.users.disable(name))

    _print(_with_app(run))


@users_app.command("enable")
def users_enable(name: Name) -> None:
    """Let a disabled user sign in again."""
    name = rules.user_name(name)

    async def run(app: App) -> dict[str, Any]:
        return _view(await app.users.enable(name))

    _print(_with_app(run))


@users_app.command("delete")
def users_delete(name: Name) -> None:
    """Delete a user and every session of theirs."""
    name = rules.user_name(name)

    async def run(app: App) -> dict[str, Any]:
        await app.users.delete(name)
        return {"deleted": name}

    _print(_with_app(run))
