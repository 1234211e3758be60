"""The CLI's key commands (`dataloader keys status|rotate|generate`) against the test database, and
the key ring's pure rules: the envelope, the clear fields, the settings' errors, the masks."""

from __future__ import annotations

import json

import asyncpg
import pytest

from dataloader import App, ConfigError, EncryptionKeyMissing
from dataloader.model import payload_crypto
from dataloader.model.payload_crypto import MASKED, ClearFields, KeyRing, Sealed, ring_from_settings
from dataloader.model.principal import Principal, PrincipalKind, Role, acting_as
from dataloader.testing import drain
from tests.encryption.conftest import K1, K2, pipelines, settings_for
from tests.support.cli import run


async def test_the_cli_shows_key_status_rotates_and_refuses_bad_input(edb: asyncpg.Pool, dsn: str,
                                                                      cli_env: dict[str, str]):
    async with App(settings_for(dsn, K1), pipelines=pipelines) as app:
        await app.enqueue("enc.echo", {"secret": "s"}, queue="cli")
    env = {**cli_env, "DL_ENCRYPTION_KEYS": f"{K2},{K1}"}
    status = run(["keys", "status"], env)
    assert status.returncode == 0, status.stderr
    body = json.loads(status.stdout)
    assert body["current"] == "k2" and body["stale"] == 1 and K1.split(":")[1] not in status.stdout
    rotated = run(["keys", "rotate", "--batch-size", "10"], env)
    assert rotated.returncode == 0 and json.loads(rotated.stdout)["rewritten"]["dl_jobs.args"] == 1
    assert json.loads(run(["keys", "status"], env).stdout)["stale"] == 0
    bad = run(["keys", "rotate", "--batch-size", "0"], env)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "batch_size" in bad.stderr
    off = run(["keys", "rotate"], cli_env)
    assert off.returncode == 1 and "encryption_off" in off.stderr
    wrong = run(["keys", "status"], {**cli_env, "DL_ENCRYPTION_KEYS": "k1:short"})
    assert wrong.returncode == 2 and "DL_ENCRYPTION_KEYS" in wrong.stderr and "not base64" in wrong.stderr
    made = run(["keys", "generate", "k3"], {})
    assert made.returncode == 0 and KeyRing.from_text(made.stdout.strip()).kids == ("k3",)
    assert run(["keys", "generate", "bad kid!"], {}).returncode == 2


def test_an_envelope_opens_with_any_listed_key_and_names_a_missing_one():
    old, new = KeyRing.from_text(K1), KeyRing.from_text(f"{K2},{K1}", ClearFields.parse("tenant,pay:amount"))
    sealed = json.loads(new.seal_args("pay", json.dumps({"card": "4111", "tenant": "t1", "amount": 5})))
    assert set(sealed) == {"$dl_enc", "kid", "ct", "tenant", "amount"} and "4111" not in json.dumps(sealed)
    assert new.open(sealed) == {"card": "4111", "tenant": "t1", "amount": 5}
    assert set(json.loads(new.seal_args("other", '{"amount": 5, "tenant": "t"}'))) == {"$dl_enc", "kid", "ct", "tenant"}
    under_old = old.seal({"x": 1})
    assert new.open(under_old) == {"x": 1} and new.needs_rewrite(under_old)
    resealed = new.reseal({**under_old, "tenant": "t1"})
    assert resealed["kid"] == "k2" and resealed["tenant"] == "t1" and new.open(resealed) == {"x": 1}
    with pytest.raises(EncryptionKeyMissing, match="'k2'") as missing:
        old.open(resealed)
    assert missing.value.kid == "k2"
    revealed = old.reveal(resealed)
    assert type(revealed) is Sealed and revealed.kid == "k2"
    tampered = {**under_old, "ct": under_old["ct"][:-4] + "AAAA"}
    with pytest.raises(EncryptionKeyMissing, match="does not decrypt"):
        old.open(tampered)
    relabelled = {**under_old, "kid": "k2"}
    with pytest.raises(EncryptionKeyMissing):  # the kid is authenticated: no other key opens it
        new.open(relabelled)
    assert old.seal_args(None, "{}") == "{}" and old.seal_text(None) is None and old.seal_text("null") == "null"
    assert old.decode(json.dumps({"input": under_old, "n": 1})) == {"input": {"x": 1}, "n": 1}  # a chain's input
    mine = {"$dl_enc": "a field of the caller's", "n": 2}  # not an envelope: sealed and read back as args
    assert old.decode(old.seal_args("t", json.dumps(mine))) == mine and old.decode(json.dumps(mine)) == mine


@pytest.mark.parametrize(("keys", "fields", "problem"), [
    ("k1", "", "kid:base64key"), ("k1:@@@", "", "not base64"), ("k1:" + "A" * 8, "", "32 bytes"),
    (f"{K1},{K1}", "", "named twice"), ("bad kid:" + K1.split(":")[1], "", "key id"),
    ("@/nonexistent/keys", "", "cannot read"), (K1, "task:", "task:field"), (K1, "kid", "envelope's own"),
    (None, ":x", "task:field"),
])
def test_bad_key_settings_are_a_config_error_naming_the_variable(keys, fields, problem):
    with pytest.raises(ConfigError, match=problem):
        ring_from_settings(keys, fields)


def test_a_key_file_and_off_by_default(tmp_path):
    path = tmp_path / "keys"
    path.write_text(f"# newest first\n{K2}\n{K1}\n")
    assert KeyRing.from_text(f"@{path}").kids == ("k2", "k1")
    assert ring_from_settings(None, "") is None and ring_from_settings("  ", None) is None
    assert payload_crypto.active() is None and payload_crypto.seal_args("t", '{"a": 1}') == '{"a": 1}'


def test_masks_follow_the_principal_in_force():
    assert payload_crypto.mask({"a": 1}) == MASKED
    assert payload_crypto.mask({}) == {} and payload_crypto.mask(None) is None
    with acting_as(Principal.with_role(PrincipalKind.USER, "v", Role.VIEWER)):
        assert not payload_crypto.may_read_payloads()
    with acting_as(Principal.with_role(PrincipalKind.USER, "o", Role.OPERATOR)):
        assert payload_crypto.may_read_payloads()
    assert payload_crypto.may_read_payloads()  # the library's caller


async def test_the_cli_acts_for_its_os_user_and_reads_payloads(edb: asyncpg.Pool, dsn: str, cli_env: dict[str, str]):
    """`jobs status` reads through the same manager as every face, acting for the OS user that runs
    it (`cli:<user>`, admin: it holds the database's credentials and the keys, so no role can hide
    anything from it); a principal in force around the command does not change that."""
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    from tests.support.cli import invoke

    async with App(settings_for(dsn, K1), pipelines=pipelines) as app:
        job = await app.enqueue("enc.echo", {"card": "4111"}, queue="cli-mask")
        await drain(app, "cli-mask", timeout=10)
    env = {**cli_env, "DL_ENCRYPTION_KEYS": K1}

    def status() -> str:
        with ThreadPoolExecutor(1) as pool:  # the command runs its own loop, in a thread of its own
            result = pool.submit(contextvars.copy_context().run, invoke, ["jobs", "status", str(job.id)], env).result()
        assert result.exit_code == 0, result.output
        return result.stdout

    with acting_as(Principal.with_role(PrincipalKind.USER, "v", Role.VIEWER)):
        assert json.loads(status())["result"] == {"echo": {"card": "4111"}}
    assert json.loads(status())["result"] == {"echo": {"card": "4111"}}
