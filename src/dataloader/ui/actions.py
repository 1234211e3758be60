"""What every action (a POST from a console form) goes through: read-only mode, the CSRF check, and
the answer, a redirect back to the page the form was on (POST/redirect/GET, so a reload never
repeats an action)."""

from __future__ import annotations

from starlette.datastructures import ImmutableMultiDict
from starlette.requests import Request
from starlette.responses import RedirectResponse

from dataloader.ui import auth


async def action_form(request: Request) -> ImmutableMultiDict[str, str]:
    """The form of an action, checked; Forbidden in read-only mode or without a matching CSRF token.
    `form.get(name)` is a field, `form.getlist(name)` a repeated one."""
    if request.app.state.console.settings.ui_read_only:
        raise auth.Forbidden("the console is read-only (DL_UI_READ_ONLY)")
    return await auth.checked_form(request)


def back(request: Request, form: ImmutableMultiDict[str, str], default: str) -> RedirectResponse:
    """303 to the form's `back` field when it is a console path, else to `default` (under /ui)."""
    root = request.scope.get("root_path", "")
    target = form.get("back", "")
    if not safe_local(target, root):
        target = root + default
    return RedirectResponse(target, status_code=303)


def safe_local(target: str, root: str) -> bool:
    """A path under the console: no scheme, no host (`//evil`), no backslash tricks."""
    return (target.startswith(root + "/") and not target.startswith("//") and "\\" not in target
            and "\n" not in target and "\r" not in target)
