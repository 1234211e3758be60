"""Encryption keys (docs/security.md "Encryption at rest"), an admin page: the keys this node holds
in order, the stored envelopes under each, and a button that rotates (re-encrypts everything under
the current key). Both need the manage_access action, as in every face (app.keys refuses)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dataloader.exceptions import EncryptionOff
from dataloader.ui import render
from dataloader.ui.actions import action_form, to

NAV = ("Keys", "/keys")
OFF = "Encryption at rest is off on this node: nothing to rotate (set DL_ENCRYPTION_KEYS)."
TOPICS: dict = {}


async def show(request: Request) -> Response:
    return render.page(request, "keys.html", keys=await request.app.state.console.app().keys.status())


async def rotate(request: Request) -> Response:
    await action_form(request)
    try:
        report = await request.app.state.console.app().keys.rotate()
    except EncryptionOff:
        return to(request, "/keys", OFF)
    unreadable = ", ".join(f"{n} under {kid}" for kid, n in report.unreadable.items())
    return to(request, "/keys", f"Rotation done: {report.total_rewritten} payloads re-encrypted under "
                                f"{report.current} ({report.examined} rows examined)"
                                + (f"; not readable here: {unreadable}" if unreadable else "") + ".")


routes = [Route("/keys", show, methods=["GET"]), Route("/keys/rotate", rotate, methods=["POST"])]
