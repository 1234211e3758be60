"""Promise 11, "every face agrees" (issue 24): the same bad input gets the same error code from the
Python API (the exception's `code`), the HTTP API (the body's `error`) and the CLI (its one line
`dataloader: <code>: ...`, exit code 2 for bad input, 1 for a failed operation), and writes
nothing; the same minimal job enqueued through each face is stored with the same defaults.

A row's face is None where that face cannot say it (the CLI reads every number from text, HTTP has
no `delay`)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from dataloader import App, Settings
from dataloader.api import create_app
from dataloader.config import load_settings
from dataloader.exceptions import INPUT_ERROR_CODES, DataloaderError
from tests.support.api_apps import api_for
from tests.support.cli import error_line, invoke

MAX_ARGS_BYTES = 1000
QUEUE = "faces"


def settings(dsn: str) -> Settings:
    return Settings(db_dsn=dsn, workers=[], max_args_bytes=MAX_ARGS_BYTES, pipeline_modules="tests.support.pipelines",
                    log_format="json")


def cli_env(dsn: str) -> dict[str, str]:
    return {"DL_DB_DSN": dsn, "DL_MAX_ARGS_BYTES": str(MAX_ARGS_BYTES),
            "DL_PIPELINE_MODULES": "tests.support.pipelines", "WORKERS_JSON": json.dumps([{"queue": QUEUE}])}


@pytest.fixture(scope="module")
async def py_app(dsn: str) -> AsyncIterator[App]:
    app = await App(settings(dsn)).open()
    yield app
    await app.close()


@pytest.fixture
async def http(db, py_app: App) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=api_for(py_app))
    async with httpx.AsyncClient(transport=transport, base_url="http://faces") as client:
        yield client


TRIGGER = "/api/v1/jobs/trigger"
BIG = {"a": "x" * 2 * MAX_ARGS_BYTES}
DEEP: dict[str, Any] = {}
for _ in range(70):  # past the storage rule's 64 levels (model/storable.py), within the size limit
    DEEP = {"a": DEEP}

# (id, Python enqueue kwargs, HTTP trigger body (or raw bytes), CLI `jobs trigger` args, code)
TRIGGERS: list[tuple[str, dict[str, Any] | None, Any, list[str] | None, str]] = [
    ("priority a word", {"priority": "high"}, {"priority": "high"}, ["--priority", "high"], "validation_error"),
    ("priority as text", {"priority": "5"}, {"priority": "5"}, None, "validation_error"),
    ("priority negative", {"priority": -1}, {"priority": -1}, ["--priority", "-1"], "validation_error"),
    ("empty task", {"task": ""}, {"task": ""}, ["--task", ""], "validation_error"),
    ("blank lock_key", {"lock_key": "  "}, {"lock_key": "  "}, ["--lock-key", "  "], "validation_error"),
    ("max_attempts 0", {"max_attempts": 0}, {"max_attempts": 0}, ["--max-attempts", "0"], "validation_error"),
    ("unique window with an idempotency key", {"unique_for": 60, "idempotency_key": "k"},
     {"unique_for_sec": 60, "idempotency_key": "k"}, ["--unique-for-sec", "60", "--idempotency-key", "k"],
     "validation_error"),
    ("restartable without a lock_key", {"restartable": True}, {"restartable": True}, ["--restartable"],
     "validation_error"),
    ("args a list", {"args": [1, 2]}, {"args": [1, 2]}, ["--args", "[1, 2]"], "validation_error"),
    ("args not JSON", None, b'{"queue": "faces", "task": "dl.noop", "args": {oops}', ["--args", "{oops"],
     "invalid_json"),
    ("negative delay", {"delay": -5}, None, ["--delay", "-5"], "validation_error"),
    ("available_at without a zone", {"available_at": "2030-01-01T00:00:00"},
     {"available_at": "2030-01-01T00:00:00"}, ["--available-at", "2030-01-01T00:00:00"], "validation_error"),
    ("a stage with a bad priority", {"then": [{"task": "dl.noop", "priority": -1}]},
     {"then": [{"task": "dl.noop", "priority": -1}]}, ["--then", '{"task": "dl.noop", "priority": -1}'],
     "validation_error"),
    ("a stage with a priority as text", {"then": [{"task": "dl.noop", "priority": "5"}]},
     {"then": [{"task": "dl.noop", "priority": "5"}]}, ["--then", '{"task": "dl.noop", "priority": "5"}'],
     "validation_error"),
    ("args too large", {"args": BIG}, {"args": BIG}, ["--args", json.dumps(BIG)], "args_too_large"),
    ("args with a NUL", {"args": {"a": "x\x00y"}}, {"args": {"a": "x\x00y"}}, ["--args", '{"a": "x\\u0000y"}'],
     "validation_error"),
    ("args nested too deep", {"args": DEEP}, {"args": DEEP}, ["--args", json.dumps(DEEP)], "validation_error"),
]


async def python_code(app: App, kwargs: dict[str, Any]) -> str:
    fields = {"queue": QUEUE, **kwargs}
    task = fields.pop("task", "dl.noop")
    args = fields.pop("args", None)
    with pytest.raises(DataloaderError) as caught:
        await app.enqueue(task, args, **fields)
    return caught.value.code


async def http_code(client: httpx.AsyncClient, method: str, url: str, body: Any = None) -> str:
    if isinstance(body, bytes):
        response = await client.request(method, url, content=body, headers={"content-type": "application/json"})
    else:
        response = await client.request(method, url, json=body)
    assert 400 <= response.status_code < 500, response.text
    body = response.json()
    if body["error"] == "validation_error":  # wherever it was found, with the problems listed
        assert body.get("fields"), body
    return body["error"]


async def cli_code(dsn: str, args: list[str]) -> str:
    result = await asyncio.to_thread(invoke, args, cli_env(dsn))
    line = error_line(result)
    code = line.removeprefix("dataloader: ").split(":", 1)[0]
    assert result.exit_code == (2 if code in INPUT_ERROR_CODES else 1), (result.exit_code, line)
    return code


@pytest.mark.parametrize(("py", "body", "cli", "code"), [row[1:] for row in TRIGGERS], ids=[row[0] for row in TRIGGERS])
async def test_a_bad_trigger_gets_the_same_code_from_every_face_and_writes_nothing(py_app, http, db, dsn, py, body,
                                                                                  cli, code):
    codes: dict[str, str] = {}
    if py is not None:
        codes["python"] = await python_code(py_app, py)
    if body is not None:
        json_body = body if isinstance(body, bytes) else {"queue": QUEUE, "task": "dl.noop", **body}
        codes["http"] = await http_code(http, "POST", TRIGGER, json_body)
    if cli is not None:
        given = [cli[i] for i in range(0, len(cli), 2) if cli[i].startswith("--")]
        base = [] if "--task" in given else ["--task", "dl.noop"]
        codes["cli"] = await cli_code(dsn, ["jobs", "trigger", "--queue", QUEUE, *base, *cli])
    assert codes == dict.fromkeys(codes, code)
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == 0
    assert await db.fetchval("SELECT count(*) FROM dl_job_events") == 0


# A task no pipeline here has, on a queue this process serves (its workers run here; the CLI answers
# for its WORKERS_JSON): refused by one rule, for a trigger, a chain's stage and a schedule alike.
UNKNOWN: list[tuple[str, Any, tuple[str, str, dict[str, Any]], list[str]]] = [
    ("trigger", lambda app: app.enqueue("no.such", queue=QUEUE),
     ("POST", TRIGGER, {"queue": QUEUE, "task": "no.such"}),
     ["jobs", "trigger", "--queue", QUEUE, "--task", "no.such"]),
    ("a chain's stage", lambda app: app.enqueue("dl.noop", queue=QUEUE, then=[{"task": "no.such"}]),
     ("POST", TRIGGER, {"queue": QUEUE, "task": "dl.noop", "then": [{"task": "no.such"}]}),
     ["jobs", "trigger", "--queue", QUEUE, "--task", "dl.noop", "--then", "no.such"]),
    ("schedule", lambda app: app.schedules.create(app.schedules.spec(name="s1", task="no.such", every_sec=60,
                                                                      queue=QUEUE)),
     ("POST", "/api/v1/schedules", {"name": "s1", "task": "no.such", "every_sec": 60, "queue": QUEUE}),
     ["schedules", "create", "--name", "s1", "--task", "no.such", "--every", "60", "--queue", QUEUE]),
]


@pytest.mark.parametrize(("call", "request_", "cli"), [row[1:] for row in UNKNOWN], ids=[row[0] for row in UNKNOWN])
async def test_an_unknown_task_on_a_served_queue_is_refused_by_every_face(py_app, db, dsn, call, request_, cli):
    from dataloader import Queue

    await db.execute("DELETE FROM dl_schedules WHERE name = 's1'")
    async with py_app.running(queues=[Queue(QUEUE, 1)], reaper=False) as manager:
        with pytest.raises(DataloaderError) as caught:
            await call(py_app)
        transport = httpx.ASGITransport(app=create_app(py_app.settings, context=py_app, manager=manager))
        async with httpx.AsyncClient(transport=transport, base_url="http://faces") as client:
            codes = {"python": caught.value.code, "http": await http_code(client, *request_)}
    codes["cli"] = await cli_code(dsn, cli)
    assert codes == dict.fromkeys(codes, "unknown_task")
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == 0
    assert await db.fetchval("SELECT count(*) FROM dl_schedules WHERE name = 's1'") == 0


# Schedules and observers: the bad spec a model refuses is a validation_error in every face.
# (id, Python call, HTTP method, url and body, CLI args, code)
SPECS: list[tuple[str, Any, tuple[str, str, dict[str, Any]], list[str], str]] = [
    ("schedule with a bad cron",
     lambda app: app.schedules.spec(name="bad-cron", task="dl.noop", cron="61 * * * *"),
     ("POST", "/api/v1/schedules", {"name": "bad-cron", "task": "dl.noop", "cron": "61 * * * *"}),
     ["schedules", "create", "--name", "bad-cron", "--task", "dl.noop", "--cron", "61 * * * *"], "validation_error"),
    ("schedule with a bad name",
     lambda app: app.schedules.spec(name="a b", task="dl.noop", every_sec=60),
     ("POST", "/api/v1/schedules", {"name": "a b", "task": "dl.noop", "every_sec": 60}),
     ["schedules", "create", "--name", "a b", "--task", "dl.noop", "--every", "60"], "validation_error"),
    ("schedule args not JSON", None, ("POST", "/api/v1/schedules", b'{"name": "s", "args": {x}'),
     ["schedules", "create", "--name", "s", "--task", "dl.noop", "--every", "60", "--args", "{x"], "invalid_json"),
    ("observer with a bad name",
     lambda app: app.observers.spec(name="a b", kind="k"),
     ("POST", "/api/v1/observers", {"name": "a b", "kind": "k"}),
     ["observers", "create", "--name", "a b", "--kind", "k"], "validation_error"),
]

# Search filters (docs/operations.md): the same filter refused the same way.
FILTERS: list[tuple[str, dict[str, Any], list[str], str]] = [
    ("unknown status", {"statuses": ["nope"]}, ["ops", "search", "--status", "nope"], "validation_error"),
    ("created range backwards", {"created_from": "2030-01-02T00:00:00Z", "created_to": "2030-01-01T00:00:00Z"},
     ["ops", "search", "--created-from", "2030-01-02T00:00:00Z", "--created-to", "2030-01-01T00:00:00Z"],
     "validation_error"),
]


@pytest.mark.parametrize(("body", "cli", "code"), [row[1:] for row in FILTERS], ids=[row[0] for row in FILTERS])
async def test_a_bad_search_filter_gets_the_same_code_from_every_face(py_app, http, dsn, body, cli, code):
    with pytest.raises(DataloaderError) as caught:
        await py_app.search(body)
    codes = {"python": caught.value.code, "http": await http_code(http, "POST", "/api/v1/search", body),
             "cli": await cli_code(dsn, cli)}
    assert codes == dict.fromkeys(codes, code)


# Processes: a namespace or id that cannot be, a bad page; a process that does not exist.
PROCESSES: list[tuple[str, Any, tuple[str, str], list[str], str]] = [
    ("namespace that cannot be", lambda app: app.processes.get("bad ns", "p"),
     ("GET", "/api/v1/processes/bad%20ns/p"), ["processes", "get", "bad ns", "p"], "validation_error"),
    ("blank process id", lambda app: app.processes.get("nobody", "  "),
     ("GET", "/api/v1/processes/nobody/%20%20"), ["processes", "get", "nobody", "  "], "validation_error"),
    ("list limit 0", lambda app: app.processes.list("nobody", limit=0),
     ("GET", "/api/v1/processes/nobody?limit=0"), ["processes", "list", "nobody", "--limit", "0"],
     "validation_error"),
    ("list by an unknown status", lambda app: app.processes.list("nobody", status="bogus"),
     ("GET", "/api/v1/processes/nobody?status=bogus"), ["processes", "list", "nobody", "--status", "bogus"],
     "validation_error"),
    ("no such process", lambda app: app.processes.get("nobody", "p"),
     ("GET", "/api/v1/processes/nobody/p"), ["processes", "get", "nobody", "p"], "process_not_found"),
]


@pytest.mark.parametrize(("call", "request_", "cli", "code"), [row[1:] for row in PROCESSES],
                         ids=[row[0] for row in PROCESSES])
async def test_a_bad_process_request_gets_the_same_code_from_every_face(py_app, http, dsn, call, request_, cli,
                                                                       code):
    with pytest.raises(DataloaderError) as caught:
        await call(py_app)
    codes = {"python": caught.value.code, "http": await http_code(http, *request_), "cli": await cli_code(dsn, cli)}
    assert codes == dict.fromkeys(codes, code)


@pytest.mark.parametrize(("call", "request_", "cli", "code"), [row[1:] for row in SPECS], ids=[row[0] for row in SPECS])
async def test_a_bad_schedule_or_observer_gets_the_same_code_from_every_face(py_app, http, dsn, call, request_, cli,
                                                                            code):
    codes: dict[str, str] = {}
    if call is not None:
        with pytest.raises(DataloaderError) as caught:
            call(py_app)
        codes["python"] = caught.value.code
    codes["http"] = await http_code(http, *request_)
    codes["cli"] = await cli_code(dsn, cli)
    assert codes == dict.fromkeys(codes, code)


MISSING = str(uuid.UUID(int=0))

# (id, Python call, HTTP method and url, CLI args, code)
READS: list[tuple[str, Any, tuple[str, str], list[str], str]] = [
    ("job id not a UUID", lambda app: app.get("not-a-uuid"), ("GET", "/api/v1/jobs/not-a-uuid/status"),
     ["jobs", "status", "not-a-uuid"], "validation_error"),
    ("no such job", lambda app: app.get(MISSING), ("GET", f"/api/v1/jobs/{MISSING}/status"),
     ["jobs", "status", MISSING], "job_not_found"),
    ("cancel no such job", lambda app: app.cancel(MISSING), ("POST", f"/api/v1/jobs/{MISSING}/cancel"),
     ["jobs", "cancel", MISSING], "job_not_found"),
    ("list by an unknown status", lambda app: app.list(status="bogus"), ("GET", "/api/v1/jobs?status=bogus"),
     ["jobs", "list", "--status", "bogus"], "validation_error"),
    ("list with a bad cursor", lambda app: app.list(cursor="nope"), ("GET", "/api/v1/jobs?cursor=nope"),
     ["jobs", "list", "--cursor", "nope"], "invalid_cursor"),
    # the access faces (docs/security.md): the same refusals, whichever face is asked
    ("revoke no such token", lambda app: app.tokens.revoke(MISSING), ("POST", f"/api/v1/tokens/{MISSING}/revoke"),
     ["tokens", "revoke", MISSING], "api_token_not_found"),
    ("disable no such user", lambda app: app.users.disable("nobody"), ("POST", "/api/v1/users/nobody/disable"),
     ["users", "disable", "nobody"], "user_not_found"),
    ("audit since a word", lambda app: app.audit.search(since="yesterday"), ("GET", "/api/v1/audit?since=yesterday"),
     ["audit", "list", "--since", "yesterday"], "validation_error"),
]


@pytest.mark.parametrize(("call", "request_", "cli", "code"), [row[1:] for row in READS], ids=[row[0] for row in READS])
async def test_a_bad_read_gets_the_same_code_from_every_face(py_app, http, dsn, call, request_, cli, code):
    with pytest.raises(DataloaderError) as caught:
        await call(py_app)
    codes = {"python": caught.value.code, "http": await http_code(http, *request_), "cli": await cli_code(dsn, cli)}
    assert codes == dict.fromkeys(codes, code)


# Every column a producer does not choose: what each face stores when it is left out.
DEFAULTED = ("queue", "status", "attempt", "max_attempts", "priority", "partition_key", "lease_ttl_sec",
             "timeout_sec", "idempotency_key", "cancel_requested", "chain_id", "chain_next", "restartable")


async def test_a_minimal_job_gets_the_same_defaults_from_every_face(py_app, http, db, dsn):
    made = {"python": (await py_app.enqueue("dl.noop")).id}
    response = await http.post(TRIGGER, json={"queue": "default", "task": "dl.noop"})
    assert response.status_code == 201, response.text
    made["http"] = uuid.UUID(response.json()["job_id"])
    result = await asyncio.to_thread(invoke, ["jobs", "trigger", "--task", "dl.noop"], cli_env(dsn))
    assert result.exit_code == 0, result.output
    made["cli"] = uuid.UUID(json.loads(result.stdout)["job_id"])

    rows = {face: dict(await db.fetchrow("SELECT * FROM dl_jobs WHERE job_id = $1", job_id))
            for face, job_id in made.items()}
    for face, row in rows.items():
        # lock_key defaults to the job's own id, and the job is due now, in every face.
        assert row["lock_key"] == str(made[face]), face
        assert abs((row["available_at"] - row["created_at"]).total_seconds()) < 1, face
    defaults = {face: {c: row[c] for c in DEFAULTED if c in row} for face, row in rows.items()}
    assert defaults["python"] == defaults["http"] == defaults["cli"], defaults
    assert defaults["python"]["priority"] == 100 and defaults["python"]["queue"] == "default"
    assert {row["producer"] for row in rows.values()} == {"python", "http", "cli"}


async def test_times_read_the_same_in_every_face(py_app, http, db, dsn):
    """One form for a time (ISO 8601, UTC, Z), whichever face prints it: the job's created_at from
    Python's to_dict, the HTTP listing and the CLI's listing, and a schedule's times in the CLI."""
    job = await py_app.enqueue("dl.noop", queue=QUEUE)
    python = job.to_dict()["created_at"]
    listed = (await http.get("/api/v1/jobs", params={"queue": QUEUE})).json()["jobs"]
    result = await asyncio.to_thread(invoke, ["jobs", "list", "--queue", QUEUE], cli_env(dsn))
    assert result.exit_code == 0, result.output
    cli = json.loads(result.stdout)["jobs"][0]["created_at"]
    assert python == listed[0]["created_at"] == cli and python.endswith("Z"), (python, listed[0], cli)

    await db.execute("DELETE FROM dl_schedules WHERE name = 'times'")
    await py_app.schedules.create(py_app.schedules.spec(name="times", task="dl.noop", every_sec=60, queue="x"))
    try:
        result = await asyncio.to_thread(invoke, ["schedules", "list"], cli_env(dsn))
        shown = next(s for s in json.loads(result.stdout) if s["name"] == "times")
        assert shown["next_run_at"].endswith("Z") and all(t.endswith("Z") for t in shown["upcoming"]), shown
    finally:
        await db.execute("DELETE FROM dl_schedules WHERE name = 'times'")


