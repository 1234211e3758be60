"""The observers faces: HTTP (`/api/v1/observers`: create, 409, list with node and state, get, stop
confirmed by 200/`deleted`; `/api/v1/nodes` with load; bad input is a 4xx that writes nothing, in the
jobs API's error shape) and the CLI (`dataloader observers list|get|create|stop`, `dataloader nodes`)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import httpx
import pytest

from dataloader.api import create_app
from tests.conftest import ROOT, wait_until
from tests.support.cli import run


@pytest.fixture
async def node_and_client(odb, make_app):
    app = make_app("api-node")
    await app.open()
    try:
        async with app.running() as manager:
            transport = httpx.ASGITransport(app=create_app(app.settings, context=app, manager=manager))
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                yield app, client
    finally:
        await app.close()


async def test_create_list_get_stop_and_nodes(node_and_client, dsn):
    _app, client = node_and_client
    body = {"name": "binance:BTC-USDT", "kind": "test.probe", "args": {"dsn": dsn, "tick_sec": 0.05}}
    created = await client.post("/api/v1/observers", json=body)
    assert created.status_code == 201, created.text
    assert created.json()["state"] == "created" and created.headers["location"] == "/api/v1/observers/binance:BTC-USDT"
    again = await client.post("/api/v1/observers", json=body)
    assert again.status_code == 409 and again.json()["error"] == "observer_exists"
    await wait_until(lambda: _state(client, "binance:BTC-USDT", "processing"), timeout=10)
    listed = (await client.get("/api/v1/observers", params={"state": "processing"})).json()
    assert [(o["name"], o["node"]) for o in listed["observers"]] == [("binance:BTC-USDT", "api-node")]
    nodes = (await client.get("/api/v1/nodes")).json()["nodes"]
    assert [(n["name"], n["state"], n["capacity"], n["running"]) for n in nodes] == [("api-node", "live", 4, 1)]
    stopped = await client.post("/api/v1/observers/binance:BTC-USDT/stop", params={"wait": 10})
    assert stopped.status_code == 200 and stopped.json()["state"] == "deleted"
    missing = await client.get("/api/v1/observers/nope")
    assert missing.status_code == 404 and missing.json()["error"] == "observer_not_found"
    assert (await client.post("/api/v1/observers/nope/stop")).status_code == 404


@pytest.mark.parametrize("body", [
    {"name": "x", "kind": "no.such.kind"},
    {"name": "bad name", "kind": "test.probe"},
    {"name": "x\u0000", "kind": "test.probe"},
    {"name": "x", "kind": "test.probe", "args": {"k": "\u0000"}},
    {"name": "x", "kind": "test.probe", "args": []},
    {"name": "x", "kind": "test.probe", "max_restarts": -1},
    {"name": "x", "kind": "test.probe", "extra": True},
    {"kind": "test.probe"},
])
async def test_bad_bodies_are_4xx_and_write_nothing(node_and_client, odb, body):
    _, client = node_and_client
    response = await client.post("/api/v1/observers", json=body)
    assert response.status_code == 422, response.text
    assert set(response.json()) >= {"error", "detail"}
    assert await odb.fetchval("SELECT count(*) FROM dl_observers") == 0


async def test_bad_queries_are_4xx(node_and_client):
    _, client = node_and_client
    for path, params in (("/api/v1/observers", {"state": "asleep"}), ("/api/v1/observers", {"limit": 0}),
                         ("/api/v1/nodes", {"limit": 10**9}), ("/api/v1/observers/x/stop", {"wait": -1}),
                         ("/api/v1/observers", {"kind": "a\u0000"})):
        method = client.post if path.endswith("/stop") else client.get
        response = await method(path, params=params)
        assert response.status_code == 422, (path, params, response.text)


async def _state(client, name, state):
    return (await client.get(f"/api/v1/observers/{name}")).json()["state"] == state


def cli(env, *args, process=False):
    """`dataloader <args>` in-process; `process`: a real `python -m dataloader` (the group's one)."""
    if not process:
        return run(list(args), env)
    return subprocess.run([sys.executable, "-m", "dataloader", *args], env=env, capture_output=True, text=True,
                          timeout=60)


async def test_the_group_runs_as_a_real_process(odb, subprocess_env, dsn):
    """The group's one real `python -m dataloader observers` (the other CLI tests run in-process)."""
    env = {**subprocess_env, "DL_PIPELINE_MODULES": "tests.support.observers",
           "PYTHONPATH": os.pathsep.join([str(ROOT), subprocess_env.get("PYTHONPATH", "")])}
    args = json.dumps({"dsn": dsn, "tick_sec": 0.05})
    made = cli(env, "observers", "create", "--name", "feed-1", "--kind", "test.probe", "--args", args, process=True)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["state"] == "created"


async def test_cli_create_list_get_stop_and_nodes(odb, cli_env, dsn, make_app):
    env = {**cli_env, "DL_PIPELINE_MODULES": "tests.support.observers"}
    args = json.dumps({"dsn": dsn, "tick_sec": 0.05})
    made = cli(env, "observers", "create", "--name", "feed-1", "--kind", "test.probe", "--args", args)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["state"] == "created"
    dup = cli(env, "observers", "create", "--name", "feed-1", "--kind", "test.probe", "--args", args)
    assert dup.returncode != 0 and "observer_exists" in dup.stderr + dup.stdout
    bad = cli(env, "observers", "create", "--name", "x", "--kind", "test.probe", "--args", "[1")
    assert bad.returncode != 0
    app = make_app("cli-node")
    async with app, app.running():
        await wait_until(lambda: _processing(app, "feed-1"), timeout=10)
        listed = cli(env, "observers", "list", "--state", "processing")
        assert [o["node"] for o in json.loads(listed.stdout)] == ["cli-node"]
        nodes = cli(env, "nodes")
        assert [n["name"] for n in json.loads(nodes.stdout)] == ["cli-node"]
        # in a thread: this test's event loop runs the node that must confirm the stop
        stopped = await asyncio.to_thread(cli, env, "observers", "stop", "feed-1", "--wait", "10")
        assert stopped.returncode == 0, stopped.stderr
        assert json.loads(stopped.stdout)["state"] == "deleted"
    got = cli(env, "observers", "get", "feed-1")
    assert json.loads(got.stdout)["reason"] == "stopped"


async def _processing(app, name):
    return (await app.observers.get(name)).state.value == "processing"
