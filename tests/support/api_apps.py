"""The HTTP app of an open App, built once per App and worker manager and reused by every test
that asks for it with the same pair.

FastAPI builds an app's routes on its first request (each route's parameters, body and response
models): about 0.1 s of CPU per app. Several hundred tests that each built their own app around the
same session-wide App spent about a minute of the suite's CPU on it. An app holds no per-request
state of its own (its limits and pools live in the App), so one built app serves them all."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataloader.api import create_app

if TYPE_CHECKING:
    from fastapi import FastAPI

    from dataloader.app import App
    from dataloader.workers.manager import WorkerManager

_BUILT: dict[tuple[int, int], tuple[App, WorkerManager | None, FastAPI]] = {}


def api_for(context: App, manager: WorkerManager | None = None) -> FastAPI:
    """`create_app(context.settings, context=context, manager=manager)`, built once for the pair."""
    key = (id(context), id(manager))
    found = _BUILT.get(key)
    # the objects themselves are kept, so an id reused by a later App cannot return a stale app
    if found is None or found[0] is not context or found[1] is not manager:
        found = (context, manager, create_app(context.settings, context=context, manager=manager))
        _BUILT[key] = found
    return found[2]