async def test_bad_configuration_is_the_same_config_error_in_python_and_the_cli(dsn):
    from dataloader.exceptions import ConfigError

    async with App(Settings(db_dsn=dsn, workers=[], node_dead_after_sec=1)) as app:
        with pytest.raises(ConfigError) as caught:
            async with app.running():
                pass
    assert caught.value.variable == "DL_NODE_DEAD_AFTER_SEC" and caught.value.code == "config_error"
    result = await asyncio.to_thread(invoke, ["worker"], {**cli_env(dsn), "DL_NODE_DEAD_AFTER_SEC": "1"})
    assert result.exit_code == 2
    assert error_line(result) == f"dataloader: configuration error: {caught.value}"


# Flow control (issue 21): a queue name the job request would refuse, refused the same way by pause
# and resume in every face, before anything is written.
BAD_QUEUES: list[tuple[str, str, str]] = [
    ("blank", "   ", "%20%20%20"),
    ("too long", "q" * 201, "q" * 201),
    ("NUL", "a\x00b", "a%00b"),
]


@pytest.mark.parametrize("action", ["pause", "resume"])
@pytest.mark.parametrize(("name", "url_name"), [row[1:] for row in BAD_QUEUES], ids=[row[0] for row in BAD_QUEUES])
async def test_a_bad_queue_name_gets_the_same_code_from_every_face_and_writes_nothing(py_app, http, dsn, db, action,
                                                                                     name, url_name):
    before = await db.fetchval("SELECT count(*) FROM dl_queue_flow")
    with pytest.raises(DataloaderError) as caught:
        await getattr(py_app, f"{action}_queue")(name)
    codes = {"python": caught.value.code,
             "http": await http_code(http, "POST", f"/api/v1/queues/{url_name}/{action}"),
             "cli": await cli_code(dsn, ["queues", action, name])}
    assert codes == dict.fromkeys(codes, "validation_error")
    assert await db.fetchval("SELECT count(*) FROM dl_queue_flow") == before


