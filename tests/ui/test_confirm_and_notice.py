"""Issue 34: the console confirms destructive actions and says what every action did.

- A destructive action (every red button: cancel or delete a job, start a bulk operation, cancel an
  operation, stop an observer, cancel or restart a workflow run; and sending a run a signal) POSTed
  without `confirm=yes` answers a confirmation page and changes nothing; the page's own form, posted
  back, does it.
- Every action's redirect carries a notice that the next page shows once ("Job … canceled").
In process, through the HTTP app (httpx); the browser flow is in test_jobs_browser.py."""

from __future__ import annotations

import re
import uuid
from html import unescape
from pathlib import Path

import httpx
from starlette.routing import Route

import tests.workflows.flows  # noqa: F401  (registers t.wait, the workflow whose runs these tests act on)
from dataloader.ui.pages import PAGES
from tests.support.engine import enqueue
from tests.ui.conftest import console_client, csrf_of

TEMPLATES = Path(__file__).parents[2] / "src" / "dataloader" / "ui" / "templates"


def confirm_form(html: str) -> tuple[str, dict[str, list[str]]]:
    """The confirmation page's form: its action and fields (what the second button posts)."""
    form = re.search(r'<form method="post" action="([^"]+)" class="confirm">(.*?)</form>', html, re.S)
    assert form, "no confirmation form on the page"
    fields: dict[str, list[str]] = {}
    for name, value in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form.group(2)):
        fields.setdefault(unescape(name), []).append(unescape(value))
    return unescape(form.group(1)), fields


async def notice_after(client: httpx.AsyncClient, answer: httpx.Response) -> str:
    """The notice on the page a redirect leads to (and that it is shown once only)."""
    assert answer.status_code == 303, answer.text[-2000:]
    page = await client.get(answer.headers["location"])
    found = re.search(r'<p class="notice" role="status" id="notice">(.*?)</p>', page.text, re.S)
    assert found, f"no notice on {answer.headers['location']}"
    again = await client.get(answer.headers["location"])
    assert 'id="notice"' not in again.text, "a notice is shown once"
    return unescape(found.group(1))


USERS_ACTIONS = {"/users", "/users/{name}/role", "/users/{name}/password", "/users/{name}/disable",
                 "/users/{name}/enable", "/users/{name}/delete"}


async def start_run(client: httpx.AsyncClient) -> uuid.UUID:
    """A workflow run (tests/workflows/flows.py's t.wait), started through the HTTP API."""
    started = await client.post("/api/v1/workflows", json={"workflow": "t.wait", "input": {}})
    assert started.status_code == 201, started.text
    return uuid.UUID(started.json()["run_id"])


async def status_of(db, job_id) -> str | None:
    return await db.fetchval("SELECT status::text FROM dl_jobs WHERE job_id = $1", job_id)


def danger_actions() -> set[str]:
    """The action of every form with a red button in the templates (the confirmation page aside)."""
    found = set()
    for template in TEMPLATES.glob("*.html"):
        if template.name == "confirm.html":
            continue
        for form in re.findall(r"<form [^>]*>.*?</form>", template.read_text(), re.S):
            if 'class="danger"' in form:
                action = re.search(r'action="([^"]+)"', form).group(1)
                found.add(re.sub(r"\{\{[^}]*\}\}", "*", action))
    return found


def test_every_red_button_is_one_of_the_confirmed_actions():
    """A new destructive button must join the confirmed ones (and this test's list)."""
    assert danger_actions() == {"*/jobs/*/cancel", "*/jobs/*/delete", "*/bulk", "*/operations/*/cancel",
                                "*/observers/stop", "*/workflows/*/cancel", "*/workflows/*/restart",
                                "*/workflows/bulk", "*/users/*/delete", "*/tokens/*/revoke"}


