"""The audit trail through each face: HTTP and console changes are recorded with their face and the
principal the face resolved (an API token's, a signed-in console user's), the CLI acts as
`cli:<OS user>`, and every face reads the trail with the one filter and its one validation
(bad input: 422 in the error shape, a 422 page, one line and exit 2)."""

from __future__ import annotations

import getpass
import json

import httpx
import pytest

from dataloader.exceptions import Forbidden
from dataloader.model.principal import Principal, PrincipalKind, Role, acting_as
from tests.audit.conftest import rows
from tests.support.api_apps import api_for
from tests.support.cli import run
from tests.ui.users_support import add_user, sign_in, users_console, users_db  # noqa: F401 (fixture)


@pytest.fixture
async def api_tokens(trail, audit_app):
    """A token left behind would close the API for every later test: none before, none after."""
    await trail.execute("DELETE FROM dl_api_tokens")
    audit_app.tokens.forget()
    yield audit_app.tokens
    await trail.execute("DELETE FROM dl_api_tokens")
    audit_app.tokens.forget()


async def test_http_changes_are_recorded_with_their_face_and_read_back_filtered(audit_app, trail, name, api_tokens):
    job = await audit_app.enqueue("test.async_sleep", {}, queue=name)
    ci = await api_tokens.create(name="ci-deploy", scopes=["operate"])
    auditor = await api_tokens.create(name="auditor", scopes=["admin"])
    transport = httpx.ASGITransport(app=api_for(audit_app), client=("192.0.2.7", 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://dataloader.test",
                                 headers={"Authorization": f"Bearer {ci.secret}"}) as client:
        assert (await client.post(f"/api/v1/jobs/{job.id}/cancel")).status_code == 200
        assert (await client.post(f"/api/v1/queues/{name}/pause")).status_code == 200
        refused = await client.post(f"/api/v1/jobs/{job.id}/cancel")
        assert refused.status_code == 409
        found = [(r["action"], r["outcome"], r["face"], r["actor"], r["address"]) for r in await rows(trail)
                 if not r["action"].startswith("token.")]  # the set-up's two tokens have their rows too
        assert found == [("job.cancel", "ok", "http", "token:ci-deploy", "192.0.2.7"),
                         ("queue.pause", "ok", "http", "token:ci-deploy", "192.0.2.7"),
                         ("job.cancel", "refused", "http", "token:ci-deploy", "192.0.2.7")]
        assert (await client.get("/api/v1/audit")).status_code == 403  # reading the trail needs read_audit
        client.headers["Authorization"] = f"Bearer {auditor.secret}"

        page = (await client.get("/api/v1/audit", params={"action": "job", "outcome": "ok"})).json()
        assert [(e["action"], e["target"]) for e in page["entries"]] == [("job.cancel", f"job:{job.id}")]
        assert page["next_cursor"] is None
        by_target = (await client.get("/api/v1/audit", params={"target": f"queue:{name}", "since": "1h"})).json()
        assert [e["action"] for e in by_target["entries"]] == ["queue.pause"]
        first = (await client.get("/api/v1/audit", params={"actor": "token", "limit": 2})).json()
        rest = (await client.get("/api/v1/audit", params={"actor": "token", "cursor": first["next_cursor"]})).json()
        assert [e["outcome"] for e in first["entries"] + rest["entries"]] == ["refused", "ok", "ok"]

        for params, code in (({"since": "yesterday"}, "validation_error"), ({"limit": 0}, "validation_error"),
                             ({"cursor": "nope"}, "invalid_cursor"), ({"outcome": "maybe"}, "validation_error"),
                             ({"since": "2030-01-02T00:00:00Z", "until": "2030-01-01T00:00:00Z"},
                              "validation_error")):
            bad = await client.get("/api/v1/audit", params=params)
            assert bad.status_code == 422 and bad.json()["error"] == code, (params, bad.text)


async def test_a_console_change_is_recorded_as_the_console_and_its_page_searches(dsn, trail, name, users_db):  # noqa: F811
    async with users_console(dsn) as client:
        await add_user(client, "bob", Role.ADMIN)
        csrf = await sign_in(client, "bob")
        done = await client.post("/ui/queues/pause", data={"queue": name, "csrf": csrf, "back": "/ui/"})
        assert done.status_code == 303
        [row] = [r for r in await rows(trail) if r["action"] != "user.create"]  # bob's creation has one too
        assert (row["action"], row["target_id"], row["face"], row["actor"]) == (
            "queue.pause", name, "console", "user:bob")
        page = await client.get("/ui/audit", params={"action": "queue.pause", "target": f"queue:{name}"})
        assert page.status_code == 200 and f"queue:{name}" in page.text and "user:bob" in page.text
        none = await client.get("/ui/audit", params={"action": "schedule.delete"})
        assert none.status_code == 200 and "No audit row matches." in none.text
        bad = await client.get("/ui/audit", params={"since": "yesterday"})
        assert bad.status_code == 422 and "validation_error" in bad.text and 'value="yesterday"' in bad.text


async def test_the_cli_acts_as_its_os_user_and_lists_the_trail(audit_app, trail, cli_env, name):
    job = await audit_app.enqueue("test.async_sleep", {}, queue=name)
    assert run(["jobs", "cancel", str(job.id)], cli_env).returncode == 0
    assert run(["queues", "pause", name], cli_env).returncode == 0
    user = f"cli:{getpass.getuser()}"
    assert [(r["action"], r["actor"], r["face"]) for r in await rows(trail)] == [
        ("job.cancel", user, "cli"), ("queue.pause", user, "cli")]

    listed = run(["audit", "list", "--json", "--action", "job.cancel", "--since", "1h"], cli_env)
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)["entries"]
    assert [(e["action"], e["target_id"], e["actor"]) for e in entries] == [("job.cancel", str(job.id), user)]
    table = run(["audit", "list", "--actor", user], cli_env)
    assert table.returncode == 0 and "queue.pause" in table.stdout and "job.cancel" in table.stdout


