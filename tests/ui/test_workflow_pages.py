"""The console's Workflows pages, in process through the HTTP app (httpx), on real runs:

- the list shows runs newest first, filters by workflow and status, pages with "Older →" (the
  filters kept), and says a filter the manager refuses;
- a run's page is its recorded history as a timeline (a wait's deadline, a gather's children
  linked to their pages and back), with a hostile recorded result or error escaped and cut;
- cancel, send a signal and restart from a step each ask first and then make the manager's call
  (a refusal is the App's error as a page, nothing written); read-only mode hides and refuses them;
- a path that names no run is a 404 page that says so.

Runs that must really run (steps, waits, gathers) run on an App of their own with workers on the
workflows' queue (tests/workflows/flows.py); the console's App has none."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from html import unescape

import asyncpg
import httpx

from dataloader import App
from dataloader.model.principal import Action
from dataloader.ui.pages.workflows import PAGE_SIZE, SHOWN_CHARS
from dataloader.ui.render import can_for
from tests.conftest import wait_until
from tests.ui.conftest import console_client, csrf_of
from tests.workflows.conftest import workflow_settings
from tests.workflows.flows import PROBE_DDL
from tests.workflows.test_workflows import _waiting

ADMIN_CAN = can_for(frozenset(Action))


@asynccontextmanager
async def runner(dsn: str) -> AsyncIterator[App]:
    """An App whose workers run the test workflows while the block lasts."""
    async with App(workflow_settings(dsn)) as app, app.running():
        yield app


@asynccontextmanager
async def starter(dsn: str) -> AsyncIterator[App]:
    """An App that starts runs and runs none (no workers): they stay queued."""
    async with App(workflow_settings(dsn, workers=[])) as app:
        yield app


async def status_of(db: asyncpg.Pool, run_id: uuid.UUID) -> str:
    return await db.fetchval("SELECT status::text FROM dl_jobs WHERE job_id = $1", run_id)


async def ended(db: asyncpg.Pool, run_id: uuid.UUID) -> bool:
    return await status_of(db, run_id) in ("succeeded", "failed", "canceled", "lost")


def listed(html: str) -> list[str]:
    return re.findall(r'<tr data-run="([0-9a-f-]{36})">', html)


def step_items(html: str) -> dict[str, str]:
    """The timeline's items by position."""
    return dict(re.findall(r'<li data-seq="(\d+)" data-kind="\w+">(.*?)</li>\s*(?=<li data-seq|</ol>)', html, re.S))


async def confirm(client: httpx.AsyncClient, path: str, fields: dict[str, str]) -> tuple[str, httpx.Response]:
    """Post an action's form from the run's page, then the confirmation page's form: what the
    confirmation page asked, and the answer to the confirmed post."""
    page = await client.get(path.rsplit("/", 1)[0])
    asked = await client.post(path, data={"csrf": csrf_of(page.text), **fields})
    assert asked.status_code == 200 and 'id="confirm-action"' in asked.text, asked.text
    hidden = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', asked.text))
    assert hidden["confirm"] == "yes"
    done = await client.post(path, data={k: unescape(v) for k, v in hidden.items()})
    return unescape(re.search(r'id="consequence">(.*?)</p>', asked.text, re.S).group(1)), done


async def test_the_workflows_page_lists_filters_and_pages_runs(db, dsn):
    async with starter(dsn) as app, console_client(dsn) as client:
        steps = [await app.workflows.start("t.steps", {"dsn": dsn}) for _ in range(PAGE_SIZE + 2)]
        waits = [await app.workflows.start("t.wait", {"dsn": dsn}) for _ in range(2)]
        await app.workflows.cancel(waits[0])

        page = await client.get("/ui/workflows")
        assert page.status_code == 200
        assert '<a href="/ui/workflows" aria-current="page">Workflows</a>' in page.text, "in the navigation"
        newest = [str(r) for r in [*reversed(waits), *reversed(steps)]]
        assert listed(page.text) == newest[:PAGE_SIZE]
        older = re.search(r'<a href="([^"]+)" rel="next">Older', page.text).group(1)
        rest = await client.get(unescape(older))
        assert listed(rest.text) == newest[PAGE_SIZE:] and 'rel="next"' not in rest.text

        only_waits = await client.get("/ui/workflows", params={"workflow": "t.wait"})
        assert listed(only_waits.text) == [str(waits[1]), str(waits[0])]
        canceled = await client.get("/ui/workflows", params={"status": "canceled"})
        assert listed(canceled.text) == [str(waits[0])]
        assert '<option value="canceled" selected>' in canceled.text, "the form keeps the filter"
        paged = await client.get("/ui/workflows", params={"workflow": "t.steps"})
        assert "workflow=t.steps" in re.search(r'href="([^"]+)" rel="next"', paged.text).group(1), \
            "the next page keeps the filter"

        refused = await client.get("/ui/workflows", params={"status": "sleeping"})
        assert refused.status_code == 422 and "validation_error: status: unknown status" in unescape(refused.text)
        nothing = await client.get("/ui/workflows", params={"workflow": "t.nobody"})
        assert listed(nothing.text) == [] and "No workflow run of t.nobody" in nothing.text