async def test_an_unconfirmed_destructive_post_does_nothing_and_the_confirmation_does_it(db, dsn):
    await db.execute("DELETE FROM dl_operations")
    queue = f"confirm-{uuid.uuid4().hex[:8]}"
    queued = await enqueue(db, "dl.noop", queue=queue)
    finished = await enqueue(db, "dl.noop", queue=queue)
    await db.execute("UPDATE dl_jobs SET status = 'failed', finished_at = now() WHERE job_id = $1", finished)
    observer = f"obs-{uuid.uuid4().hex[:8]}"
    await db.execute("INSERT INTO dl_observers (name, kind) VALUES ($1, 'test.none')", observer)
    async with console_client(dsn) as client:
        csrf = csrf_of((await client.get("/ui/")).text)
        run = await start_run(client)  # queued: no worker here runs it
        cases = [
            (f"/ui/jobs/{queued}/cancel", {}, f"Cancel job {queued}?",
             lambda: status_of(db, queued), "queued", "canceled"),
            (f"/ui/jobs/{finished}/delete", {}, f"Delete job {finished}?",
             lambda: status_of(db, finished), "failed", None),
            ("/ui/bulk", {"queue": queue, "status": "canceled", "kind": "requeue"}, "Start requeue on 1 job?",
             lambda: db.fetchval("SELECT count(*) FROM dl_operations"), 0, 1),
            ("/ui/observers/stop", {"name": observer}, f"Stop observer {observer}?",
             lambda: db.fetchval("SELECT state::text FROM dl_observers WHERE name = $1", observer), "created",
             "deleted"),
            (f"/ui/workflows/{run}/cancel", {}, f"Cancel workflow run {run}?", lambda: status_of(db, run),
             "queued", "canceled"),
            (f"/ui/workflows/{run}/restart", {"from_step": ""}, f"Restart workflow run {run} from the start?",
             lambda: status_of(db, run), "canceled", "queued"),
            (f"/ui/workflows/{run}/signal", {"name": "go", "payload": '{"n": 1}'},
             f"Send signal 'go' to workflow run {run}?",
             lambda: db.fetchval("SELECT count(*) FROM dl_workflow_signals WHERE run_id = $1", run), 0, 1),
            ("/ui/workflows/bulk", {"workflow": "t.wait", "status": "queued", "action": "cancel", "from_step": ""},
             "Cancel 1 workflow run?", lambda: db.fetchval("SELECT count(*) FROM dl_operations"), 1, 2),
        ]
        for path, form, question, state, before, after in cases:
            asked = await client.post(path, data={"csrf": csrf, **form})
            assert asked.status_code == 200 and question in unescape(asked.text), (path, asked.text[-1500:])
            assert await state() == before, f"{path}: an unconfirmed POST changed something"
            action, fields = confirm_form(asked.text)
            assert action == path and fields["confirm"] == ["yes"]
            assert {k: v[0] for k, v in fields.items() if k not in ("csrf", "confirm")} == form
            done = await client.post(action, data=fields)
            assert done.status_code == 303, (path, done.text[-1500:])
            assert await state() == after, path
            if path == "/ui/bulk":
                operation = done.headers["location"].rsplit("/", 1)[1]
                cancel = await client.post(f"/ui/operations/{operation}/cancel", data={"csrf": csrf})
                assert cancel.status_code == 200 and "Cancel operation" in cancel.text
                assert await db.fetchval("SELECT state FROM dl_operations") == "running"
                confirmed = await client.post(f"/ui/operations/{operation}/cancel",
                                              data={"csrf": csrf, "confirm": "yes"})
                assert confirmed.status_code == 303
                assert await db.fetchval("SELECT state FROM dl_operations") == "canceled"


# The console's POST routes that are no action of an operator's on the system.
NOT_ACTIONS = {"/login", "/logout"}
# Actions that answer a page instead of a redirect with a notice: a new token's page shows its
# secret, which a notice (a cookie) must never carry.
ANSWER_A_PAGE = {"/tokens"}


