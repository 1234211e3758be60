"""What every action (a POST from a console form) goes through: read-only mode, the CSRF check, a
confirmation step for the destructive ones, and the answer: a redirect back to the page the form
was on (POST/redirect/GET, so a reload never repeats an action) carrying what was done (ui/notice.py).

Confirmation: a destructive action (the console's red buttons: cancel or delete a job, start a bulk
operation, cancel an operation, stop an observer) does nothing unless its form says `confirm=yes`.
The button's own form does not: its POST answers a page that says what will happen, with the same
fields and `confirm=yes` behind a second button. Plain forms, so it works without JavaScript, and
the guard is on the server, so no request (a script, a stale tab, a double click) skips it."""

from __future__ import annotations

from starlette.datastructures import ImmutableMultiDict
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from dataloader.ui import auth, notice, render

CONFIRM_FIELD = "confirm"
CONFIRMED = "yes"


async def action_form(request: Request) -> ImmutableMultiDict[str, str]:
    """The form of an action, checked; Forbidden in read-only mode or without a matching CSRF token.
    `form.get(name)` is a field, `form.getlist(name)` a repeated one."""
    if request.app.state.console.settings.ui_read_only:
        raise auth.Forbidden("the console is read-only (DL_UI_READ_ONLY)")
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