async def test_a_run_page_is_its_timeline_with_a_waits_deadline(db, dsn):
    await db.execute(PROBE_DDL)
    async with runner(dsn) as app, console_client(dsn) as client:
        run_id = await app.workflows.start("t.wait", {"dsn": dsn, "timeout": 600})
        await wait_until(lambda: _waiting(db, run_id), timeout=10, message="the run waits")
        page = await client.get(f"/ui/workflows/{run_id}")
        assert page.status_code == 200
        assert 'id="run-status">queued' in page.text and "(wait go pending)" in page.text
        items = step_items(page.text)
        assert list(items) == ["1", "2"]
        assert re.search(r'<strong class="kind">step</strong> <span class="mono step-name">started</span>\s*'
                         r'<span class="status done">done</span>', items["1"])
        assert '<pre class="step-result">1</pre>' in items["1"], "the step's recorded result"
        assert '<span class="status pending">pending</span>' in items["2"] and "deadline <time" in items["2"]
        wake_at = await db.fetchval("SELECT wake_at FROM dl_workflow_steps WHERE run_id = $1 AND seq = 2", run_id)
        assert wake_at.strftime("%Y-%m-%d %H:%M:%S") in items["2"]
        assert f'href="/ui/jobs/{run_id}"' in page.text, "the run is its job: linked"
        job_page = await client.get(f"/ui/jobs/{run_id}")
        assert f'<a href="/ui/workflows/{run_id}" id="job-workflow-run">' in job_page.text, "and back"
        assert all(f'id="{action}"' in page.text for action in ("cancel-run", "send-signal"))
        assert 'id="restart-run"' not in page.text, "restart is offered only to an ended run"


async def test_a_gathers_children_are_linked_to_their_pages_and_back(db, dsn):
    await db.execute(PROBE_DDL)
    async with runner(dsn) as app, console_client(dsn) as client:
        run_id = await app.workflows.start("t.gather", {"dsn": dsn, "modes": ["ok", "fail"]})
        await app.workflows.result(run_id, timeout=30)
        children = [r["run_id"] for r in await db.fetch(
            "SELECT run_id FROM dl_workflow_runs WHERE parent_run_id = $1 ORDER BY parent_seq, run_id", run_id)]
        page = await client.get(f"/ui/workflows/{run_id}")
        gather = step_items(page.text)["1"]
        linked = re.findall(r'<a class="mono" href="/ui/workflows/([0-9a-f-]{36})" id="child-1-[0-9]+">', gather)
        assert sorted(linked) == sorted(str(c) for c in children) and len(linked) == 2
        assert '<span class="status succeeded">succeeded</span>' in gather
        assert '<span class="status failed">failed</span>' in gather
        child = await client.get(f"/ui/workflows/{linked[1]}")
        assert child.status_code == 200 and f'id="run-parent">{run_id}</a>' in child.text
        assert "child 1 refuses" in child.text, "the failed child's error"


async def test_a_pending_gathers_children_are_linked_and_a_cancel_ends_them_with_their_parent(db, dsn):
    await db.execute(PROBE_DDL)
    async with runner(dsn) as app, console_client(dsn) as client:
        run_id = await app.workflows.start("t.gather", {"dsn": dsn, "modes": ["wait", "wait"]})
        children = [uuid.uuid5(run_id, f"1:{i}") for i in range(2)]  # a gather's child ids (workflows/context.py)

        async def all_waiting() -> bool:
            return all([await _waiting(db, child) for child in children])

        await wait_until(all_waiting, timeout=20, message="both children wait")
        page = await client.get(f"/ui/workflows/{run_id}")
        gather = step_items(page.text)["1"]
        assert '<span class="status pending">pending</span>' in gather and "2 not ended" in gather
        assert re.findall(r'href="/ui/workflows/([0-9a-f-]{36})"', gather) == [str(c) for c in children]
        said, done = await confirm(client, f"/ui/workflows/{run_id}/cancel", {})
        assert "every run below it that has not ended" in said and done.status_code == 303
        assert [await status_of(db, r) for r in (run_id, *children)] == ["canceled"] * 3, "the run and its children"