async def test_every_action_says_what_it_did(db, dsn):
    await db.execute("DELETE FROM dl_operations")
    queue = f"said-{uuid.uuid4().hex[:8]}"
    job = await enqueue(db, "dl.noop", queue=queue)
    gone = await enqueue(db, "dl.noop", queue=queue)
    await db.execute("UPDATE dl_jobs SET status = 'succeeded', finished_at = now() WHERE job_id = $1", gone)
    observer = f"obs-{uuid.uuid4().hex[:8]}"
    await db.execute("INSERT INTO dl_observers (name, kind) VALUES ($1, 'test.none')", observer)
    ns = f"said{uuid.uuid4().hex[:6]}"
    await db.execute("INSERT INTO dl_processes (ns, id, status) VALUES ($1, 'p1', 'error')", ns)
    schedule = f"said-{uuid.uuid4().hex[:8]}"
    async with console_client(dsn) as client:
        created = await client.post("/api/v1/schedules", json={"name": schedule, "task": "dl.noop", "queue": queue,
                                                                "cron": "0 3 * * *", "tz": "UTC"})
        assert created.status_code == 201, created.text
        csrf = csrf_of((await client.get("/ui/")).text)
        said: dict[str, str] = {}

        async def act(route: str, path: str, form: dict[str, str] | None = None) -> str:
            text = await notice_after(client, await client.post(path, data={"csrf": csrf, "confirm": "yes",
                                                                            **(form or {})}))
            said[route] = text
            return text

        assert await act("/queues/pause", "/ui/queues/pause", {"queue": queue}) == \
            f"Queue {queue} paused: no job of it starts until it is resumed; running jobs finish."
        assert (await act("/queues/resume", "/ui/queues/resume", {"queue": queue})).startswith(f"Queue {queue} resumed")
        assert await act("/queues/limits", "/ui/queues/limits", {"queue": queue, "concurrency": "5",
                                                                   "rate": "10/1s"}) == \
            f"Limits of queue {queue} set: concurrency 5, per partition none, rate 10/1s, partition rate none."
        assert await act("/queues/limits", "/ui/queues/limits", {"queue": queue, "task": "dl.noop",
                                                                   "concurrency": "2"}) == \
            f"Limits of task dl.noop in queue {queue} set: concurrency 2, rate none."
        assert await act("/jobs/{job_id:uuid}/priority", f"/ui/jobs/{job}/priority", {"priority": "7"}) == \
            f"Priority of job {job} set to 7."
        assert await act("/jobs/{job_id:uuid}/cancel", f"/ui/jobs/{job}/cancel") == f"Job {job} canceled."
        assert (await act("/jobs/{job_id:uuid}/retry", f"/ui/jobs/{job}/retry")).startswith(
            f"Job {job} back in queue {queue} with a fresh attempt budget")
        assert await act("/jobs/{job_id:uuid}/delete", f"/ui/jobs/{gone}/delete") == \
            f"Job {gone} deleted with its journal."
        started = await act("/bulk", "/ui/bulk", {"queue": queue, "status": "queued", "kind": "set_priority",
                                                  "priority": "3"})
        operation = re.fullmatch(r"Operation ([0-9a-f-]{36}) started: set_priority on 1 job\.", started).group(1)
        for action, what in (("pause", "paused"), ("resume", "resumed"), ("cancel", "canceled")):
            assert (await act(f"/operations/{{operation_id:uuid}}/{action}", f"/ui/operations/{operation}/{action}")
                    ).startswith(f"Operation {operation} {what}")
        assert await act("/observers/stop", "/ui/observers/stop", {"name": observer}) == f"Observer {observer} stopped."
        assert (await act("/schedules/{name}/pause", f"/ui/schedules/{schedule}/pause")).startswith(
            f"Schedule {schedule} paused")
        assert (await act("/schedules/{name}/resume", f"/ui/schedules/{schedule}/resume")).startswith(
            f"Schedule {schedule} resumed: it ticks again from its next tick (next at ")
        assert (await act("/schedules/{name}/trigger", f"/ui/schedules/{schedule}/trigger")).startswith(
            f"Schedule {schedule} triggered: this job runs dl.noop in queue {queue} now")
        assert await act("/processes/{ns}/{process_id:path}/simple-repair", f"/ui/processes/{ns}/p1/simple-repair") \
            == f"Process p1 of {ns}: error cleared; it is running again."
        run = await start_run(client)
        assert await act("/workflows/{run_id:uuid}/signal", f"/ui/workflows/{run}/signal", {"name": "go"}) == \
            f"Signal 'go' sent to workflow run {run}."
        assert await act("/workflows/{run_id:uuid}/cancel", f"/ui/workflows/{run}/cancel") == \
            f"Workflow run {run} canceled."
        assert await act("/workflows/{run_id:uuid}/restart", f"/ui/workflows/{run}/restart", {"from_step": ""}) == \
            f"Workflow run {run} restarted from the start: it is queued."
        bulk = await act("/workflows/bulk", "/ui/workflows/bulk", {"workflow": "t.wait", "status": "queued",
                                                                   "action": "cancel"})
        assert re.fullmatch(r"Operation [0-9a-f-]{36} started: workflow_cancel on 1 workflow run\.", bulk), bulk
        assert await act("/keys/rotate", "/ui/keys/rotate") == \
            "Encryption at rest is off on this node: nothing to rotate (set DL_ENCRYPTION_KEYS)."
        # last: while a token exists the API (start_run above) needs a bearer
        created = await client.post("/ui/tokens", data={"csrf": csrf, "name": f"said-{queue}", "scope": "read"})
        token = re.search(r'data-token="said-[^"]+">\s*<th scope="row">[^<]*<span class="note mono">([0-9a-f-]{36})',
                          created.text).group(1)
        assert await act("/tokens/{token_id:uuid}/revoke", f"/ui/tokens/{token}/revoke") == \
            f"Token said-{queue} revoked: it is refused from now on."
    # repair and restart need the processor's tasks to run: their notices are checked in the browser
    # (test_processes_browser.py)
    # the users page's actions need a signed-in admin (a user closes this open console): their notices
    # are checked in test_users_page.py
    covered = set(said) | {"/processes/{ns}/{process_id:path}/repair", "/processes/{ns}/{process_id:path}/restart"} \
        | USERS_ACTIONS
    actions = {route.path for page in PAGES for route in page.routes
               if isinstance(route, Route) and "POST" in (route.methods or ())} - NOT_ACTIONS - ANSWER_A_PAGE
    assert actions == covered, "every action says what it did (a new one joins this test)"
