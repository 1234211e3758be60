"""Every dependency of every route is a coroutine function. FastAPI runs a plain `def` dependency
in its thread pool: a hand-off per request that cost a fifth of the event loop's time on
`POST /api/v1/jobs/trigger` (py-spy, bench/README.md). Endpoints themselves are checked too."""

from __future__ import annotations

import inspect

from fastapi.routing import APIRoute

from dataloader.api import create_app
from dataloader.api.middleware import flat_routes
from dataloader.config import Settings


def _calls(dependant) -> list:
    found = [dependant.call] if dependant.call is not None else []
    for sub in dependant.dependencies:
        found.extend(_calls(sub))
    return found


def test_every_route_and_dependency_is_async():
    app = create_app(Settings(db_dsn="postgresql://unused@localhost/unused"))
    sync = set()
    routes = [r for r in flat_routes(app.routes) if isinstance(r, APIRoute)]
    assert len(routes) > 30
    for route in routes:
        for call in _calls(route.dependant):
            if not inspect.iscoroutinefunction(call):
                sync.add(f"{route.path}: {getattr(call, '__qualname__', call)}")
    assert not sync, "runs in the thread pool per request:\n" + "\n".join(sorted(sync))