async def test_a_hostile_recorded_result_and_error_are_escaped_and_cut(db, dsn):
    async with starter(dsn) as app, console_client(dsn) as client:
        run_id = await app.workflows.start("t.steps", {"dsn": "<b>input</b>"})
        hostile = {"html": "<script>alert('result')</script>", "long": "x" * 2000}
        await db.execute(
            "INSERT INTO dl_workflow_steps (run_id, seq, kind, name, state, result, error, attempts) VALUES "
            "($1, 1, 'step', '<i>name</i>', 'done', $2::jsonb, NULL, 1), "
            "($1, 2, 'step', 'two', 'failed', NULL, $3, 3)",
            run_id, json.dumps(hostile), "<img src=x onerror=alert('error')>" + "e" * 2000)
        page = await client.get(f"/ui/workflows/{run_id}")
        assert page.status_code == 200
        for raw in ("<script>alert", "<img src=x", "<i>name</i>", "<b>input</b>"):
            assert raw not in page.text, raw
        items = step_items(page.text)
        assert "&lt;script&gt;alert(&#39;result&#39;)&lt;/script&gt;" in items["1"]
        assert "&lt;i&gt;name&lt;/i&gt;" in items["1"]
        assert "&lt;img src=x onerror=alert(&#39;error&#39;)&gt;" in items["2"] and "3 attempts" in items["2"]
        result = unescape(re.search(r'<pre class="step-result">(.*?)</pre>', items["1"], re.S).group(1))
        error = unescape(re.search(r'<pre class="errtext step-error">(.*?)</pre>', items["2"], re.S).group(1))
        assert len(result) == len(error) == SHOWN_CHARS + 1 and result.endswith("…") and error.endswith("…")


async def test_cancel_asks_first_then_cancels_the_run(db, dsn):
    async with starter(dsn) as app, console_client(dsn) as client:
        run_id = await app.workflows.start("t.wait", {"dsn": dsn})
        page = await client.get(f"/ui/workflows/{run_id}")
        asked = await client.post(f"/ui/workflows/{run_id}/cancel", data={"csrf": csrf_of(page.text)})
        assert asked.status_code == 200 and "every run below it" in asked.text
        assert await status_of(db, run_id) == "queued", "nothing is done before the confirmation"
        _, done = await confirm(client, f"/ui/workflows/{run_id}/cancel", {})
        assert done.status_code == 303 and done.headers["location"] == f"/ui/workflows/{run_id}"
        assert await status_of(db, run_id) == "canceled"
        after = await client.get(done.headers["location"])
        assert f"Workflow run {run_id} canceled." in after.text
        assert 'id="cancel-run"' not in after.text and 'id="restart-run"' in after.text
        again = await client.post(f"/ui/workflows/{run_id}/cancel", data={"csrf": csrf_of(after.text)})
        assert again.status_code == 409 and "workflow_finished" in again.text, "the manager's refusal, as a page"


async def test_a_signal_asks_first_then_wakes_the_waiting_run(db, dsn):
    await db.execute(PROBE_DDL)
    async with runner(dsn) as app, console_client(dsn) as client:
        run_id = await app.workflows.start("t.wait", {"dsn": dsn, "timeout": 600})
        await wait_until(lambda: _waiting(db, run_id), timeout=10, message="the run waits")
        page = await client.get(f"/ui/workflows/{run_id}")
        bad = await client.post(f"/ui/workflows/{run_id}/signal",
                                data={"csrf": csrf_of(page.text), "name": "go", "payload": "{nope"})
        assert bad.status_code == 422 and "payload: must be JSON" in bad.text
        bad_name = await client.post(f"/ui/workflows/{run_id}/signal",
                                     data={"csrf": csrf_of(page.text), "name": "bad name", "confirm": "yes"})
        assert bad_name.status_code == 422 and "validation_error" in bad_name.text
        assert await db.fetchval("SELECT count(*) FROM dl_workflow_signals") == 0, "nothing stored so far"

        said, done = await confirm(client, f"/ui/workflows/{run_id}/signal",
                                   {"name": "go", "payload": '{"amount": 30, "note": "<b>"}'})
        assert "a wait for 'go' takes it" in said and '"note": "<b>"' in said
        assert done.status_code == 303 and "sent" in (await client.get(done.headers["location"])).text
        assert await app.workflows.result(run_id, timeout=20) == {"first": {"amount": 30, "note": "<b>"},
                                                                  "second": None}
        late = await client.post(f"/ui/workflows/{run_id}/signal",
                                 data={"csrf": csrf_of(page.text), "name": "go"})
        assert late.status_code == 409 and "workflow_finished" in late.text
    assert await db.fetchval("SELECT count(*) FROM dl_workflow_signals") == 1


