"""API tokens (docs/security.md "Tokens and scopes"): every token with its scopes, state and last
use; a form that creates one and answers a page showing its secret once (no redirect: a notice would
carry the secret in a cookie); revoke, asked first. Every route needs `manage_access` of the
principal the console acts for (ui/actions.py ROUTE_ACTIONS; /api/v1/tokens needs the same)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dataloader.model.api_token import DEFAULT_EXPIRES_IN_SEC, MAX_EXPIRES_IN_SEC
from dataloader.model.principal import Action, Scope
from dataloader.ui import render
from dataloader.ui.actions import action_form, ask, back, confirmed, require

NAV = ("Tokens", "/tokens")
TOPICS: dict = {}
DEFAULT_DAYS = int(DEFAULT_EXPIRES_IN_SEC // 86400)
MAX_DAYS = int(MAX_EXPIRES_IN_SEC // 86400)


async def _page(request: Request, *, created: Any = None, status: int = 200) -> Response:
    tokens = await request.app.state.console.app().tokens.list()
    now = datetime.now(UTC)
    rows = [{"token": t, "state": t.state(now)} for t in tokens]
    return render.page(request, "tokens.html", status=status, rows=rows, created=created,
                       scopes=[s.value for s in Scope], default_days=DEFAULT_DAYS, max_days=MAX_DAYS)


async def listing(request: Request) -> Response:
    require(Action.MANAGE_ACCESS)  # a POST's action is action_form's (ui/actions.py ROUTE_ACTIONS)
    return await _page(request)


async def create(request: Request) -> Response:
    """The capability's own rules (a bad name, no scope, an expiry out of bounds) are its error page."""
    form = await action_form(request)
    days = form.get("expires_days", "").strip() or str(DEFAULT_DAYS)
    created = await request.app.state.console.app().tokens.create(
        name=form.get("name", ""), scopes=form.getlist("scope"), expires_in=f"{days}d")
    return await _page(request, created=created, status=201)


async def revoke(request: Request) -> Response:
    """Destructive (whatever holds the token stops working): asks first (ui/actions.py)."""
    form = await action_form(request)
    token_id = request.path_params["token_id"]
    tokens = request.app.state.console.app().tokens
    if not confirmed(form):
        token = await tokens.get(token_id)  # an unknown id is its error page, not a question
        return ask(request, form, question=f"Revoke token {token.name}?", button="Revoke the token",
                   consequence=f"Whatever holds it ({', '.join(s.value for s in token.scopes)}) gets 401 from its next "
                               "request on this node, within 5 s on every other. It cannot be undone: create a "
                               "new token instead.", keep="/tokens")
    token = await tokens.revoke(token_id)
    return back(request, form, "/tokens", f"Token {token.name} revoked: it is refused from now on.")


routes = [Route("/tokens", listing, methods=["GET"]), Route("/tokens", create, methods=["POST"]),
          Route("/tokens/{token_id:uuid}/revoke", revoke, methods=["POST"])]