# Pausing one task of a queue (issue 21 part B): a task name the job request would refuse, refused the
# same way by pause and resume (`task=`, `?task=`, `--task`) in every face, before anything is written.
BAD_TASKS: list[tuple[str, str, str]] = [
    ("blank", "   ", "%20%20%20"),
    ("too long", "t" * 201, "t" * 201),
    ("NUL", "a\x00b", "a%00b"),
]


@pytest.mark.parametrize("action", ["pause", "resume"])
@pytest.mark.parametrize(("task", "url_task"), [row[1:] for row in BAD_TASKS], ids=[row[0] for row in BAD_TASKS])
async def test_a_bad_task_name_gets_the_same_code_from_every_face_and_writes_nothing(py_app, http, dsn, db, action,
                                                                                    task, url_task):
    before = await db.fetchval("SELECT count(*) FROM dl_task_flow")
    with pytest.raises(DataloaderError) as caught:
        await getattr(py_app, f"{action}_queue")("load", task=task)
    codes = {"python": caught.value.code,
             "http": await http_code(http, "POST", f"/api/v1/queues/load/{action}?task={url_task}"),
             "cli": await cli_code(dsn, ["queues", action, "load", "--task", task])}
    assert codes == dict.fromkeys(codes, "validation_error")
    assert await db.fetchval("SELECT count(*) FROM dl_task_flow") == before


