"""Templates: one Jinja2 environment with autoescaping on for every template (job args, errors,
process events and names are data, never markup), the filters pages share, and `page()`, which
renders a page with what the layout needs (navigation, CSRF token, who acts and what they may do,
the notice of the action that led here: ui/notice.py).

`can` is what a template asks before it shows a form: `{% if can.operate %}` is
`allows(principal, Action.OPERATE)` for the principal in force (ui/console.py's guard). The same
question is asked again, on the server, by every action's POST (ui/actions.py), so a hidden button
and a refused forged request are one rule.

Times are rendered as `<time datetime=… title="… UTC">` in UTC; static/console.js rewrites the text
into the browser's zone and keeps UTC on hover."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from dataloader.logger.utils import mask
from dataloader.model.principal import Action, current_principal
from dataloader.ui import auth, notice

TEMPLATES = Path(__file__).parent / "templates"


def when(value: datetime | None) -> Markup:
    if value is None:
        return Markup("—")
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        utc = value.astimezone(UTC)
        text = utc.strftime("%Y-%m-%d %H:%M:%S")
        stamp = utc.isoformat().replace("+00:00", "Z")
    except (OverflowError, ValueError):  # ±infinity and the edges of the calendar
        return Markup("<time>{}</time>").format(str(value))
    return Markup('<time datetime="{}" title="{} UTC">{} UTC</time>').format(stamp, text, text)


def age(seconds: float | None) -> str:
    """A duration an operator reads at a glance: 45 s, 12 min, 3.5 h, 2.1 d."""
    if seconds is None or not math.isfinite(seconds):
        return "—"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def masked_json(value: Any) -> str:
    """Args and results as an operator reads them: pretty JSON with secrets masked as in logs."""
    return json.dumps(mask(value), indent=2, ensure_ascii=False, sort_keys=True, default=str)


def build_environment() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(default=True,
                      default_for_string=True), undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(when=when, age=age, masked_json=masked_json)
    env.globals["escape"] = escape
    return env


ENVIRONMENT = build_environment()


# Action value -> whether the principal may: what templates read as `can.operate`, `can.delete`.
Can = dict[str, bool]


def can_for(actions: frozenset[Action]) -> Can:
    return {action.value: action in actions for action in Action}


def can_of(request: Request) -> Can:
    """What the principal this request acts as may do (the guard put it in force)."""
    return can_for(current_principal().actions)


# Pages only an admin's navigation shows (their routes refuse everybody else anyway).
ADMIN_PAGES = {"/users": Action.MANAGE_ACCESS, "/tokens": Action.MANAGE_ACCESS, "/keys": Action.MANAGE_ACCESS,
               "/audit": Action.READ_AUDIT}


def base_context(request: Request) -> dict[str, Any]:
    console = request.app.state.console
    principal = current_principal()
    nav = [(title, path) for title, path in console.nav
           if path not in ADMIN_PAGES or ADMIN_PAGES[path] in principal.actions]
    return {"request": request, "root": request.scope.get("root_path", ""), "nav": nav,
            "read_only": console.settings.ui_read_only, "csrf": auth.csrf_token(request),
            "can": can_for(principal.actions), "signed_in": auth.signed_in(request),
            "principal_shown": auth.shown(request),
            "current": request.url.path, "notice": notice.pending(request)}


def fragment(name: str, **context: Any) -> str:
    return ENVIRONMENT.get_template(name).render(**context)


def page(request: Request, template: str, *, status: int = 200, **context: Any) -> HTMLResponse:
    base = base_context(request)
    html = ENVIRONMENT.get_template(template).render(**base, **context)
    response = HTMLResponse(html, status_code=status)
    if base["notice"] is not None:  # shown once: the next page does not repeat it
        notice.clear(request, response)
    fresh = auth.new_csrf_cookie(request)
    if fresh is not None:
        response.set_cookie(auth.CSRF_COOKIE, fresh, **auth.cookie_options(request))  # type: ignore[arg-type]
    return response