async def test_restart_from_a_chosen_step_runs_it_again_and_keeps_the_steps_before(db, dsn):
    await db.execute(PROBE_DDL)
    await db.execute("TRUNCATE wf_probe")
    async with runner(dsn) as app, console_client(dsn) as client:
        run_id = await app.workflows.start("t.fixable", {"dsn": dsn, "fix_after": 2})
        await wait_until(lambda: ended(db, run_id), timeout=20, message="the run fails at b")
        page = await client.get(f"/ui/workflows/{run_id}")
        assert 'id="run-status">failed' in page.text
        options = re.findall(r'<option value="([^"]*)">', re.search(r'<select id="restart-from".*?</select>',
                                                                    page.text, re.S).group(0))
        assert options == ["", "a", "b"], "the start and each recorded step, once"
        unknown = await client.post(f"/ui/workflows/{run_id}/restart",
                                    data={"csrf": csrf_of(page.text), "from_step": "zz", "confirm": "yes"})
        assert unknown.status_code == 422 and "no recorded step" in unescape(unknown.text)

        said, done = await confirm(client, f"/ui/workflows/{run_id}/restart", {"from_step": "b"})
        assert "from step 'b'" in said and "the steps before keep their results" in said
        assert done.status_code == 303
        assert (await app.workflows.result(run_id, timeout=20))["b"] == 2
        ran = dict(await db.fetch("SELECT step, count(*) FROM wf_probe WHERE run_id = $1 GROUP BY step",
                                  str(run_id)))
        assert ran == {"a": 1, "b": 2, "c": 1}, "a kept its result; b ran again from the restart"
        refused = await client.post(f"/ui/workflows/{run_id}/restart",
                                    data={"csrf": csrf_of(page.text), "from_step": ""})
        assert refused.status_code == 409 and "job_not_retryable" in refused.text, "a succeeded run"


async def test_read_only_hides_and_refuses_the_run_actions(db, dsn):
    async with starter(dsn) as app, console_client(dsn, ui_read_only=True) as client:
        waiting = await app.workflows.start("t.wait", {"dsn": dsn})
        stopped = await app.workflows.start("t.wait", {"dsn": dsn})
        await app.workflows.cancel(stopped)
        for run_id in (waiting, stopped):
            page = await client.get(f"/ui/workflows/{run_id}")
            assert page.status_code == 200 and 'id="run-status"' in page.text
            assert not any(f'id="{a}"' in page.text for a in ("cancel-run", "send-signal", "restart-run"))
        csrf = csrf_of(page.text)
        for path, fields in ((f"/ui/workflows/{waiting}/cancel", {"confirm": "yes"}),
                             (f"/ui/workflows/{waiting}/signal", {"name": "go", "confirm": "yes"}),
                             (f"/ui/workflows/{stopped}/restart", {"from_step": "", "confirm": "yes"})):
            refused = await client.post(path, data={"csrf": csrf, **fields})
            assert refused.status_code == 403 and "read-only" in refused.text, path
    assert await status_of(db, waiting) == "queued" and await status_of(db, stopped) == "canceled"
    assert await db.fetchval("SELECT count(*) FROM dl_workflow_signals") == 0


async def test_a_path_that_names_no_run_is_a_404_page(db, dsn):
    async with console_client(dsn) as client:
        for text in ("not-a-uuid", str(uuid.uuid4())):
            page = await client.get(f"/ui/workflows/{text}")
            assert page.status_code == 404 and "text/html" in page.headers["content-type"]
            assert "workflow_not_found" in page.text and text in page.text
        job_only = await client.post("/api/v1/jobs/trigger", json={"queue": "q", "task": "dl.noop"})
        job_id = job_only.json()["job_id"]
        page = await client.get(f"/ui/workflows/{job_id}")
        assert page.status_code == 404 and f"no workflow run {job_id}" in page.text, "a plain job is no run"


