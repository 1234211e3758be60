"""A process id is any text, and every face can address it: HTTP takes it as one percent-encoded path
segment ('/' as %2F, '%' as %25, as clients encode a path parameter; api/middleware.py
`OneSegmentPaths`), the CLI as an argument. Ids with '/', '%', spaces and non-ASCII letters go
through init, get, call, trace, simple repair, restart, import and remove, and `a%2Ftrace` (the
process `a/trace`) is never read as the trace of `a`."""

from __future__ import annotations

import asyncio
import json
import subprocess
from urllib.parse import quote

import httpx
import pytest

from tests.processes.test_api_cli import cli
from tests.support.cli import run

IDS = ["a/b", "a/trace", "/leading/and/trailing/", "100%", "a%2Fb", "with space", "zh-Ж/ü ✓", "call"]


def path_of(ns: str, process_id: str) -> str:
    return f"/api/v1/processes/{ns}/{quote(process_id, safe='')}"


@pytest.mark.parametrize("process_id", IDS)
async def test_every_route_takes_an_id_with_any_text(client, ns, pdb, process_id):
    base = f"/api/v1/processes/{ns}"
    one = path_of(ns, process_id)
    created = await client.post(base, json={"id": process_id, "args": {"n": 1}})
    assert created.status_code == 201, created.text
    assert created.headers["location"] == one
    got = await client.get(created.headers["location"])
    assert got.status_code == 200 and got.json()["id"] == process_id, got.text

    called = await client.post(f"{one}/call", json={"args": {"n": 2}})
    assert called.status_code == 200 and called.json()["id"] == process_id, called.text
    trace = await client.get(f"{one}/trace")
    assert trace.status_code == 200 and trace.json()["id"] == process_id
    assert [t["type"] for t in trace.json()["tasks"]] == ["init", "call"]
    wrong = await client.post(f"{one}/simple-repair")
    assert wrong.status_code == 409 and wrong.json()["error"] == "process_wrong_status"
    restarted = await client.post(f"{one}/restart", json={"from": "start"})
    assert restarted.status_code == 200, restarted.text
    assert restarted.json()["id"] == process_id

    imported_id = f"{process_id}-copy"
    put = await client.put(path_of(ns, imported_id), json={"history": [{"payload": {"x": 1}}]})
    assert put.status_code == 201 and put.json()["id"] == imported_id, put.text
    assert (await client.delete(path_of(ns, imported_id))).status_code == 204

    assert (await client.delete(one)).status_code == 204
    assert (await client.get(one)).json()["error"] == "process_not_found"
    assert await pdb.fetchval("SELECT count(*) FROM dl_processes") == 0


async def test_an_encoded_slash_is_part_of_the_id_and_a_plain_one_separates(client, ns):
    base = f"/api/v1/processes/{ns}"
    for process_id in ("a", "a/trace"):
        assert (await client.post(base, json={"id": process_id, "args": {}})).status_code == 201
    process = await client.get(f"{base}/a%2Ftrace")
    assert process.status_code == 200 and process.json()["id"] == "a/trace"
    assert (await client.get(f"{base}/a%2ftrace")).json()["id"] == "a/trace"  # either case of the hex
    trace = await client.get(f"{base}/a/trace")
    assert trace.status_code == 200 and trace.json()["id"] == "a" and "tasks" in trace.json()
    # An id sent with its '/' unencoded is two segments: no route has that shape.
    assert (await client.get(f"{base}/x/y")).json()["error"] == "not_found"
    assert (await client.get(f"{base}/a%2Fb")).json()["error"] == "process_not_found"
    # The text "%2F" itself is the id "%2F" once encoded (%252F), not a slash.
    assert (await client.get(f"{base}/%252F")).json()["error"] == "process_not_found"
    assert (await client.get(f"{base}/%2500")).json()["error"] == "process_not_found"


async def test_the_openapi_still_has_one_path_parameter_per_segment(client):
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert "/api/v1/processes/{ns}/{id}" in paths and "/api/v1/processes/{ns}/{id}/trace" in paths
    parameter = next(p for p in paths["/api/v1/processes/{ns}/{id}"]["get"]["parameters"] if p["name"] == "id")
    assert "%2F" in parameter["description"]


def _cli(env: dict[str, str], real: bool, *args: str) -> subprocess.CompletedProcess[str]:
    if real:
        return cli(env, *args)
    # subprocess_env's modules: importing cli_processors here would register its namespaces in this
    # worker for every later test (its served queues)
    return run(["processes", *args], env)


# The last id goes through a real process (its argv as the OS hands it over, not UTF-8 by assumption);
# the others run the command in-process: what they add is the id's text, not an interpreter start.
@pytest.mark.parametrize(("process_id", "real"), [("a/b", False), ("100%", False), ("with space", False),
                                                  ("zh-Ж/ü ✓", True)])
async def test_the_cli_takes_an_id_with_any_text(app, pdb, subprocess_env, process_id, real):
    from dataloader.processes import processors
    from tests.processes.processors import register

    register("clitest", replace=True)
    try:
        async with app.running():
            await app.processes.init("clitest", process_id, {"extra": 1})
    finally:
        processors.unregister("clitest")
    got = await asyncio.to_thread(_cli, subprocess_env, real, "get", "clitest", process_id)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["id"] == process_id
    trace = await asyncio.to_thread(_cli, subprocess_env, real, "trace", "clitest", process_id)
    assert [t["type"] for t in json.loads(trace.stdout)] == ["init"]
    assert (await asyncio.to_thread(_cli, subprocess_env, real, "remove", "clitest", process_id)).returncode == 0
    assert await pdb.fetchval("SELECT count(*) FROM dl_processes") == 0


async def test_a_real_server_routes_an_encoded_slash_the_same_way(python, subprocess_env, pdb, tmp_path):
    """uvicorn hands the raw path over as the in-process transport does: with `dataloader serve`, a
    process id with '/' reaches its routes (`process_not_found` from the route, not the router's
    `not_found`), and a process stored with such an id is read back."""
    from tests.ui.browser import serve

    await pdb.execute("INSERT INTO dl_processes (ns, id, status) VALUES ('served', 'orders/42 ✓', 'running')")
    async with serve(python, subprocess_env, tmp_path, token=None) as service:
        async with httpx.AsyncClient(base_url=service.base_url, timeout=10) as http:
            base = "/api/v1/processes/served"
            got = await http.get(f"{base}/{quote('orders/42 ✓', safe='')}")
            assert got.status_code == 200 and got.json()["id"] == "orders/42 ✓", got.text
            trace = await http.get(f"{base}/{quote('orders/42 ✓', safe='')}/trace")
            assert trace.status_code == 200 and trace.json()["id"] == "orders/42 ✓", trace.text
            missing = await http.get(f"{base}/a%2Fb/trace")
            assert missing.status_code == 404 and missing.json()["error"] == "process_not_found"
            assert (await http.delete(f"{base}/{quote('orders/42 ✓', safe='')}")).status_code == 204
    assert await pdb.fetchval("SELECT count(*) FROM dl_processes") == 0
