"""The FastAPI application: routes (v1, os_router, metric_router), middleware, error handlers, and
the lifespan that opens the App and runs its workers next to the HTTP server."""

from __future__ import annotations

import copy
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel

from dataloader.api import metric_router, os_router
from dataloader.api.access import guard_routes, openapi_security, resolve
from dataloader.api.middleware import (
    ApiGuardMiddleware,
    OneSegmentPaths,
    RequestContextMiddleware,
    flat_routes,
)
from dataloader.api.runtime import Runtime
from dataloader.api.v1.archive_router import router as archive_router
from dataloader.api.v1.audit_router import router as audit_router
from dataloader.api.v1.chains_router import router as chains_router
from dataloader.api.v1.encryption_router import router as encryption_router
from dataloader.api.v1.exceptions import install_exception_handlers
from dataloader.api.v1.observers_router import nodes_router
from dataloader.api.v1.observers_router import router as observers_router
from dataloader.api.v1.operations_router import router as operations_router
from dataloader.api.v1.processes_router import router as processes_router
from dataloader.api.v1.queues_router import router as queues_router
from dataloader.api.v1.router import router as v1_router
from dataloader.api.v1.schedules_router import router as schedules_router
from dataloader.api.v1.stats_router import router as stats_router
from dataloader.api.v1.storage_router import router as storage_router
from dataloader.api.v1.tokens_router import router as tokens_router
from dataloader.api.v1.users_router import router as users_router
from dataloader.api.v1.workflows_router import router as workflows_router
from dataloader.auth_throttle import AuthThrottle
from dataloader.config import Settings
from dataloader.heap import freeze_startup_objects
from dataloader.model.principal import Principal
from dataloader.ui import console_app
from dataloader.version import __version__

if TYPE_CHECKING:
    from dataloader.app import App
    from dataloader.workers.manager import WorkerManager

log = logging.getLogger("dataloader.api")

# Room for the other fields of a trigger body and for JSON that is pretty-printed or escaped
# differently from how the service measures args.
BODY_OVERHEAD_BYTES = 64 * 1024


ROUTERS = (v1_router, schedules_router, stats_router, processes_router, chains_router, workflows_router,
           operations_router, observers_router, nodes_router, queues_router, archive_router, storage_router,
           users_router, tokens_router, audit_router, encryption_router, os_router.router, metric_router.router)


def register_routers(app: FastAPI) -> None:
    """The routers' routes, added to the app as they are. Each router built its routes once, at
    import, with its prefix, tags and dependencies applied; `include_router` would wrap each router
    for the app and build every route again on the app's first request (about 0.1 s of CPU per app:
    a node's start, every app a test builds)."""
    for router in ROUTERS:
        guard_routes(router.routes)  # each /api/v1 route refuses a principal without its action (access.py)
        app.router.routes.extend(router.routes)


_BOUNDS = ("maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum")


def _models_by_name() -> dict[str, type[BaseModel]]:
    """dataloader's pydantic models by class name (the names FastAPI gives their components); a
    name two models share is left out (its component is not named after either alone)."""
    found: dict[str, type[BaseModel] | None] = {}
    stack: list[type[BaseModel]] = [BaseModel]
    while stack:
        for sub in stack.pop().__subclasses__():
            stack.append(sub)
            if sub.__module__.startswith("dataloader.") and "[" not in sub.__name__:
                found[sub.__name__] = None if sub.__name__ in found and found[sub.__name__] is not sub else sub
    return {name: model for name, model in found.items() if model is not None}


def _copy_exact_bounds(ours: Any, exact: Any) -> None:
    """Where `ours` (FastAPI's component) holds a bound as a float and `exact` (pydantic's schema of
    the same model) holds it as an int, take the int."""
    if isinstance(ours, dict) and isinstance(exact, dict):
        for key in _BOUNDS:
            if isinstance(ours.get(key), float) and isinstance(exact.get(key), int) and not isinstance(
                    exact.get(key), bool):
                ours[key] = exact[key]
        for key, value in ours.items():
            if key in exact and key not in _BOUNDS:
                _copy_exact_bounds(value, exact[key])
    elif isinstance(ours, list) and isinstance(exact, list) and len(ours) == len(exact):
        for a, b in zip(ours, exact, strict=True):
            _copy_exact_bounds(a, b)


