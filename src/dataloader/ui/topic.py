"""A live topic: what a page subscribes to over /ui/live, and how the shared poll renders it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dataloader.app import App


def no_argument(arg: str) -> bool:
    return arg == ""


@dataclass(frozen=True)
class Topic:
    """`render(app, arg, root, can)` gives the fragment's HTML (shared by every browser whose
    principal may do the same actions, `can` as templates read it: ui/render.py; so it holds no
    per-browser value: forms in it get their CSRF token from the page, static/console.js);
    `accepts(arg)` checks the part after `name:` before anybody subscribes."""

    render: Callable[[App, str, str, dict[str, bool]], Awaitable[str]]
    accepts: Callable[[str], bool] = no_argument
