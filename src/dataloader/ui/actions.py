"""What every action (a POST from a console form) goes through: the role check, the CSRF check, a
confirmation step for the destructive ones, and the answer: a redirect back to the page the form
was on (POST/redirect/GET, so a reload never repeats an action) carrying what was done (ui/notice.py).

Confirmation: a destructive action (the console's red buttons: cancel or delete a job, start a bulk
operation, cancel an operation, stop an observer) does nothing unless its form says `confirm=yes`.
The button's own form does not: its POST answers a page that says what will happen, with the same
fields and `confirm=yes` behind a second button. Plain forms, so it works without JavaScript, and
the guard is on the server, so no request (a script, a stale tab, a double click) skips it.

Roles: `ROUTE_ACTIONS` names the one `Action` each console POST route needs (model/principal.py
says which role has it). `action_form` refuses the request (403 page, nothing read, nothing
written) unless the principal in force `allows` it; the templates show a form only under the same
`can.<action>` (ui/render.py), and tests/ui/test_roles.py checks the two agree for every route and
role. A POST route missing from the table is refused for everybody: a new action must be named
here before anyone can use it. DL_UI_READ_ONLY is the same check: the guard caps every principal
at a viewer's actions (ui/auth.py)."""

from __future__ import annotations

from starlette.datastructures import ImmutableMultiDict
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from dataloader.model.principal import Action, allows, current_principal
from dataloader.ui import auth, notice, render

CONFIRM_FIELD = "confirm"
CONFIRMED = "yes"

_STATE = ("pause", "resume", "cancel")
_PROCESS = "/processes/{ns}/{process_id:path}"
_SCHEDULE = "/schedules/{name}"
# Every console POST route (as the page module declares it, relative to /ui) -> the Action it needs.
ROUTE_ACTIONS: dict[str, Action] = {
    "/jobs/{job_id:uuid}/cancel": Action.OPERATE,
    "/jobs/{job_id:uuid}/retry": Action.OPERATE,
    "/jobs/{job_id:uuid}/priority": Action.OPERATE,
    "/jobs/{job_id:uuid}/delete": Action.DELETE,
    "/queues/pause": Action.OPERATE,
    "/queues/resume": Action.OPERATE,
    "/queues/limits": Action.CONFIGURE,
    "/bulk": Action.OPERATE,  # a bulk delete needs DELETE as well (pages/bulk.py)
    **{f"/operations/{{operation_id:uuid}}/{name}": Action.OPERATE for name in _STATE},
    "/observers/stop": Action.CONFIGURE,
    _PROCESS + "/repair": Action.OPERATE,
    _PROCESS + "/simple-repair": Action.OPERATE,
    _PROCESS + "/restart": Action.OPERATE,
    _SCHEDULE + "/pause": Action.CONFIGURE,
    _SCHEDULE + "/resume": Action.CONFIGURE,
    _SCHEDULE + "/trigger": Action.ENQUEUE,
    "/workflows/{run_id:uuid}/cancel": Action.OPERATE,
    "/workflows/{run_id:uuid}/signal": Action.ENQUEUE,
    "/workflows/{run_id:uuid}/restart": Action.OPERATE,
    "/workflows/bulk": Action.OPERATE,
    "/users": Action.MANAGE_ACCESS,
    "/users/{name}/role": Action.MANAGE_ACCESS,
    "/users/{name}/password": Action.MANAGE_ACCESS,
    "/users/{name}/disable": Action.MANAGE_ACCESS,
    "/users/{name}/enable": Action.MANAGE_ACCESS,
    "/users/{name}/delete": Action.MANAGE_ACCESS,
    "/tokens": Action.MANAGE_ACCESS,
    "/tokens/{token_id:uuid}/revoke": Action.MANAGE_ACCESS,
    "/keys/rotate": Action.MANAGE_ACCESS,
}
# POSTs that are no action of anybody's: signing in and out.
OPEN_POSTS = frozenset({"/login", "/logout"})


def route_action(request: Request) -> Action | None:
    """The Action this request's route needs; None for a route the table does not name."""
    route = request.scope.get("route")
    return ROUTE_ACTIONS.get(getattr(route, "path", ""))


def require(action: Action) -> None:
    """Forbidden unless the principal in force may do `action`."""
    principal = current_principal()
    if not allows(principal, action):
        raise auth.Forbidden(f"{principal.label} may not {action.value.replace('_', ' ')}: "
                             "the role does not allow it (docs/security.md)")


async def action_form(request: Request) -> ImmutableMultiDict[str, str]:
    """The form of an action, checked; Forbidden when the principal's role may not do the route's
    action (before the body is read) or without a matching CSRF token. `form.get(name)` is a
    field, `form.getlist(name)` a repeated one."""
    action = route_action(request)
    if action is None:
        raise auth.Forbidden("this console route names no action (ui/actions.py ROUTE_ACTIONS): refused")
    if request.app.state.console.settings.ui_read_only and not allows(current_principal(), action):
        raise auth.Forbidden("the console is read-only (DL_UI_READ_ONLY)")
    require(action)
    return await auth.checked_form(request)


def confirmed(form: ImmutableMultiDict[str, str]) -> bool:
    return form.get(CONFIRM_FIELD) == CONFIRMED


def ask(request: Request, form: ImmutableMultiDict[str, str], *, question: str, consequence: str, button: str,
        keep: str) -> Response:
    """The confirmation page of a destructive action: nothing is done yet. Its form posts the same
    fields again with `confirm=yes`; "keep" goes back to `keep` (a path under the console)."""
    root = request.scope.get("root_path", "")
    fields = [(name, value) for name, value in form.multi_items() if name not in (auth.CSRF_FIELD, CONFIRM_FIELD)]
    target = form.get("back", "")
    return render.page(request, "confirm.html", question=question, consequence=consequence, button=button,
                       action=request.url.path, fields=fields, confirm_field=CONFIRM_FIELD, confirm_value=CONFIRMED,
                       keep=target if safe_local(target, root) else root + keep)


def back(request: Request, form: ImmutableMultiDict[str, str], default: str, said: str | None = None) -> Response:
    """303 to the form's `back` field when it is a console path, else to `default` (under /ui),
    with `said` (what the action did) shown on that page."""
    root = request.scope.get("root_path", "")
    target = form.get("back", "")
    return go(request, target if safe_local(target, root) else root + default, said)


def go(request: Request, target: str, said: str | None = None) -> Response:
    """303 to `target` (a full console path), showing `said` there."""
    response = RedirectResponse(target, status_code=303)
    if said:
        notice.put(request, response, said)
    return response


def to(request: Request, path: str, said: str | None = None) -> Response:
    """303 to `path` under the console's root, showing `said` there."""
    return go(request, request.scope.get("root_path", "") + path, said)


def safe_local(target: str, root: str) -> bool:
    """A path under the console: no scheme, no host (`//evil`), no backslash tricks."""
    return (target.startswith(root + "/") and not target.startswith("//") and "\\" not in target
            and "\n" not in target and "\r" not in target)