async def test_a_task_paused_through_every_face_reads_back_the_same(py_app, http, dsn, db):
    queues = {face: f"tasks-{face}-{uuid.uuid4().hex[:6]}" for face in ("python", "http", "cli")}
    await py_app.pause_queue(queues["python"], task="load.cbr")
    response = await http.post(f"/api/v1/queues/{queues['http']}/pause", params={"task": "load.cbr"})
    assert response.status_code == 200 and list(response.json()["paused_tasks"]) == ["load.cbr"], response.text
    result = await asyncio.to_thread(invoke, ["queues", "pause", queues["cli"], "--task", "load.cbr"], cli_env(dsn))
    assert result.exit_code == 0 and '"load.cbr"' in result.output, result.output
    listed = {q.queue: q for q in await py_app.queues()}
    assert all(list(listed[q].paused_tasks) == ["load.cbr"] and not listed[q].paused for q in queues.values())


# Flow control limits (issue 21): the same bad change of a queue's limits, refused with the same code
# by configure_queue, PATCH /api/v1/queues/{queue} and `dataloader queues set`, writing nothing.
# (id, Python kwargs, HTTP body, CLI options)
BAD_LIMITS: list[tuple[str, dict[str, Any], dict[str, Any], list[str]]] = [
    ("concurrency 0", {"concurrency": 0}, {"concurrency": 0}, ["--concurrency", "0"]),
    ("concurrency negative", {"concurrency": -3}, {"concurrency": -3}, ["--concurrency", "-3"]),
    ("concurrency a word", {"concurrency": "five"}, {"concurrency": "five"}, ["--concurrency", "five"]),
    ("concurrency too big", {"concurrency": 1_000_001}, {"concurrency": 1_000_001}, ["--concurrency", "1000001"]),
    ("partition concurrency 0", {"partition_concurrency": 0}, {"partition_concurrency": 0},
     ["--partition-concurrency", "0"]),
    ("rate 0", {"rate_limit": 0, "rate_period_sec": 1}, {"rate_limit": 0, "rate_period_sec": 1}, ["--rate", "0/1s"]),
    ("rate period too short", {"rate_limit": 5, "rate_period_sec": 0.001}, {"rate_limit": 5, "rate_period_sec": 0.001},
     ["--rate", "5/1ms"]),
    ("rate period too long", {"rate_limit": 5, "rate_period_sec": 86401}, {"rate_limit": 5, "rate_period_sec": 86401},
     ["--rate", "5/2d"]),
    ("a period with no rate", {"partition_rate_period_sec": 1}, {"partition_rate_period_sec": 1},
     ["--partition-rate", "x/1s"]),
    ("nothing to change", {}, {}, []),
    # fair share (issue 21 part B): the same checks for its two settings
    ("fair weight 0", {"fair_weights": {"a": 0}}, {"fair_weights": {"a": 0}}, ["--fair-weights", '{"a": 0}']),
    # accepted once, and every claim of the queue then failed (a rank divided by it overflowed)
    ("fair weight 1e-320", {"fair_weights": {"a": 1e-320}}, {"fair_weights": {"a": 1e-320}},
     ["--fair-weights", '{"a": 1e-320}']),
    ("fair weight below the floor", {"fair_weights": {"a": 0.0009}}, {"fair_weights": {"a": 0.0009}},
     ["--fair-weights", '{"a": 0.0009}']),
    ("fair weight too big", {"fair_weights": {"a": 1e7}}, {"fair_weights": {"a": 1e7}},
     ["--fair-weights", '{"a": 1e7}']),
    ("fair weights not an object", {"fair_weights": [1]}, {"fair_weights": [1]}, ["--fair-weights", "[1]"]),
    ("fair weight a word", {"fair_weights": {"a": "x"}}, {"fair_weights": {"a": "x"}},
     ["--fair-weights", '{"a": "x"}']),
    ("fair share a word", {"fair_share": "yes"}, {"fair_share": "yes"}, ["--fair-weights", "{oops"]),
]


@pytest.mark.parametrize(("py", "body", "cli"), [row[1:] for row in BAD_LIMITS], ids=[row[0] for row in BAD_LIMITS])
async def test_a_bad_limit_gets_the_same_code_from_every_face_and_writes_nothing(py_app, http, dsn, db, py, body, cli):
    queue = f"limits-{uuid.uuid4().hex[:8]}"
    with pytest.raises(DataloaderError) as caught:
        await py_app.configure_queue(queue, **py)
    codes = {"python": caught.value.code,
             "http": await http_code(http, "PATCH", f"/api/v1/queues/{queue}", body),
             "cli": await cli_code(dsn, ["queues", "set", queue, *cli])}
    assert codes == dict.fromkeys(codes, "validation_error")
    assert await db.fetchval("SELECT count(*) FROM dl_queue_flow WHERE queue = $1", queue) == 0