async def test_a_step_run_as_a_job_of_its_own_shows_its_job_linked_with_its_queue_and_lock_key(db, dsn):
    from dataloader import Queue
    from tests.workflows.step_flows import QUEUE, STEP_QUEUE

    await db.execute(PROBE_DDL)
    async with App(workflow_settings(dsn, workers=[Queue(QUEUE, 2), Queue(STEP_QUEUE, 2)])) as app, app.running():
        run_id = await app.workflows.start("t.sj.charge", {"dsn": dsn, "amount": 3, "account": "ui<1>"})
        await app.workflows.result(run_id, timeout=30)
        job_id = (await app.workflows.get(run_id)).steps[0].job_id
    async with console_client(dsn) as client:
        page = await client.get(f"/ui/workflows/{run_id}")
    assert page.status_code == 200
    items = step_items(page.text)
    assert f'href="/ui/jobs/{job_id}"' in items["1"]
    assert f'<span class="mono">{STEP_QUEUE}</span>' in items["1"] and "acct:ui&lt;1&gt;" in items["1"]  # escaped
    assert "step-job" not in items["2"]  # the step after it ran in the run's job


FOCUSABLE = re.compile(r"<(a\s[^>]*href|button|summary|select|textarea|input(?![^>]*type=\"hidden\"))[^>]*>")


def anonymous_focusable(html: str) -> list[str]:
    """The focusable elements of a fragment without an id: a live swap under one loses the focus."""
    return [m.group(0) for m in FOCUSABLE.finditer(html) if not re.search(r'\sid="[^"]+"', m.group(0))]


async def test_a_runs_page_is_live_on_the_nodes_one_poll(db, dsn):
    """The run's page subscribes to its topic; the node's live poll renders the run once per round
    however many browsers watch it, and the fragment moves on as the run does: the first wait
    pending, the second, the end; its focusable elements all have ids."""
    from dataloader.ui.live import LiveHub
    from dataloader.ui.pages.workflows import render_live

    await db.execute(PROBE_DDL)
    async with runner(dsn) as app, console_client(dsn) as client:
        run_id = await app.workflows.start("t.wait", {"dsn": dsn, "timeout": 600, "twice": True})
        await wait_until(lambda: _waiting(db, run_id), timeout=20, message="the run waits")
        page = await client.get(f"/ui/workflows/{run_id}")
        topic = f"workflow:{run_id}"
        assert f'sse-connect="/ui/live?topic={topic}"' in page.text and f'sse-swap="{topic}"' in page.text
        assert (await client.get("/ui/live?topic=workflow:not-a-run")).status_code == 400

        hub = LiveHub(lambda t: render_live(app, t.partition(":")[2], "/ui", ADMIN_CAN), 0.05)
        seen: list[str] = []

        async def next_fragment(queue, wanted) -> str:
            while True:
                _, html = await asyncio.wait_for(queue.get(), 30)
                seen.append(html)
                if wanted(html):
                    return html

        def waits(html: str) -> int:
            return html.count('data-kind="wait"')

        async with hub.subscribe(frozenset({topic})) as first, hub.subscribe(frozenset({topic})) as second:
            html = await next_fragment(first, lambda h: waits(h) == 1)
            assert 'id="signal-name"' in html and anonymous_focusable(html) == []
            await app.workflows.signal(run_id, "go", 1)
            html = await next_fragment(first, lambda h: waits(h) == 2)
            assert anonymous_focusable(html) == []
            await app.workflows.signal(run_id, "go", 2)
            html = await next_fragment(first, lambda h: 'id="run-status">succeeded' in h)
            assert 'id="cancel-run"' not in html and anonymous_focusable(html) == []
            assert second.qsize() >= 1, "the other browser got the same fragments"
        assert hub.renders == hub.rounds, "one render per round for the topic, not one per browser"


async def test_a_restart_from_before_a_gather_from_the_console_and_the_earlier_generations_children(db, dsn):
    from tests.workflows import flows

    await db.execute(PROBE_DDL)
    flows.BROKEN_CHILDREN.add(1)
    try:
        async with runner(dsn) as app, console_client(dsn) as client:
            run_id = await app.workflows.start("t.regather", {"dsn": dsn})
            await wait_until(lambda: ended(db, run_id), timeout=30, message="the run fails at its gather")
            flows.BROKEN_CHILDREN.clear()
            said, done = await confirm(client, f"/ui/workflows/{run_id}/restart", {"from_step": "plan"})
            assert "new children" in said and done.status_code == 303, done.text
            await app.workflows.result(run_id, timeout=30)
            page = await client.get(f"/ui/workflows/{run_id}")
    finally:
        flows.BROKEN_CHILDREN.clear()
    assert 'id="run-generation">1 time (generation 1)' in page.text
    earlier = re.search(r'<ul class="children" id="run-earlier-children">(.*?)</ul>', page.text, re.S)
    assert earlier and earlier.group(1).count('data-generation="0"') == 3
    assert '<span class="status failed">failed</span>' in earlier.group(1)
    live = page.text[page.text.index('id="run-live"'):]
    assert anonymous_focusable(live[:live.index("</main>") if "</main>" in live else None]) == []
