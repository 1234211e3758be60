"""Which Action an HTTP route needs, checked against the principal in force.

`requires(Action.X)` is a FastAPI dependency: it refuses the request with 403 `forbidden` (the one
error shape) unless `allows(current_principal(), Action.X)`. Who the principal is, is the
authentication middleware's to set (`acting_as`, model/principal.py): until it does, an API
request acts as the library's admin, as the API always has. Each dependency keeps its action
(`action_of`), so a route's need can be read off the app (the route x role matrix, OpenAPI's
`x-dataloader-action`)."""

from __future__ import annotations

from typing import Any

from fastapi import Depends
from fastapi.routing import APIRoute

from dataloader.exceptions import AccessDenied
from dataloader.model.principal import Action, allows, current_principal

_CHECKS: dict[Any, Action] = {}


def _check_of(action: Action) -> Any:
    async def check() -> None:
        principal = current_principal()
        if not allows(principal, action):
            raise AccessDenied(f"{principal.label} may not {action.value.replace('_', ' ')}: its role or scope "
                               "does not allow it (docs/security.md)")

    check.__name__ = f"requires_{action.value}"
    _CHECKS[check] = action
    return check


_BY_ACTION = {action: _check_of(action) for action in Action}


def requires(action: Action) -> Any:
    """`dependencies=[requires(Action.MANAGE_ACCESS)]` on a router or a route."""
    return Depends(_BY_ACTION[action])


def action_of(route: APIRoute) -> Action | None:
    """The Action a route's dependencies require (None: it names none)."""
    for dependency in route.dependant.dependencies:
        if dependency.call in _CHECKS:
            return _CHECKS[dependency.call]
    return None


def extra(action: Action) -> dict[str, Any]:
    """OpenAPI `openapi_extra=` saying which action a route needs."""
    return {"x-dataloader-action": action.value}