async def test_an_unknown_limit_is_refused_by_python_and_http(py_app, http, db):
    """The CLI has no option to misspell (typer refuses an unknown option with its usage error)."""
    queue = f"limits-{uuid.uuid4().hex[:8]}"
    with pytest.raises(DataloaderError) as caught:
        await py_app.configure_queue(queue, concurency=5)  # type: ignore[call-arg]
    assert caught.value.code == await http_code(http, "PATCH", f"/api/v1/queues/{queue}", {"concurency": 5}) \
        == "validation_error"
    assert await db.fetchval("SELECT count(*) FROM dl_queue_flow WHERE queue = $1", queue) == 0


async def test_the_same_limits_set_through_every_face_read_back_the_same(py_app, http, dsn, db):
    """One set of defaults: a rate given without a period counts per second everywhere."""
    queues = {face: f"limits-{face}-{uuid.uuid4().hex[:6]}" for face in ("python", "http", "cli")}
    await py_app.configure_queue(queues["python"], concurrency=5, partition_concurrency=1, rate_limit=10,
                                 partition_rate_limit=3, partition_rate_period_sec=0.5, fair_share=True,
                                 fair_weights={"big": 3})
    response = await http.patch(f"/api/v1/queues/{queues['http']}", json={
        "concurrency": 5, "partition_concurrency": 1, "rate_limit": 10, "partition_rate_limit": 3,
        "partition_rate_period_sec": 0.5, "fair_share": True, "fair_weights": {"big": 3}})
    assert response.status_code == 200, response.text
    result = await asyncio.to_thread(invoke, ["queues", "set", queues["cli"], "--concurrency", "5",
                                              "--partition-concurrency", "1", "--rate", "10",
                                              "--partition-rate", "3/500ms", "--fair-share",
                                              "--fair-weights", '{"big": 3}'], cli_env(dsn))
    assert result.exit_code == 0, result.output
    listed = {q.queue: q for q in await py_app.queues()}
    seen = {face: listed[queue].settings.to_dict() for face, queue in queues.items()}
    assert seen["python"] == {"concurrency": 5, "partition_concurrency": 1, "rate_limit": 10, "rate_period_sec": 1.0,
                              "partition_rate_limit": 3, "partition_rate_period_sec": 0.5, "fair_share": True,
                              "fair_weights": {"big": 3.0}}
    assert seen["http"] == seen["cli"] == seen["python"]
    assert {listed[q].settings_source for q in queues.values()} == {"runtime"}
# DL_DB_DIRECT_DSN (issue 22, docs/scaling.md "PgBouncer"): a bad value is the same one-line
# ConfigError naming it in Python and in the CLI, before anything connects.
async def test_a_bad_direct_dsn_is_the_same_config_error_in_python_and_the_cli(dsn):
    from dataloader.exceptions import ConfigError

    with pytest.raises(ConfigError) as caught:
        load_settings(db_dsn=dsn, db_direct_dsn="mysql://x@y/z")
    assert caught.value.variable == "DL_DB_DIRECT_DSN" and caught.value.code == "config_error"
    result = await asyncio.to_thread(invoke, ["worker"], {**cli_env(dsn), "DL_DB_DIRECT_DSN": "mysql://x@y/z"})
    assert result.exit_code == 2
    assert error_line(result) == f"dataloader: configuration error: {caught.value}"


async def test_a_direct_dsn_without_a_dsn_is_a_config_error_before_anything_starts(dsn):
    from dataloader.exceptions import ConfigError

    with pytest.raises(ConfigError) as caught:
        await App.embedded(Settings(db_direct_dsn=dsn)).open()
    assert caught.value.variable == "DL_DB_DIRECT_DSN" and "without DL_DB_DSN" in caught.value.problem
async def test_queue_depths_read_the_same_in_every_face(py_app, http, db, dsn):
    """A queue's depth (issue 20, the console's overview) from Python, HTTP and the CLI, and the
    console's overview shows the same numbers."""
    queue = f"{QUEUE}-depth"
    for _ in range(2):
        await py_app.enqueue("dl.noop", queue=queue)
    await py_app.enqueue("dl.noop", queue=queue, delay=3600)
    python = next(d.to_dict() for d in await py_app.queue_depths() if d.queue == queue)
    over_http = next(q for q in (await http.get("/api/v1/stats/depths")).json()["queues"] if q["queue"] == queue)
    result = await asyncio.to_thread(invoke, ["queues", "depths"], cli_env(dsn))
    assert result.exit_code == 0, result.output
    cli = next(q for q in json.loads(result.stdout) if q["queue"] == queue)
    counts = ("queued", "delayed", "running", "held")
    assert [python[c] for c in counts] == [over_http[c] for c in counts] == [cli[c] for c in counts] == [2, 1, 0, 0]
    overview = (await http.get("/ui/")).text
    row = overview.split(f'<tr data-queue="{queue}">', 1)[1].split("</tr>", 1)[0]
    assert [cell.split("<", 1)[0] for cell in row.split('<td class="num">')[1:5]] == ["2", "1", "0", "0"]


# The console's limits form (issue 21's console face): the CLI's texts, read by the same function
# (model/flow.changes_from_text), refused as a 422 page naming the same problem, writing nothing.
CONSOLE_FIELDS = {"--concurrency": "concurrency", "--partition-concurrency": "partition_concurrency",
                  "--rate": "rate", "--partition-rate": "partition_rate"}
CONSOLE_LIMITS = [row for row in BAD_LIMITS if all(opt in CONSOLE_FIELDS for opt in row[3][::2])]


@pytest.mark.parametrize(("py", "cli"), [(row[1], row[3]) for row in CONSOLE_LIMITS],
                         ids=[row[0] for row in CONSOLE_LIMITS])
async def test_a_bad_limit_in_the_console_form_is_the_same_refusal(py_app, http, dsn, db, py, cli):
    """The same code as Python and the CLI; the page names the problem in the CLI's words (both read
    texts: "none" clears, where Python and HTTP say null)."""
    import html
    import re

    queue = f"limits-{uuid.uuid4().hex[:8]}"
    with pytest.raises(DataloaderError) as caught:
        await py_app.configure_queue(queue, **py)
    result = await asyncio.to_thread(invoke, ["queues", "set", queue, *cli], cli_env(dsn))
    assert result.exit_code == 2 and caught.value.code == "validation_error"
    cli_problem = error_line(result).split("validation_error: ", 1)[1]
    page = (await http.get("/ui/")).text
    csrf = re.search(r'name="dl-csrf" content="([^"]+)"', page).group(1)
    fields = {CONSOLE_FIELDS[opt]: text for opt, text in zip(cli[::2], cli[1::2], strict=True)}
    form = {"csrf": csrf, "queue": queue, **fields}
    answer = await http.post("/ui/queues/limits", data=form)
    assert answer.status_code == 422, answer.text
    assert cli_problem in html.unescape(answer.text), (cli_problem, answer.text)
    assert await db.fetchval("SELECT count(*) FROM dl_queue_flow WHERE queue = $1", queue) == 0


