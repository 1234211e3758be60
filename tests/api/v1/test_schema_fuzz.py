"""Property-based fuzzing of every route from the app's own OpenAPI schema, with schemathesis.

For each operation, schemathesis generates requests that follow the schema (positive) and requests
that break it (negative); each is sent to the app and must:
- never get a 5xx;
- get a documented status code, content type and headers, and a body that matches the schema;
- when refused (4xx), leave every `dl_*` table exactly as it was (content, not counts: a refusal that
  overwrote a schedule or an operation's state would keep every count).

Schemathesis is used for generation and validation only. Requests go through httpx.ASGITransport on
the pytest-asyncio session loop, where the app's asyncpg pool lives (schemathesis' own ASGI client
runs apps on a loop thread of its own, and a pool cannot be shared across loops). Only checks that
look at the one response are run; the checks that re-send requests would go through that client.

Time: examples per operation are capped so the module stays well under a minute on a loaded 2-core
machine (hypothesis' deadline is off; the cap, not the clock, bounds it).
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any

import asyncpg
import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from dataloader.api import create_app
from dataloader.api.middleware import flat_routes
from tests.api.v1.conftest import TablesAt, api_settings, next_xid, tables_content
from tests.api.v1.constants import TRIGGER, job_body

BASE_URL = "http://dataloader.test"
CONVERTOR = re.compile(r":\w+}")  # {queue:path} -> {queue}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]
# Per operation and generation mode (160 tests). The suite's run is the short one: every check on
# each example, 15 examples of each (drawing them is most of the module's CPU: 50 cost the suite's
# whole run five minutes of CPU on a 2-core machine). The long run (issue 26; time grows with the count):
#   DL_FUZZ_EXAMPLES=1000 .venv/bin/python -m pytest -q tests/api/v1/test_schema_fuzz.py
EXAMPLES = int(os.environ.get("DL_FUZZ_EXAMPLES", "15"))


def _app_schema() -> schemathesis.BaseSchema:
    # The schema as the app serves it (no DL_API_TOKEN: no auth), built once at collection; the
    # DSN is never used, the app is not started.
    app = create_app(api_settings("postgresql://unused@127.0.0.1:1/unused"))
    return schemathesis.openapi.from_dict(app.openapi())


SCHEMA = _app_schema()
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]


TABLES = TablesAt()


@functools.cache
def strategy(label: str, mode: GenerationMode) -> st.SearchStrategy:
    """The operation's case strategy, built once per operation and mode: building it (the schema
    turned into hypothesis strategies, then validated) cost more CPU than drawing from it, and drawing
    from one built object gives the same cases as rebuilding it for every example."""
    return next(op for op in OPERATIONS if op.label == label).as_strategy(generation_mode=mode)


def _has_input(operation: Any) -> bool:
    return any(len(group) for group in (operation.path_parameters, operation.query, operation.headers,
                                        operation.body))


# Negative cases break a parameter or the body: an operation with neither has none to generate.
CASES = [pytest.param(op, mode, id=f"{op.label}-{mode.value}")
         for op in OPERATIONS for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
         if mode is GenerationMode.POSITIVE or _has_input(op)]


async def send(client: httpx.AsyncClient, case: Any) -> httpx.Response:
    """The case's request (as schemathesis would send it with `requests`) sent with httpx."""
    kwargs = case.as_transport_kwargs(base_url=BASE_URL)
    if "json" in kwargs:
        # The bytes requests would send (json.dumps defaults), not httpx's stricter encoder.
        content: bytes | None = json.dumps(kwargs["json"]).encode()
    else:
        data = kwargs.get("data")
        content = data.encode() if isinstance(data, str) else data
    return await client.request(kwargs["method"], kwargs["url"], headers=kwargs.get("headers"),
                                params=kwargs.get("params") or None, content=content,
                                cookies=kwargs.get("cookies") or None)


def describe(case: Any, response: httpx.Response) -> str:
    return f"{case.as_curl_command()}\n-> {response.status_code} {response.text[:2000]}"


