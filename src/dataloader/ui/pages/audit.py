"""The audit trail (docs/security.md "Audit trail"): who changed what, when, from where and how it
ended, newest first, with a search form over the one filter of every face (model/audit.py
`AuditFilter`: actor, action, target, outcome, since, until) and keyset paging. A filter the
model refuses is said on the page (422), with the form kept as typed."""

from __future__ import annotations

import json
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dataloader.exceptions import DataloaderError, Forbidden
from dataloader.model.audit import AuditFilter
from dataloader.ui import render

NAV = ("Audit", "/audit")
TOPICS: dict = {}
PAGE_SIZE = 100
FIELDS = ("actor", "action", "target", "outcome", "since", "until")


async def show(request: Request) -> Response:
    app = request.app.state.console.app()
    query = request.query_params
    values = {name: query.get(name, "").strip() for name in FIELDS}
    page = problem = None
    try:
        f = AuditFilter.of({k: v for k, v in values.items() if v}, limit=PAGE_SIZE,
                           cursor=query.get("cursor") or None)
        page = await app.audit.search(f)
    except Forbidden:
        raise  # the console's 403 page, as for every action the role lacks
    except DataloaderError as exc:  # the filter the model refuses: said on the page, with the form
        problem = f"{exc.code}: {exc}"
    next_query = urlencode({**{k: v for k, v in values.items() if v}, "cursor": page.next_cursor}) \
        if page and page.next_cursor else ""
    return render.page(request, "audit.html", status=200 if problem is None else 422, values=values,
                       entries=page.entries if page else [], next_query=next_query, problem=problem,
                       details_text=lambda d: json.dumps(d, default=str, sort_keys=True))


routes = [Route("/audit", show, methods=["GET"])]