def exact_integer_bounds(schema: dict[str, Any]) -> None:
    """FastAPI's OpenAPI model holds `maximum`/`minimum` as floats, so a component's integer bound
    is written `4.611686018427388e+18` for 2^62 - 1: a float, read as a decimal above the bound the
    server enforces. Put back the exact integers of the models' own schemas; an integer
    bound left a float after that (a model not found) becomes the int it spells when it is whole."""
    models = _models_by_name()
    for name, component in schema.get("components", {}).get("schemas", {}).items():
        model = models.get(name.removesuffix("-Input").removesuffix("-Output"))
        if model is not None:
            mode = "serialization" if name.endswith("-Output") else "validation"
            _copy_exact_bounds(component, model.model_json_schema(mode=mode))
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "integer":
                for key in _BOUNDS:
                    if isinstance(node.get(key), float) and node[key].is_integer():
                        node[key] = int(node[key])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


_SCHEMAS: dict[tuple[Any, bool], dict[str, Any]] = {}


def _declare_auth(app: FastAPI, settings: Settings) -> None:
    """The OpenAPI schema with the bearer scheme, each route's action and scopes, and its 401 and
    403 (api/access.py `openapi_security`): a bearer is required when DL_API_TOKEN is set, and
    optional otherwise (the API is open until an API token exists)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        # Building the schema costs about 1.3 s of CPU, and it depends only on the routes and on
        # whether a token is set (the models are the modules'): a process that builds several apps
        # (the API App beside the engine's, tests) builds it once per kind and copies it.
        key = (tuple((getattr(route, "path", ""), tuple(sorted(getattr(route, "methods", None) or ())))
                     for route in flat_routes(app.routes)),
               bool(settings.api_token))
        if key in _SCHEMAS:
            app.openapi_schema = copy.deepcopy(_SCHEMAS[key])
            return app.openapi_schema
        schema = build()
        exact_integer_bounds(schema)
        openapi_security(schema, admin_token_set=bool(settings.api_token))
        _SCHEMAS[key] = copy.deepcopy(schema)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(settings: Settings, *, context: App | None = None,
               manager: WorkerManager | None = None) -> FastAPI:
    """Build the app.

    Without `context`, the app owns its resources: start-up opens an App (the embedded PostgreSQL
    when DL_DB_DSN is unset, migrating the schema) and runs its workers for WORKERS_JSON; shutdown
    stops the workers (draining running jobs up to DL_SHUTDOWN_TIMEOUT_SEC) and closes the App.
    With `context` (an open App: tests, embedding in your own program; `await engine.api_app()`
    gives one with the API's own pool and limits), the app uses it and the given `manager` (None:
    workers of `app.running()` if any) and leaves opening and closing them to the caller.
    """
    runtime = Runtime(settings=settings, app=context, manager=manager)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if context is not None:
            yield
            return
        from dataloader.app import App

        app = App(settings, embedded=True)
        await app.open(migrate_schema=True)
        api: App | None = None
        try:
            # Requests run on an App of their own (its own pool, bounded statements): the engine's
            # connections are never lent to a request (docs/operations.md "Limits of the HTTP API").
            api = await app.api_app()
            async with app.running() as workers:
                runtime.app, runtime.manager = api, workers
                freeze_startup_objects()
                log.info("service ready", extra={"node": settings.node_name,
                                                 "queues": [w.queue for w in settings.workers]})
                try:
                    yield
                finally:
                    log.info("shutting down: draining workers")
        finally:
            runtime.app = runtime.manager = None
            if api is not None:
                await api.close()
            await app.close()

    # FastAPIOffline is FastAPI whose /docs and /redoc load Swagger UI and ReDoc from files shipped
    # in its wheel (mounted at /static-offline-docs) instead of a CDN, so they work offline.
    app = FastAPIOffline(
        title="dataloader",
        version=__version__,
        description="Durable background jobs on PostgreSQL. See docs/http-api.md.",
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    _declare_auth(app, settings)
    install_exception_handlers(app)
    register_routers(app)
    # Wrong tokens per client address, one count for the API's bearer and the console's login.
    throttle = AuthThrottle(settings.auth_max_failures, settings.auth_failure_window_sec)
    if settings.ui_enabled:
        # The operator's console (docs/console.md): its own auth (a login page that takes
        # DL_API_TOKEN), reading and acting through the same App as the routes above.
        app.mount("/ui", console_app(settings, lambda: runtime.app, throttle), name="ui")
    app.add_middleware(OneSegmentPaths)  # innermost: only routing reads the path it rewrites
    # Added last = outermost: the request id must be set before anything else logs.
    async def who(method: str, path: str, authorization: str | None, address: str | None) -> Principal:
        return await resolve(runtime, method, path, authorization, address)

    app.add_middleware(ApiGuardMiddleware, resolve=who,
                       max_body_bytes=2 * settings.max_args_bytes + BODY_OVERHEAD_BYTES,
                       body_timeout_sec=settings.api_body_timeout_sec, throttle=throttle)
    app.add_middleware(RequestContextMiddleware)
    return app