# One job's priority and its deletion (the console's job page calls the same App methods): the same
# bad input or refused state gets the same code from Python, HTTP, the CLI and the console's form, and
# writes nothing. The console and the CLI read text, so a number given as text has no row there.
# (id, the job's status (None: no such job), Python priority, HTTP body, CLI/console text, code)
PRIORITIES: list[tuple[str, str | None, Any, Any, str | None, str]] = [
    ("priority negative", "queued", -1, {"priority": -1}, "-1", "validation_error"),
    ("priority past 2^31-1", "queued", 2**31, {"priority": 2**31}, "2147483648", "validation_error"),
    ("priority a word", "queued", "high", {"priority": "high"}, "high", "validation_error"),
    ("priority a fraction", "queued", 1.5, {"priority": 1.5}, "1.5", "validation_error"),
    ("priority as text", "queued", "5", {"priority": "5"}, None, "validation_error"),
    ("priority a boolean", "queued", True, {"priority": True}, None, "validation_error"),
    ("no such job", None, 1, {"priority": 1}, "1", "job_not_found"),
    ("a running job", "running", 1, {"priority": 1}, "1", "job_not_queued"),
    ("a finished job", "succeeded", 1, {"priority": 1}, "1", "job_not_queued"),
]


async def a_job_in(db, status: str | None) -> str:
    if status is None:
        return str(uuid.uuid4())
    job_id = await db.fetchval("INSERT INTO dl_jobs (job_id, queue, task, lock_key, status) "
                               "VALUES (gen_random_uuid(), $1, 'dl.noop', 'k', $2) RETURNING job_id", QUEUE, status)
    return str(job_id)


async def console_code(http: httpx.AsyncClient, url: str, form: dict[str, str]) -> str:
    import re

    page = (await http.get("/ui/")).text
    csrf = re.search(r'name="dl-csrf" content="([^"]+)"', page).group(1)
    answer = await http.post(url, data={"csrf": csrf, **form})
    assert 400 <= answer.status_code < 500, answer.text
    return re.search(r"<code>([a-z_]+)</code>", answer.text).group(1)


@pytest.mark.parametrize(("status", "py", "body", "text", "code"), [row[1:] for row in PRIORITIES],
                         ids=[row[0] for row in PRIORITIES])
async def test_a_refused_priority_gets_the_same_code_from_every_face_and_writes_nothing(py_app, http, dsn, db,
                                                                                       status, py, body, text, code):
    job_id = await a_job_in(db, status)
    with pytest.raises(DataloaderError) as caught:
        await py_app.set_job_priority(job_id, py)
    codes = {"python": caught.value.code, "http": await http_code(http, "PATCH", f"/api/v1/jobs/{job_id}", body)}
    if text is not None:
        codes["cli"] = await cli_code(dsn, ["jobs", "set-priority", job_id, text])
        codes["console"] = await console_code(http, f"/ui/jobs/{job_id}/priority", {"priority": text})
    assert codes == dict.fromkeys(codes, code)
    assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE priority <> 100") == 0
    assert await db.fetchval("SELECT count(*) FROM dl_job_events WHERE kind = 'priority_changed'") == 0


# (id, the job's status (None: no such job), code)
DELETES = [("no such job", None, "job_not_found"), ("a queued job", "queued", "job_not_finished"),
           ("a running job", "running", "job_not_finished")]


@pytest.mark.parametrize(("status", "code"), [row[1:] for row in DELETES], ids=[row[0] for row in DELETES])
async def test_a_refused_delete_gets_the_same_code_from_every_face_and_deletes_nothing(py_app, http, dsn, db,
                                                                                      status, code):
    job_id = await a_job_in(db, status)
    with pytest.raises(DataloaderError) as caught:
        await py_app.delete_job(job_id)
    codes = {"python": caught.value.code, "http": await http_code(http, "DELETE", f"/api/v1/jobs/{job_id}"),
             "cli": await cli_code(dsn, ["jobs", "delete", job_id]),
             "console": await console_code(http, f"/ui/jobs/{job_id}/delete", {"confirm": "yes"})}
    assert codes == dict.fromkeys(codes, code)
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == (0 if status is None else 1)


async def test_a_job_id_that_is_not_a_uuid_is_the_same_validation_error_for_priority_and_delete(py_app, http, dsn):
    for call, request_, cli in [
        (py_app.set_job_priority("nope", 1), ("PATCH", "/api/v1/jobs/nope", {"priority": 1}),
         ["jobs", "set-priority", "nope", "1"]),
        (py_app.delete_job("nope"), ("DELETE", "/api/v1/jobs/nope"), ["jobs", "delete", "nope"]),
    ]:
        with pytest.raises(DataloaderError) as caught:
            await call
        codes = {"python": caught.value.code, "http": await http_code(http, *request_),
                 "cli": await cli_code(dsn, cli)}
        assert codes == dict.fromkeys(codes, "validation_error")


# Limits per task (issue 21, 0027): the same bad change of one task's limits, refused with the same
# code by configure_task, PATCH /api/v1/queues/{queue}/tasks/{task} and `dataloader queues set
# --task`, writing nothing. The queue's rows where a task has the setting, plus what a task lacks.
# (id, Python kwargs, HTTP body, CLI options)
BAD_TASK_LIMITS: list[tuple[str, dict[str, Any], dict[str, Any], list[str]]] = [
    *[row for row in BAD_LIMITS if all(key in ("concurrency", "rate_limit", "rate_period_sec") for key in row[1])],
    ("a period with no rate", {"rate_period_sec": 1}, {"rate_period_sec": 1}, ["--rate", "x/1s"]),
    ("a partition limit", {"partition_concurrency": 2}, {"partition_concurrency": 2},
     ["--partition-concurrency", "2"]),
    ("a partition rate", {"partition_rate_limit": 2}, {"partition_rate_limit": 2}, ["--partition-rate", "2/1s"]),
    ("fair share", {"fair_share": True}, {"fair_share": True}, ["--fair-share"]),
    ("fair weights", {"fair_weights": {"a": 2}}, {"fair_weights": {"a": 2}}, ["--fair-weights", '{"a": 2}']),
    ("concurrency a float", {"concurrency": 2.5}, {"concurrency": 2.5}, ["--concurrency", "2.5"]),
    ("rate a word", {"rate_limit": "ten"}, {"rate_limit": "ten"}, ["--rate", "ten"]),
]
TASK = "test.recorded_sleep"


@pytest.mark.parametrize(("py", "body", "cli"), [row[1:] for row in BAD_TASK_LIMITS],
                         ids=[row[0] for row in BAD_TASK_LIMITS])
async def test_a_bad_task_limit_gets_the_same_code_from_every_face_and_writes_nothing(py_app, http, dsn, db, py,
                                                                                      body, cli):
    queue = f"tlimits-{uuid.uuid4().hex[:8]}"
    with pytest.raises(DataloaderError) as caught:
        await py_app.configure_task(queue, TASK, **py)
    codes = {"python": caught.value.code,
             "http": await http_code(http, "PATCH", f"/api/v1/queues/{queue}/tasks/{TASK}", body),
             "cli": await cli_code(dsn, ["queues", "set", queue, "--task", TASK, *cli])}
    assert codes == dict.fromkeys(codes, "validation_error")
    assert await db.fetchval("SELECT count(*) FROM dl_task_flow WHERE queue = $1", queue) == 0
    assert await db.fetchval("SELECT count(*) FROM dl_queue_flow WHERE queue = $1", queue) == 0


