"""Encrypted payloads beyond jobs, and what each face shows (docs/security.md "Encryption at
rest"): a process's events, aux state and task args and a workflow's input, step results and
signals round-trip with nothing readable in their tables; a viewer sees masks through Python, HTTP
and the console; the key commands need manage_access; the args search works on the clear fields
and says so for the others."""

from __future__ import annotations

import uuid

import asyncpg
import httpx
import pytest

from dataloader import App, InvalidJobRequest, Queue, Workflow, workflow
from dataloader.model.payload_crypto import MASKED
from dataloader.model.principal import Principal, PrincipalKind, Role, acting_as
from dataloader.testing import drain
from tests.api.v1.conftest import client_for
from tests.api.v1.test_access import acting_app
from tests.encryption.conftest import settings_for
from tests.support.api_apps import api_for
from tests.ui.users_support import PASSWORD, empty_users, sign_in, users_db  # noqa: F401 (fixture)

SECRET = "iban-DE02120300000000202051"
VIEWER = Principal.with_role(PrincipalKind.USER, "vera", Role.VIEWER)
OPERATOR = Principal.with_role(PrincipalKind.USER, "otto", Role.OPERATOR)


@workflow("enc.wf", queue="enc-wf")
async def secret_flow(wf: Workflow, input: dict) -> dict:
    card = await wf.step("card", _card, input["who"])
    signalled = await wf.wait_for("confirm", timeout=20)
    return {"card": card, "signalled": signalled}


async def _card(who: str) -> str:
    return f"{SECRET}-{who}"


async def _texts(db: asyncpg.Pool, query: str, *args: object) -> str:
    return " ".join(str(v) for r in await db.fetch(query, *args) for v in r.values())


async def test_a_workflow_and_a_process_round_trip_and_their_tables_hold_no_clear_text(edb: asyncpg.Pool, dsn: str,
                                                                                       ns: str):
    from tests.processes.processors import register

    register(ns)
    async with App(settings_for(dsn, workers=[Queue("enc-wf", 4)])) as app, app.running():
        run_id = await app.workflows.start("enc.wf", {"who": SECRET})
        await app.workflows.signal(run_id, "confirm", {"pin": SECRET})
        assert await app.workflows.result(run_id, timeout=20) == {"card": f"{SECRET}-{SECRET}",
                                                                  "signalled": {"pin": SECRET}}
        run = await app.workflows.get(run_id)
        assert run.input == {"who": SECRET} and run.steps[0].result == f"{SECRET}-{SECRET}"
        response = await app.processes.init(ns, "p-1", {"n": 1, "aux": {"iban": SECRET}})
        assert response["kind"] == "init"
        process = await app.processes.get(ns, "p-1")
        assert process.aux_state == {"iban": SECRET} and process.history[0].payload == {"kind": "init", "n": 1}
        feed = await app.processes.feed(ns)
        assert {"kind": "init", "n": 1} in [item.payload for item in feed.items]
        with acting_as(VIEWER):
            hidden = await app.processes.get(ns, "p-1")
            assert hidden.aux_state == MASKED and hidden.history[0].payload == MASKED
            assert {item.payload for item in (await app.processes.feed(ns)).items} <= {MASKED, None}
            assert (await app.workflows.get(run_id)).steps[0].result == MASKED
    stored = " ".join([
        await _texts(edb, "SELECT args::text, result::text FROM dl_jobs WHERE job_id = $1", run_id),
        await _texts(edb, "SELECT result::text FROM dl_workflow_steps WHERE run_id = $1", run_id),
        await _texts(edb, "SELECT payload::text FROM dl_workflow_signals WHERE run_id = $1", run_id),
        await _texts(edb, "SELECT aux_state::text FROM dl_processes WHERE ns = $1", ns),
        await _texts(edb, "SELECT args::text, response::text FROM dl_process_tasks WHERE ns = $1", ns),
        await _texts(edb, "SELECT payload::text FROM dl_process_events WHERE ns = $1", ns),
        await _texts(edb, "SELECT payload::text FROM dl_process_feed WHERE ns = $1", ns)])
    assert SECRET not in stored and stored.count('"$dl_enc": 1') >= 9, stored


