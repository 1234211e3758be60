"""The processes faces: HTTP (`/api/v1/processes/{ns}/...`: init, call, repair, simple repair,
get with history pages, list, trace, remove; errors in the jobs API's shape; bad input is a 4xx
that writes nothing) and the CLI (`dataloader processes get|list|trace|repair|simple-repair|remove`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.processes.processors import register


async def test_http_init_call_get_list_trace_repair_remove(client, ns, pdb):
    base = f"/api/v1/processes/{ns}"
    created = await client.post(base, json={"id": "p1", "args": {"n": 1, "extra": 2}})
    assert created.status_code == 201, created.text
    assert created.json()["response"]["kind"] == "init"
    assert created.headers["location"] == f"{base}/p1"
    again = await client.post(base, json={"id": "p1", "args": {}})
    assert again.status_code == 409 and again.json()["error"] == "process_exists"

    called = await client.post(f"{base}/p1/call",
                               json={"args": {"n": 2}, "range": {"limit": 1, "direction": "backward"}})
    assert called.status_code == 200 and called.json()["response"]["history"] == 1

    page = (await client.get(f"{base}/p1", params={"offset": 1, "limit": 2})).json()
    assert [e["event_id"] for e in page["history"]] == [2, 3] and page["status"] == "running"
    back = (await client.get(f"{base}/p1", params={"limit": 2, "direction": "backward"})).json()
    assert [e["event_id"] for e in back["history"]] == [4, 3]

    failed = await client.post(f"{base}/p1/call", json={"args": {"fail": "declined"}})
    assert failed.status_code == 422 and failed.json()["error"] == "process_task_failed"
    assert "declined" in failed.json()["detail"]
    wrong = await client.post(f"{base}/p1/call", json={"args": {}})
    assert wrong.status_code == 409 and wrong.json()["error"] == "process_wrong_status"
    assert "error" in wrong.json()["detail"]

    listed = (await client.get(base, params={"status": "error"})).json()
    assert [p["id"] for p in listed["processes"]] == ["p1"] and listed["next_cursor"] is None

    trace = (await client.get(f"{base}/p1/trace")).json()["tasks"]
    assert [t["type"] for t in trace] == ["init", "call", "call"]
    assert [t["status"] for t in trace] == ["finished", "finished", "error"]
    assert len(trace[0]["events"]) == 3 and trace[2]["events"] == []

    repaired = await client.post(f"{base}/p1/repair", json={"args": {"n": 9}})
    assert repaired.status_code == 200 and repaired.json()["response"]["kind"] == "repair"
    assert (await client.post(f"{base}/p1/simple-repair")).status_code == 409

    assert (await client.delete(f"{base}/p1")).status_code == 204
    missing = await client.get(f"{base}/p1")
    assert missing.status_code == 404 and missing.json()["error"] == "process_not_found"
    assert await pdb.fetchval("SELECT count(*) FROM dl_processes") == 0


async def test_http_timeout_is_a_504_and_the_task_goes_on(client, ns):
    base = f"/api/v1/processes/{ns}"
    await client.post(base, json={"id": "p1"})
    slow = await client.post(f"{base}/p1/call", json={"args": {"sleep": 0.8}, "timeout_sec": 0.1,
                                                       "idempotency_key": "k"})
    assert slow.status_code == 504 and slow.json()["error"] == "process_timeout"
    done = await client.post(f"{base}/p1/call", json={"args": {"sleep": 0.8}, "idempotency_key": "k"})
    assert done.status_code == 200


@pytest.mark.parametrize(("path", "body"), [
    ("", {"id": "", "args": {}}),
    ("", {"id": "a\u0000b"}),
    ("", {"id": "p", "args": {"x": "\u0000"}}),
    ("", {"id": "p", "unknown": 1}),
    ("", {"id": "p", "timeout_sec": 0}),
    ("", {"id": "p", "idempotency_key": ""}),
    ("/p/call", {"range": {"direction": "up"}}),
    ("/p/call", {"range": {"offset": -1}}),
])
async def test_bad_input_is_a_422_that_writes_nothing(client, ns, pdb, path, body):
    response = await client.post(f"/api/v1/processes/{ns}{path}", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "validation_error"
    assert await pdb.fetchval("SELECT count(*) FROM dl_processes") == 0
    assert await pdb.fetchval("SELECT count(*) FROM dl_jobs") == 0


async def test_unknown_namespace_and_bad_paths_are_4xx(client):
    unknown = await client.post("/api/v1/processes/nobody", json={"id": "p"})
    assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_namespace"
    assert (await client.get("/api/v1/processes/bad%20ns/p")).status_code == 422
    assert (await client.get("/api/v1/processes/nobody/p", params={"direction": "up"})).status_code == 422
    assert (await client.get("/api/v1/processes/nobody", params={"cursor": "!!"})).status_code == 422
    assert (await client.get("/api/v1/processes/nobody", params={"cursor": "abc"})).json()["error"] == "invalid_cursor"


def cli(subprocess_env, *args: str, modules: str = "tests.processes.cli_processors"
        ) -> subprocess.CompletedProcess[str]:
    env = {**subprocess_env, "DL_PIPELINE_MODULES": modules}
    return subprocess.run([sys.executable, "-m", "dataloader", "processes", *args], env=env,
                          capture_output=True, text=True, timeout=60)


async def test_cli_get_list_trace_simple_repair_remove(app, pdb, subprocess_env):
    register("clitest", replace=True)
    try:
        async with app.running():
            await app.processes.init("clitest", "c1", {"extra": 1})
            with pytest.raises(Exception, match="broken"):
                await app.processes.call("clitest", "c1", {"fail": "broken"})
    finally:
        from dataloader.processes import processors

        processors.unregister("clitest")
    got = cli(subprocess_env, "get", "clitest", "c1", "--limit", "1", "--backward")
    assert got.returncode == 0, got.stderr
    body = json.loads(got.stdout)
    assert body["status"] == "error" and [e["event_id"] for e in body["history"]] == [2]
    listed = json.loads(cli(subprocess_env, "list", "clitest", "--status", "error").stdout)
    assert [p["id"] for p in listed["processes"]] == ["c1"]
    trace = json.loads(cli(subprocess_env, "trace", "clitest", "c1").stdout)
    assert [t["status"] for t in trace] == ["finished", "error"]
    # simple repair never calls the processor, so it does not need its module
    repaired = cli(subprocess_env, "simple-repair", "clitest", "c1", modules="tests.support.pipelines")
    assert repaired.returncode == 0 and json.loads(repaired.stdout)["status"] == "running"
    again = cli(subprocess_env, "simple-repair", "clitest", "c1")
    assert again.returncode == 1 and "process_wrong_status" in again.stderr
    assert cli(subprocess_env, "remove", "clitest", "c1").returncode == 0
    gone = cli(subprocess_env, "get", "clitest", "c1")
    assert gone.returncode == 1 and "process_not_found" in gone.stderr