@pytest.mark.parametrize("task", ["", " ", "x" * 201, "a\x00b"], ids=["empty", "blank", "too long", "NUL"])
async def test_a_bad_task_name_for_a_limit_gets_the_same_code_from_every_face(py_app, http, dsn, db, task):
    queue = f"tlimits-{uuid.uuid4().hex[:8]}"
    with pytest.raises(DataloaderError) as caught:
        await py_app.configure_task(queue, task, concurrency=1)
    codes = {"python": caught.value.code, "cli": await cli_code(dsn, ["queues", "set", queue, "--task", task,
                                                                       "--concurrency", "1"])}
    if task and "\x00" not in task:  # an empty path segment or a NUL is no URL to PATCH
        codes["http"] = await http_code(http, "PATCH", f"/api/v1/queues/{queue}/tasks/{task}", {"concurrency": 1})
    assert codes == dict.fromkeys(codes, "validation_error")
    assert await db.fetchval("SELECT count(*) FROM dl_queue_flow WHERE queue = $1", queue) == 0


async def test_the_same_task_limits_set_through_every_face_read_back_the_same(py_app, http, dsn, db):
    """One set of defaults: a rate given without a period counts per second everywhere; the state
    reads the same from Python, GET /api/v1/queues and `queues list`."""
    queues = {face: f"tlimits-{face}-{uuid.uuid4().hex[:6]}" for face in ("python", "http", "cli")}
    await py_app.configure_task(queues["python"], TASK, concurrency=3, rate_limit=10)
    response = await http.patch(f"/api/v1/queues/{queues['http']}/tasks/{TASK}",
                                json={"concurrency": 3, "rate_limit": 10})
    assert response.status_code == 200, response.text
    assert response.json()["tasks"][TASK]["concurrency"] == 3
    result = await asyncio.to_thread(invoke, ["queues", "set", queues["cli"], "--task", TASK, "--concurrency", "3",
                                              "--rate", "10"], cli_env(dsn))
    assert result.exit_code == 0, result.output
    listed = {q.queue: q for q in await py_app.queues()}
    over_http = {q["queue"]: q for q in (await http.get("/api/v1/queues")).json()["queues"]}
    result = await asyncio.to_thread(invoke, ["queues", "list"], cli_env(dsn))
    over_cli = {q["queue"]: q for q in json.loads(result.stdout)}
    want = {"concurrency": 3, "rate_limit": 10, "rate_period_sec": 1.0, "settings_source": "runtime"}
    for queue in queues.values():
        python = listed[queue].to_dict()["tasks"][TASK]
        assert {k: python[k] for k in want} == want
        assert over_http[queue]["tasks"][TASK] == python == over_cli[queue]["tasks"][TASK]
        assert listed[queue].settings.concurrency is None, "the queue's own limits are untouched"


CONSOLE_TASK_LIMITS = [row for row in BAD_TASK_LIMITS if all(opt in CONSOLE_FIELDS for opt in row[3][::2])]


async def _console_form(http: httpx.AsyncClient) -> str:
    import re

    page = (await http.get("/ui/")).text
    return re.search(r'name="dl-csrf" content="([^"]+)"', page).group(1)


@pytest.mark.parametrize(("py", "cli"), [(row[1], row[3]) for row in CONSOLE_TASK_LIMITS],
                         ids=[row[0] for row in CONSOLE_TASK_LIMITS])
async def test_a_bad_task_limit_in_the_console_form_is_the_same_refusal(py_app, http, dsn, db, py, cli):
    """The console's limits form with a task named: the CLI's `--task` refusal, in its words."""
    import html

    queue = f"tlimits-{uuid.uuid4().hex[:8]}"
    with pytest.raises(DataloaderError) as caught:
        await py_app.configure_task(queue, TASK, **py)
    result = await asyncio.to_thread(invoke, ["queues", "set", queue, "--task", TASK, *cli], cli_env(dsn))
    assert result.exit_code == 2 and caught.value.code == "validation_error"
    cli_problem = error_line(result).split("validation_error: ", 1)[1]
    fields = {CONSOLE_FIELDS[opt]: text for opt, text in zip(cli[::2], cli[1::2], strict=True)}
    answer = await http.post("/ui/queues/limits", data={"csrf": await _console_form(http), "queue": queue,
                                                         "task": TASK, **fields})
    assert answer.status_code == 422, answer.text
    assert cli_problem in html.unescape(answer.text), (cli_problem, answer.text)
    assert await db.fetchval("SELECT count(*) FROM dl_queue_flow WHERE queue = $1", queue) == 0


async def test_a_task_limit_set_in_the_console_shows_on_its_queues_row(py_app, http, db):
    queue = f"tlimits-ui-{uuid.uuid4().hex[:6]}"
    await py_app.enqueue(TASK, queue=queue)
    answer = await http.post("/ui/queues/limits", data={"csrf": await _console_form(http), "queue": queue,
                                                         "task": TASK, "concurrency": "3", "rate": "10/1s",
                                                         "back": "/ui/"})
    assert answer.status_code in (200, 303), answer.text
    state = {q.queue: q for q in await py_app.queues()}[queue]
    assert state.task_limits[TASK].settings.to_dict() == {"concurrency": 3, "rate_limit": 10, "rate_period_sec": 1.0}
    assert state.settings.concurrency is None
    overview = (await http.get("/ui/")).text
    row = overview.split(f'<tr data-queue="{queue}">', 1)[1].split("</tr>", 1)[0]
    assert f"task {TASK}: concurrency 0/3, rate 10/1s (0 in window)" in row


# DL_TASK_LIMITS_JSON (0027): a bad task limit declared in settings is the same one-line ConfigError
# naming the variable in Python (load_settings) and in the CLI, before anything connects.
BAD_TASK_LIMITS_JSON = [
    ('{"q": {"t": {"partition_concurrency": 2}}}', "partition_concurrency: not a task limit"),
    ('{"q": {"t": {"concurrency": 0}}}', "concurrency: must be between 1 and 1000000"),
    ('{"q": {"t": {"rate": "fast"}}}', "rate: must be a rate"),
    ('{"q": {"t": 3}}', "must be an object"),
    ('{"q": {"": {"concurrency": 1}}}', "not a task name"),
    ('{"q": [1]}', "must be an object of task -> limits"),
    ('["q"]', "must be a JSON object"),
    ('{"q": ', "is not valid JSON"),
]