async def test_the_cli_refuses_a_bad_filter_with_one_line_and_exit_2(cli_env):
    for args in (["--since", "yesterday"], ["--outcome", "maybe"], ["--limit", "0"], ["--cursor", "nope"]):
        result = run(["audit", "list", *args], cli_env)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        line = [x for x in result.stderr.splitlines() if x.startswith("dataloader:")]
        assert len(line) == 1 and ("validation_error" in line[0] or "invalid_cursor" in line[0]), result.stderr


async def test_only_a_principal_allowed_read_audit_reads_the_trail_on_any_face(audit_app, dsn, trail, users_db):  # noqa: F811
    with acting_as(Principal.with_role(PrincipalKind.USER, "olga", Role.OPERATOR)):
        with pytest.raises(Forbidden, match="may not read the audit trail"):
            await audit_app.audit.search()
    async with users_console(dsn) as client:
        await add_user(client, "vera", Role.VIEWER)
        await sign_in(client, "vera")
        refused = await client.get("/ui/audit")
        assert refused.status_code == 403 and "may not read the audit trail" in refused.text
        assert 'href="/ui/audit"' not in (await client.get("/ui/")).text  # nor shown in its navigation


async def test_who_changed_access_is_recorded_users_and_tokens(audit_app, trail, users_db, api_tokens):  # noqa: F811
    """Granting access is a change like any other: a user's creation, role and removal, a token's
    creation and revocation each write one row naming who did it (never a password or a secret)."""
    admin = Principal.with_role(PrincipalKind.USER, "root", Role.ADMIN, address="198.51.100.4")
    with acting_as(admin):
        await audit_app.users.create("dana", "a long enough pass", Role.VIEWER)
        await audit_app.users.set_role("dana", Role.ADMIN)
        await audit_app.users.delete("dana")
        created = await api_tokens.create(name="deploy", scopes=["enqueue"])
        await api_tokens.revoke(created.token.id)
    found = [(r["action"], r["target_id"], r["actor"], r["address"], r["outcome"]) for r in await rows(trail)]
    assert found == [("user.create", "dana", "user:root", "198.51.100.4", "ok"),
                     ("user.set_role", "dana", "user:root", "198.51.100.4", "ok"),
                     ("user.delete", "dana", "user:root", "198.51.100.4", "ok"),
                     ("token.create", "deploy", "user:root", "198.51.100.4", "ok"),
                     ("token.revoke", "deploy", "user:root", "198.51.100.4", "ok")]
    text = str(await trail.fetch("SELECT details FROM dl_audit"))
    assert "a long enough pass" not in text and created.secret not in text
