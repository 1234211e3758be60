"""Process recovery's HTTP and CLI faces (issue 11): restart one, restart many as a tracked
operation, the consistency check; errors in the jobs API's shape, bad input a 4xx writing nothing."""

from __future__ import annotations

import json
import subprocess

import pytest

from dataloader.exceptions import ProcessTaskFailed
from tests.conftest import wait_until
from tests.processes.processors import register
from tests.support.cli import run


async def broken(app, ns: str, pid: str) -> None:
    await app.processes.init(ns, pid, {"n": 1})
    with pytest.raises(ProcessTaskFailed):
        await app.processes.call(ns, pid, {"fail": "declined"})


async def test_http_restart_one_and_many_and_check(client, app, ns, pdb):
    base = f"/api/v1/processes/{ns}"
    for pid in ("a", "b", "c"):
        await broken(app, ns, pid)
    # the failing call fails again when re-run (same args): the process is back in error, by a new task
    one = await client.post(f"{base}/a/restart", json={"from": "error"})
    assert one.status_code == 200, one.text
    body = one.json()
    assert body["from_type"] == "call" and body["status"] == "running" and len(body["queued_tasks"]) == 1
    await wait_until(lambda: pdb.fetchval("SELECT corrupted_by = $1::uuid FROM dl_processes WHERE ns = $2 AND id = 'a'",
                                          body["queued_tasks"][0], ns), message="the re-run call failing again")
    start = await client.post(f"{base}/b/restart", json={"from_event": 1})
    assert start.status_code == 200 and start.json()["from_type"] == "init"
    assert start.json()["removed_events"] == 1 and start.json()["status"] == "init"
    missing = await client.post(f"{base}/nobody/restart", json={"from": "start"})
    assert missing.status_code == 404 and missing.json()["error"] == "process_not_found"

    dry = await client.post(f"{base}/restart", json={"filter": {"statuses": ["error"]}, "from": "error",
                                                     "dry_run": True})
    assert dry.status_code == 200 and dry.json()["total"] >= 1
    started = await client.post(f"{base}/restart", json={"filter": {"ids": ["c"]}, "from": "start",
                                                         "started_by": "bob"})
    assert started.status_code == 201, started.text
    op = started.json()
    assert op["kind"] == "process_restart" and op["filter"] == {"ns": ns, "ids": ["c"]} and op["total"] == 1
    done = await app.operations.wait(op["operation_id"], timeout=30)
    assert (done.state, done.changed) == ("finished", 1)
    shown = (await client.get(f"/api/v1/operations/{op['operation_id']}")).json()
    assert (shown["state"], shown["done"], shown["total"], shown["started_by"]) == ("finished", 1, 1, "bob")

    await wait_until(lambda: pdb.fetchval(
        "SELECT count(*) = 0 FROM dl_process_tasks WHERE ns = $1 AND status = 'waiting'", ns), timeout=30)
    checked = await client.post(f"{base}/check", json={"limit": 2})
    assert checked.status_code == 200 and checked.json()["examined"] == 2 and checked.json()["next_cursor"]
    rest = await client.post(f"{base}/check", json={"cursor": checked.json()["next_cursor"], "repair": True})
    assert rest.status_code == 200 and rest.json()["examined"] == 1 and rest.json()["findings"] == []


@pytest.mark.parametrize(("path", "body"), [
    ("/a/restart", {}),
    ("/a/restart", {"from": "start", "from_event": 1}),
    ("/a/restart", {"from": "middle"}),
    ("/a/restart", {"from_event": 0}),
    ("/a/restart", {"from_task": "not-a-uuid"}),
    ("/a/restart", {"from": "start", "extra": 1}),
    ("/restart", {"filter": {"statuses": ["sleeping"]}, "from": "error"}),
    ("/restart", {"filter": {"ns": "other"}, "from": "error"}),
    ("/restart", {"filter": {}, "from_task": "x"}),
    ("/restart", {"filter": {}}),
    ("/check", {"limit": 0}),
    ("/check", {"repair": "yes please"}),
])
async def test_bad_recovery_requests_are_4xx_and_write_nothing(client, app, ns, pdb, path, body):
    await app.processes.init(ns, "a", {"n": 1})
    before = await pdb.fetchrow("SELECT version, (SELECT count(*) FROM dl_operations) AS ops FROM dl_processes "
                                "WHERE ns = $1 AND id = 'a'", ns)
    response = await client.post(f"/api/v1/processes/{ns}{path}", json=body)
    assert response.status_code == 422, response.text
    assert set(response.json()) >= {"error", "detail"}
    after = await pdb.fetchrow("SELECT version, (SELECT count(*) FROM dl_operations) AS ops FROM dl_processes "
                               "WHERE ns = $1 AND id = 'a'", ns)
    assert after == before


def cli(cli_env, *args: str) -> subprocess.CompletedProcess[str]:
    """In-process (the `processes` and `ops` groups as real processes: test_api_cli.py, test_search_faces.py)."""
    return run(list(args), cli_env)


async def test_cli_restart_check_and_bulk_dry_run(app, ns, pdb, cli_env):
    register(ns)
    async with app.running():
        await broken(app, ns, "p1")
    restarted = cli(cli_env, "processes", "restart", ns, "p1", "--from", "start")
    assert restarted.returncode == 0, restarted.stderr
    assert json.loads(restarted.stdout)["removed_events"] == 1
    both = cli(cli_env, "processes", "restart", ns, "p1", "--from", "start", "--from-event", "1")
    assert both.returncode != 0 and "exactly one" in both.stderr
    # nobody serves the namespace in the CLI's App: the re-queued init waits, so the check
    # reports nothing wrong (a queued task is no fault)
    checked = cli(cli_env, "processes", "check", ns)
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout) == {"ns": ns, "examined": 1, "findings": []}
    await pdb.execute("UPDATE dl_processes SET last_event_id = last_event_id - 1 WHERE ns = $1", ns)
    await pdb.execute("INSERT INTO dl_process_events (ns, process_id, event_id, payload) "
                      "VALUES ($1, 'p1', 7, '{}')", ns)
    faulty = cli(cli_env, "processes", "check", ns)
    assert faulty.returncode == 3 and json.loads(faulty.stdout)["findings"][0]["kind"] == "history_ahead"
    dry = cli(cli_env, "ops", "restart-processes", ns, "--status", "init", "--from", "start", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["total"] == 1 and json.loads(dry.stdout)["kind"] == "process_restart"
