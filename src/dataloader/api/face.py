"""Which face a request came through, for the audit trail (model/audit.py `through`): the console
under /ui, the HTTP API elsewhere. Pure ASGI, so the context variable it sets reaches the route,
the manager and the transaction that writes the audit row."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from dataloader.model.audit import Face, through


class FaceMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        face = Face.CONSOLE if path == "/ui" or path.startswith("/ui/") else Face.HTTP
        with through(face):
            await self.app(scope, receive, send)