async def test_a_viewer_sees_masks_in_every_face_and_may_not_manage_keys(enc_app: App, users_db: asyncpg.Pool):  # noqa: F811
    """Python acts for the principal in force; the API for the one its guard resolves (`acting_app`
    plays a console user's role, which no bearer carries); the console for the user signed in."""
    job = await enc_app.enqueue("enc.echo", {"card": SECRET, "tenant": "acme"}, queue="mask")
    await drain(enc_app, "mask", timeout=10)
    with acting_as(VIEWER):
        seen = await enc_app.get(job.id)
        assert (seen.args, seen.result, seen.progress) == (MASKED, MASKED, MASKED)
    async with client_for(acting_app(enc_app, VIEWER)) as http:
        status = (await http.get(f"/api/v1/jobs/{job.id}/status")).json()
        assert status["result"] == MASKED and status["progress"] == MASKED
        refused = await http.get("/api/v1/encryption")
        assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
        assert (await http.post("/api/v1/encryption/rotate")).status_code == 403
    async with client_for(acting_app(enc_app, OPERATOR)) as http:  # may read payloads, may not manage keys
        assert (await http.get(f"/api/v1/jobs/{job.id}/status")).json()["result"] != MASKED
        assert (await http.get("/api/v1/encryption")).status_code == 403
    with acting_as(OPERATOR):
        assert (await enc_app.get(job.id)).args["card"] == SECRET
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api_for(enc_app)), base_url="http://t") as http:
        await enc_app.users.create("vera", PASSWORD, Role.VIEWER)
        await enc_app.users.create("otto", PASSWORD, Role.OPERATOR)
        await sign_in(http, "vera")
        page = (await http.get(f"/ui/jobs/{job.id}")).text
        assert SECRET not in page and MASKED in page
        assert (await http.get("/ui/keys")).status_code == 403
        await sign_in(http, "otto")
        assert SECRET in (await http.get(f"/ui/jobs/{job.id}")).text
        assert (await http.get("/ui/keys")).status_code == 403
    await empty_users(users_db)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api_for(enc_app)), base_url="http://t") as http:
        body = (await http.get("/api/v1/encryption")).json()  # the open API's principal: an admin
        assert body["enabled"] and body["current"] == "k1" and body["stale"] == 0
        assert body["keys"][0]["envelopes"] >= 1 and "key" not in str(body["keys"][0]).lower().replace("kid", "")
        assert body["clear_fields"] == {"*": ["tenant"], "enc.echo": ["region"]}
        rotated = await http.post("/api/v1/encryption/rotate", json={"batch_size": 100})
        assert rotated.status_code == 200 and rotated.json()["total_rewritten"] == 0
        for bad in ({"batch_size": 0}, {"batch_size": "5"}, {"batch": 5}):
            answer = await http.post("/api/v1/encryption/rotate", json=bad)
            assert answer.status_code == 422 and answer.json()["error"] == "validation_error", bad
        keys_page = (await http.get("/ui/keys")).text
        assert 'data-kid="k1"' in keys_page and "older keys may be removed" in keys_page


async def test_the_args_search_finds_clear_fields_and_names_the_encrypted_ones(enc_app: App, edb: asyncpg.Pool):
    acme = await enc_app.enqueue("enc.echo", {"card": SECRET, "tenant": "acme", "region": "eu"}, queue="find")
    await enc_app.enqueue("enc.echo", {"card": "other", "tenant": "zeta", "region": "us"}, queue="find")
    assert [j.id for j in (await enc_app.search({"args_contains": {"tenant": "acme"}})).jobs] == [acme.id]
    by_task = await enc_app.search({"tasks": ["enc.echo"], "args_path": '$.region ? (@ == "eu")'})
    assert [j.id for j in by_task.jobs] == [acme.id]
    with pytest.raises(InvalidJobRequest, match=r"'card' is encrypted at rest .* searchable: tenant"):
        await enc_app.search({"args_contains": {"card": SECRET}})
    with pytest.raises(InvalidJobRequest, match="'region' is encrypted"):  # only enc.echo's is clear
        await enc_app.search({"args_contains": {"region": "eu"}})
    assert uuid.UUID(str(acme.id))
