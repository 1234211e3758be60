"""What each route of the HTTP API needs: ONE table, (method, route template) -> `Action`.

The API's guard (api/access.py) refuses a request whose principal lacks its route's action with
403 before the body is parsed; the OpenAPI schema documents each route's action and the scopes that
grant it from this table; tests/api/v1/test_route_actions.py fails when a route has no entry (or an
entry names no route). It lives in model/ so the console can ask the same question for the same
operation (`action_for("POST", "/api/v1/jobs/{job_id}/cancel")` is what its cancel button needs),
and the two faces cannot drift apart.

The rules: every GET (and a search, a POST that only reads) is `read`; what adds work (a trigger,
a batch, a process or workflow started, a call, a signal) is `enqueue`; what steers work that
exists (cancel, retry, priority, pause/resume, restart, repair, bulk operations) is `operate`;
what changes how the system runs (limits, schedules, observers, imports) is `configure`; what
removes rows is `delete`; tokens (and users) are `manage_access`."""

from __future__ import annotations

from dataloader.model.principal import Action, Scope, scope_actions

_R, _E, _O, _C, _D, _M = (Action.READ, Action.ENQUEUE, Action.OPERATE, Action.CONFIGURE, Action.DELETE,
                          Action.MANAGE_ACCESS)

HTTP_ACTIONS: dict[tuple[str, str], Action] = {
    # jobs (api/v1/router.py)
    ("POST", "/api/v1/jobs/trigger"): _E,
    ("POST", "/api/v1/jobs/batch"): _E,
    ("GET", "/api/v1/jobs/{job_id}/status"): _R,
    ("POST", "/api/v1/jobs/{job_id}/cancel"): _O,
    ("POST", "/api/v1/jobs/{job_id}/retry"): _O,
    ("PATCH", "/api/v1/jobs/{job_id}"): _O,
    ("DELETE", "/api/v1/jobs/{job_id}"): _D,
    ("GET", "/api/v1/jobs"): _R,
    ("GET", "/api/v1/jobs/{job_id}/events"): _R,
    ("GET", "/api/v1/chains/{chain_id}"): _R,
    ("POST", "/api/v1/search"): _R,
    # schedules
    ("POST", "/api/v1/schedules"): _C,
    ("GET", "/api/v1/schedules"): _R,
    ("GET", "/api/v1/schedules/{name}"): _R,
    ("POST", "/api/v1/schedules/{name}/pause"): _O,
    ("POST", "/api/v1/schedules/{name}/resume"): _O,
    ("DELETE", "/api/v1/schedules/{name}"): _D,
    ("GET", "/api/v1/schedules/{name}/history"): _R,
    # stats and retention
    ("GET", "/api/v1/stats"): _R,
    ("GET", "/api/v1/stats/depths"): _R,
    ("GET", "/api/v1/stats/errors"): _R,
    ("GET", "/api/v1/retention"): _R,
    ("POST", "/api/v1/maintenance/prune"): _D,
    # processes
    ("POST", "/api/v1/processes/{ns}"): _E,
    ("POST", "/api/v1/processes/{ns}/{id}/call"): _E,
    ("POST", "/api/v1/processes/{ns}/{id}/repair"): _O,
    ("POST", "/api/v1/processes/{ns}/{id}/simple-repair"): _O,
    ("POST", "/api/v1/processes/{ns}/{id}/restart"): _O,
    ("POST", "/api/v1/processes/{ns}/restart"): _O,
    ("POST", "/api/v1/processes/{ns}/check"): _O,  # may repair what it finds
    ("GET", "/api/v1/processes/{ns}"): _R,
    ("GET", "/api/v1/processes/{ns}/events"): _R,
    ("GET", "/api/v1/processes/{ns}/events/stream"): _R,
    ("PUT", "/api/v1/processes/{ns}/{id}"): _C,  # an import with a made-up history
    ("GET", "/api/v1/processes/{ns}/{id}"): _R,
    ("DELETE", "/api/v1/processes/{ns}/{id}"): _D,
    ("GET", "/api/v1/processes/{ns}/{id}/trace"): _R,
    # workflows
    ("POST", "/api/v1/workflows"): _E,
    ("GET", "/api/v1/workflows"): _R,
    ("POST", "/api/v1/workflows/bulk/{action}"): _O,
    ("GET", "/api/v1/workflows/{run_id}"): _R,
    ("GET", "/api/v1/workflows/{run_id}/result"): _R,
    # Its credential is the wait token in its path, not a bearer (api/access.py needs_api_token):
    # every caller holding one acts as `wait-token` with `enqueue` only.
    ("POST", "/api/v1/workflows/tokens/{token}"): _E,
    ("POST", "/api/v1/workflows/{run_id}/signals/{name}"): _E,
    ("POST", "/api/v1/workflows/{run_id}/cancel"): _O,
    ("POST", "/api/v1/workflows/{run_id}/restart"): _O,
    # bulk operations (a bulk delete also needs `delete`: api/v1/operations_router.py)
    ("POST", "/api/v1/operations"): _O,
    ("GET", "/api/v1/operations"): _R,
    ("GET", "/api/v1/operations/{operation_id}"): _R,
    ("GET", "/api/v1/operations/{operation_id}/events"): _R,
    ("POST", "/api/v1/operations/{operation_id}/pause"): _O,
    ("POST", "/api/v1/operations/{operation_id}/resume"): _O,
    ("POST", "/api/v1/operations/{operation_id}/cancel"): _O,
    # observers and nodes
    ("POST", "/api/v1/observers"): _C,
    ("GET", "/api/v1/observers"): _R,
    ("GET", "/api/v1/observers/{name}"): _R,
    ("POST", "/api/v1/observers/{name}/stop"): _C,
    ("GET", "/api/v1/nodes"): _R,
    # queues (flow control)
    ("GET", "/api/v1/queues"): _R,
    ("POST", "/api/v1/queues/{queue:dl_queue}/pause"): _O,
    ("POST", "/api/v1/queues/{queue:dl_queue}/resume"): _O,
    ("GET", "/api/v1/queues/{queue:dl_queue}/scaling"): _R,
    ("PATCH", "/api/v1/queues/{queue:dl_queue}/tasks/{task:dl_queue}"): _C,
    ("PATCH", "/api/v1/queues/{queue:dl_queue}"): _C,
    # API tokens (api/v1/tokens_router.py)
    ("POST", "/api/v1/tokens"): _M,
    ("GET", "/api/v1/tokens"): _M,
    ("GET", "/api/v1/tokens/{token}"): _M,
    ("POST", "/api/v1/tokens/{token}/revoke"): _M,
    # console users (api/v1/users_router.py)
    ("POST", "/api/v1/users"): _M,
    ("GET", "/api/v1/users"): _M,
    ("GET", "/api/v1/users/{name}"): _M,
    ("PUT", "/api/v1/users/{name}/role"): _M,
    ("PUT", "/api/v1/users/{name}/password"): _M,
    ("POST", "/api/v1/users/{name}/disable"): _M,
    ("POST", "/api/v1/users/{name}/enable"): _M,
    ("DELETE", "/api/v1/users/{name}"): _M,
    # the history's storage: the journal's partitions, table sizes, the archive
    ("GET", "/api/v1/retention/partitions"): _R,
    ("GET", "/api/v1/storage"): _R,
    ("GET", "/api/v1/archive/jobs/{job_id}"): _R,
    # the audit trail (api/v1/audit_router.py): who did what is for those allowed to read it
    ("GET", "/api/v1/audit"): Action.READ_AUDIT,
    # encryption keys (api/v1/encryption_router.py)
    ("GET", "/api/v1/encryption"): _M,
    ("POST", "/api/v1/encryption/rotate"): _M,
}

# The one route whose credential is its own path (a workflow's wait token), not a bearer.
WAIT_TOKEN_ROUTE = ("POST", "/api/v1/workflows/tokens/{token}")


def action_for(method: str, route: str) -> Action | None:
    """The action a route needs (`route` is its template, as FastAPI names it); None: not in the table."""
    return HTTP_ACTIONS.get((method.upper(), route))


def scopes_granting(action: Action) -> list[Scope]:
    """The token scopes that allow `action`, in Scope's order (for the OpenAPI schema and the docs)."""
    return [scope for scope in Scope if action in scope_actions(scope)]