@pytest.mark.parametrize(("text", "words"), BAD_TASK_LIMITS_JSON)
async def test_a_bad_task_limits_json_is_the_same_config_error_in_python_and_the_cli(dsn, text, words):
    from dataloader.exceptions import ConfigError

    with pytest.raises(ConfigError) as caught:
        load_settings(db_dsn=dsn, task_limits_json=text)
    assert caught.value.variable == "DL_TASK_LIMITS_JSON" and words in str(caught.value)
    result = await asyncio.to_thread(invoke, ["worker"], {**cli_env(dsn), "DL_TASK_LIMITS_JSON": text})
    assert result.exit_code == 2
    assert error_line(result) == f"dataloader: configuration error: {caught.value}"


# (id, Python call on app.workflows (positional args, or a dict of keyword args), HTTP request, CLI args,
# code): workflows' refusals (docs/workflows.md)
_NO_RUN = "00000000-0000-4000-8000-000000000000"
WORKFLOW_REFUSALS = [
    ("unknown workflow", ("start", ("t.no-such-workflow", {})),
     ("POST", "/api/v1/workflows", {"workflow": "t.no-such-workflow", "input": {}}),
     ["workflows", "start", "t.no-such-workflow"], "unknown_workflow"),
    ("signal to no run", ("signal", (_NO_RUN, "go")), ("POST", f"/api/v1/workflows/{_NO_RUN}/signals/go", None),
     ["workflows", "signal", _NO_RUN, "go"], "workflow_not_found"),
    ("run id not a uuid", ("get", ("not-a-uuid",)), ("GET", "/api/v1/workflows/not-a-uuid", None),
     ["workflows", "get", "not-a-uuid"], "validation_error"),
    ("list with an unknown status", ("list", {"status": "sleeping"}),
     ("GET", "/api/v1/workflows?status=sleeping", None), ["workflows", "list", "--status", "sleeping"],
     "validation_error"),
    ("list with limit 0", ("list", {"limit": 0}), ("GET", "/api/v1/workflows?limit=0", None),
     ["workflows", "list", "--limit", "0"], "validation_error"),
    ("list with limit past the bound", ("list", {"limit": 501}), ("GET", "/api/v1/workflows?limit=501", None),
     ["workflows", "list", "--limit", "501"], "validation_error"),
    ("restart of no run", ("restart", (_NO_RUN,)), ("POST", f"/api/v1/workflows/{_NO_RUN}/restart", {}),
     ["workflows", "restart", _NO_RUN], "workflow_not_found"),
    ("complete a token that is none", ("complete_token", ("no-such-token", {"ok": True})),
     ("POST", "/api/v1/workflows/tokens/no-such-token", {"payload": {"ok": True}}),
     ["workflows", "complete-token", "no-such-token", "--payload", '{"ok": true}'], "token_not_found"),
    # bulk operations over runs found by search (docs/operations.md): the selection and the step
    ("bulk cancel by an unknown status", ("cancel_many", {"filter": {"statuses": ["sleeping"]}}),
     ("POST", "/api/v1/workflows/bulk/cancel", {"filter": {"statuses": ["sleeping"]}}),
     ["ops", "cancel-workflows", "--status", "sleeping", "--yes"], "validation_error"),
    ("bulk restart from a date that is none", ("restart_many", {"filter": {"created_from": "yesterday"},
                                                                "from_step": "two"}),
     ("POST", "/api/v1/workflows/bulk/restart", {"filter": {"created_from": "yesterday"}, "from_step": "two"}),
     ["ops", "restart-workflows", "--created-from", "yesterday", "--from-step", "two", "--yes"], "validation_error"),
    ("bulk retry over a backwards range", ("retry_many", {"filter": {"created_from": "2030-01-02T00:00:00Z",
                                                                     "created_to": "2030-01-01T00:00:00Z"}}),
     ("POST", "/api/v1/workflows/bulk/retry", {"filter": {"created_from": "2030-01-02T00:00:00Z",
                                                          "created_to": "2030-01-01T00:00:00Z"}}),
     ["ops", "retry-workflows", "--created-from", "2030-01-02T00:00:00Z", "--created-to", "2030-01-01T00:00:00Z",
      "--yes"], "validation_error"),
    ("bulk cancel of a workflow name that cannot be", ("cancel_many", {"filter": {"workflow": "a b"}}),
     ("POST", "/api/v1/workflows/bulk/cancel", {"filter": {"workflow": "a b"}}),
     ["ops", "cancel-workflows", "--workflow", "a b", "--yes"], "validation_error"),
    ("bulk restart from a step that is not a name", ("restart_many", {"filter": {}, "from_step": "  "}),
     ("POST", "/api/v1/workflows/bulk/restart", {"from_step": "  "}),
     ["ops", "restart-workflows", "--from-step", "  ", "--yes"], "validation_error"),
    ("bulk restart from an empty step", ("restart_many", {"filter": {}, "from_step": ""}),
     ("POST", "/api/v1/workflows/bulk/restart", {"from_step": ""}),
     ["ops", "restart-workflows", "--from-step", "", "--yes"], "validation_error"),
]


@pytest.mark.parametrize(("call", "request_", "cli", "code"), [row[1:] for row in WORKFLOW_REFUSALS],
                         ids=[row[0] for row in WORKFLOW_REFUSALS])
async def test_a_workflow_refusal_gets_the_same_code_from_every_face_and_writes_nothing(py_app, http, db, dsn, call,
                                                                                          request_, cli, code):
    method, args = call
    operations = await db.fetchval("SELECT count(*) FROM dl_operations")
    with pytest.raises(DataloaderError) as caught:
        if isinstance(args, dict):
            await getattr(py_app.workflows, method)(**args)
        else:
            await getattr(py_app.workflows, method)(*args)
    assert caught.value.code == code
    assert await http_code(http, *request_) == code
    assert await cli_code(dsn, cli) == code
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == 0
    assert await db.fetchval("SELECT count(*) FROM dl_workflow_signals") == 0
    assert await db.fetchval("SELECT count(*) FROM dl_operations") == operations


async def test_a_restart_refusal_gets_the_same_code_from_every_face_and_changes_nothing(py_app, http, db, dsn):
    """What a restart still refuses, alike on every face (the console's form makes the same call:
    tests/ui/test_workflow_pages.py): a run that has not ended, a step the run never recorded. The
    run keeps its generation and history, and no restart is journaled."""
    from tests.workflows import flows  # registers the test workflows here

    run_id = str(await py_app.workflows.start("t.wait", {"dsn": dsn}))  # queued: no worker runs it
    for args, body, cli, code in (
            ({}, {}, [], "job_not_retryable"),
            ({"from_step": "zz"}, {"from_step": "zz"}, ["--from-step", "zz"], "validation_error")):
        with pytest.raises(DataloaderError) as caught:
            await py_app.workflows.restart(run_id, **args)
        assert caught.value.code == code
        assert await http_code(http, "POST", f"/api/v1/workflows/{run_id}/restart", body) == code
        assert await cli_code(dsn, ["workflows", "restart", run_id, *cli]) == code
    assert flows.QUEUE == (await py_app.workflows.get(run_id)).queue
    run = await py_app.workflows.get(run_id)
    assert (run.status, run.generation, run.steps) == ("queued", 0, [])
    assert await db.fetchval("SELECT count(*) FROM dl_job_events WHERE kind = 'workflow_restart'") == 0
