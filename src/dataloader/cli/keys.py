"""Encryption at rest (docs/security.md "Encryption at rest"): `dataloader keys status|rotate|generate`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from dataloader.cli.common import _print, _with_app

if TYPE_CHECKING:
    from dataloader.app import App

keys_app = typer.Typer(help="Encryption keys: status (the keys held, what each still seals), rotate (re-encrypt "
                            "every stored payload under the first key of DL_ENCRYPTION_KEYS), generate a key.",
                       no_args_is_help=True)


@keys_app.command("status")
def keys_status() -> None:
    """The keys of DL_ENCRYPTION_KEYS in order (the first encrypts) with the stored envelopes under each,
    per payload column, and `stale`: what a rotation still has to rewrite."""

    async def run(app: App) -> dict[str, Any]:
        return (await app.keys.status()).to_dict()

    _print(_with_app(run))


@keys_app.command("rotate")
def keys_rotate(batch_size: Annotated[int, typer.Option(help="Rows examined per statement (1..10000)")] = 500
                ) -> None:
    """Re-encrypt every stored payload under the current key, in batches. Stopped, it resumes when run
    again (what it rewrote is current and skipped); afterwards `keys status` shows stale 0."""
    from dataloader.encryption.keys import check_batch_size

    size = check_batch_size(batch_size)  # before any connection: exit 2, nothing written

    async def run(app: App) -> dict[str, Any]:
        return (await app.keys.rotate(batch_size=size)).to_dict()

    _print(_with_app(run))


@keys_app.command("generate")
def keys_generate(kid: Annotated[str, typer.Argument(help="The new key's id, e.g. k2")]) -> None:
    """Print a new random key as DL_ENCRYPTION_KEYS takes it (`kid:base64`): put it FIRST in the list on
    every node, keep the old ones after it until a rotation is done."""
    from dataloader.model.payload_crypto import KeyRing, generate_key

    entry = f"{kid}:{generate_key()}"
    KeyRing.from_text(entry)  # the kid's rules, checked as the service will check them
    typer.echo(entry)