@pytest.fixture(autouse=True)
async def leave_no_schedule_operation_observer_user_or_token(db: asyncpg.Pool, app_ctx: Any) -> Any:
    """What the fuzzed requests created outlives the test in the session's database, and every later
    test's `running()` would act on it: a fuzzed schedule firing every few seconds made four tests of
    other modules count one job too many (its jobs in their queues). A fuzzed API token would close
    the API of every later test (docs/security.md): it goes too, with the App's cache of it."""
    yield
    await db.execute("TRUNCATE dl_schedules, dl_schedule_runs, dl_operations, dl_operation_events, dl_observers, "
                     "dl_api_tokens")
    app_ctx.tokens.forget()
    # a fuzzed user would make every later console test sign in (and its sessions go with it)
    await db.execute("TRUNCATE dl_users CASCADE")


@pytest.fixture
async def job_ids(client: httpx.AsyncClient, db: asyncpg.Pool) -> list[str]:
    """Jobs for the routes of one job to find: one queued (cancel works once, then 409), one done."""
    ids = [(await client.post(TRIGGER, json=job_body(lock_key=f"fuzz-{n}"))).json()["job_id"] for n in range(2)]
    await db.execute("UPDATE dl_jobs SET status = 'succeeded', finished_at = now() WHERE job_id = $1", ids[1])
    return ids


def steer(case: Any, operation: Any, job_ids: list[str], which: int | None) -> Any:
    """Point some cases at real data, so they get past "unknown task" / "no such job" and reach the
    database: a registered task for the trigger, an existing job_id for the routes of one job."""
    if which is None:
        return case
    if operation.label == "POST /api/v1/jobs/trigger" and isinstance(case.body, dict):
        case.body["task"] = "dl.noop"
    elif case.path_parameters and "job_id" in case.path_parameters:
        case.path_parameters["job_id"] = job_ids[which]
    return case


# The app runs no workers here (the `client` fixture), so nothing changes rows behind the test's back.
@pytest.mark.slow  # minutes of CPU in all: left out of the fast tier
@pytest.mark.parametrize(("operation", "mode"), CASES)
@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_every_route_follows_its_schema_and_refusals_write_nothing(client, db, app_ctx, job_ids, operation,
                                                                          mode, data):
    case = data.draw(strategy(operation.label, mode), label="case")
    case = steer(case, operation, job_ids, data.draw(st.none() | st.sampled_from([0, 1]), label="real data"))
    xid, before = await TABLES.read(db)
    response = await send(client, case)
    case.validate_response(response, checks=CHECKS)
    if operation.label == "POST /api/v1/tokens" and response.status_code == 201:
        # A token closes the API (docs/security.md): the next examples would all be 401, and the
        # auth throttle would then refuse the fixtures of the tests after this one.
        await db.execute("DELETE FROM dl_api_tokens")
        app_ctx.tokens.forget()
    # no transaction id taken since the reading: no row written (conftest.next_xid)
    if 400 <= response.status_code < 500 and await next_xid(db) != xid:
        after = await tables_content(db)
        changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
        assert not changed, f"a refused request wrote to {changed}:\n{describe(case, response)}"


def test_the_fuzzed_schema_covers_every_route():
    labels = {op.label for op in OPERATIONS}
    # every route the app serves, counted from its routes (not from the schema under test)
    app = create_app(api_settings("postgresql://unused@127.0.0.1:1/unused"))
    # a path convertor ({queue:path}) is the router's business: the schema names the parameter plainly
    routed = {f"{method} {CONVERTOR.sub('}', route.path)}" for route in flat_routes(app.routes)
              if getattr(route, "include_in_schema", False)
              for method in getattr(route, "methods", ()) if method != "HEAD"}
    assert labels == routed
    assert {"POST /api/v1/jobs/trigger", "POST /api/v1/jobs/{job_id}/retry", "GET /health"} <= labels

