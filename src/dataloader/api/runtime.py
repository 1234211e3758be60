"""What the routes of one app share: settings, the App (`app`), this process's WorkerManager,
and the dependencies that hand them to a request (plus the check that the guard ran: access.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import Depends, Request

from dataloader.api.access import PRINCIPAL_KEY, unauthorized
from dataloader.api.v1.exceptions import ApiError
from dataloader.api.v1.models import ErrorCode
from dataloader.api.v1.service import JobResponses
from dataloader.config import Settings

if TYPE_CHECKING:
    from dataloader.app import App
    from dataloader.workers.manager import WorkerManager


@dataclass
class Runtime:
    settings: Settings
    app: App | None = None
    manager: WorkerManager | None = None

    @property
    def served_queues(self) -> frozenset[str]:
        if self.manager is not None:
            return frozenset(self.manager.queues)
        return self.app.served_queues() if self.app is not None else frozenset()

    def require_app(self) -> App:
        if self.app is None:  # only while the lifespan opens or has closed the App
            raise ApiError(ErrorCode.database_unavailable, "the service is starting or stopping")
        return self.app


# Dependencies are coroutines on purpose: FastAPI runs a plain `def` dependency in its thread pool,
# and that hand-off cost a fifth of the event loop's time per trigger (py-spy, bench/README.md).
async def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime


async def get_job_api(runtime: Runtime = Depends(get_runtime)) -> JobResponses:
    return JobResponses(runtime.require_app().jobs, runtime.served_queues)


async def require_token(request: Request) -> None:
    """Re-checks, on every /api/v1 route, that ApiGuardMiddleware resolved who the request is
    (api/access.py), should the middleware ever be left out: without it a request would otherwise
    run as the library's own admin. The middleware decides first, before the body is read, so an
    unauthenticated caller learns nothing from validation errors. The OpenAPI security is declared
    in create_app (api/access.py `openapi_security`)."""
    if PRINCIPAL_KEY not in request.scope:
        raise unauthorized()
