"""Every page of the console, in navigation order. A page module has `routes` (Starlette routes,
paths relative to /ui), `NAV` (title and path for the navigation bar, or None) and `TOPICS` (its
live fragments, by name: ui/topic.py)."""

from dataloader.ui.pages import (
    audit,
    bulk,
    errors,
    jobs,
    keys,
    login,
    observers,
    operations,
    overview,
    processes,
    schedules,
    sso,
    storage,
    tokens,
    users,
    workflow_bulk,
    workflows,
)

# workflow_bulk before workflows: its /workflows/bulk is not a run's page
PAGES = (overview, jobs, errors, operations, processes, workflow_bulk, workflows, schedules, observers, storage, users,
         tokens, audit, keys, bulk, login, sso)
