"""API tokens for machines (docs/security.md "Tokens and scopes"): `dataloader tokens create|list|revoke`.

The CLI acts as the OS user that runs it (it holds the database's credentials, so it may do
anything; `created_by` says `cli:<user>`). `create` prints the token with its secret, the one time
the secret is shown; a note on stderr says so, so a script that keeps stdout keeps only the JSON."""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dataloader.cli.common import _print, _with_app
from dataloader.model.api_token import DEFAULT_EXPIRES_IN_SEC

if TYPE_CHECKING:
    from dataloader.app import App

tokens_app = typer.Typer(help="API tokens for machines: create (the secret is shown once), list, revoke.",
                         no_args_is_help=True)


def _cli_principal() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no name for this uid (a container's arbitrary user)
        return "cli:unknown"


def _view(token: Any) -> dict[str, Any]:
    from datetime import UTC, datetime

    return {**token.to_dict(), "state": token.state(datetime.now(UTC))}


@tokens_app.command("create")
def tokens_create(
    name: Annotated[str, typer.Option(help="Unique among tokens not revoked: a-z, 0-9, . _ - (e.g. ci-deploy)")],
    scope: Annotated[list[str], typer.Option(help="enqueue, read, operate or admin; repeat for several")],
    expires_in: Annotated[str, typer.Option(help="Until it stops working: seconds or 90d, 12h (60 s to 730 d)")
                          ] = f"{int(DEFAULT_EXPIRES_IN_SEC // 86400)}d",
) -> None:
    """Create a token and print it with its secret (`secret`): shown this once, never stored."""
    from dataloader.tokens.manager import TokenManager

    # The capability's own check, before the database is opened: its error is the CLI's line.
    spec = TokenManager.spec(name=name, scopes=scope, expires_in=expires_in)

    async def run(app: App) -> dict[str, Any]:
        created = await app.tokens.create(spec, created_by=_cli_principal())
        return {**_view(created.token), "secret": created.secret}

    _print(_with_app(run))
    typer.echo("dataloader: the secret is shown only now: store it (Authorization: Bearer <secret>)", err=True)


@tokens_app.command("list")
def tokens_list(
    include_revoked: Annotated[bool, typer.Option("--include-revoked/--active-only",
                                                  help="Also list revoked tokens")] = True,
) -> None:
    """Tokens, newest first, without their secrets (which are never stored)."""

    async def run(app: App) -> list[dict[str, Any]]:
        return [_view(t) for t in await app.tokens.list(include_revoked=include_revoked)]

    _print(_with_app(run))


@tokens_app.command("revoke")
def tokens_revoke(token: Annotated[str, typer.Argument(help="The token's id, or its name")]) -> None:
    """Revoke a token: every node refuses it within 5 s (the one that revoked it at once)."""

    async def run(app: App) -> dict[str, Any]:
        return _view(await app.tokens.revoke(token))

    _print(_with_app(run))
