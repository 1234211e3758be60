"""`dataloader users` (issue 40): add, list, set-role, passwd, disable, enable, delete, in-process;
the password from a prompt or `--password-stdin`, never an argument; bad input is one line and
exit 2 before the database is opened, and writes nothing."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import run
from tests.ui.users_support import CHEAP_HASH, empty_users

CHEAP = {f"DL_{k.upper()}": str(v) for k, v in CHEAP_HASH.items()}


@pytest.fixture
async def env(db, cli_env):
    await empty_users(db)
    yield {**cli_env, **CHEAP}
    await empty_users(db)


def error_line(result) -> str:
    # a hidden prompt's answer is not echoed by the test runner, so the line may follow the prompts
    lines = [line[line.index("dataloader:"):] for line in result.stderr.splitlines() if "dataloader:" in line]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def ok(args: list[str], env: dict[str, str], input: str | None = None):
    result = run(args, env, input=input)
    assert result.returncode == 0, (result.stdout, result.stderr)
    return json.loads(result.stdout[result.stdout.index("{") if args[1] != "list" else result.stdout.index("["):])


async def test_users_from_add_to_delete(env, db):
    added = ok(["users", "add", "alice", "--role", "operator", "--password-stdin"], env, input="long enough pass\n")
    assert added["name"] == "alice" and added["role"] == "operator" and "password" not in json.dumps(added)
    prompted = ok(["users", "add", "root", "--role", "admin"], env, input="another long pass\nanother long pass\n")
    assert prompted["role"] == "admin"
    assert [u["name"] for u in ok(["users", "list"], env)] == ["alice", "root"]
    assert ok(["users", "set-role", "alice", "viewer"], env)["role"] == "viewer"
    ok(["users", "passwd", "alice", "--password-stdin"], env, input="a third long pass\n")
    assert ok(["users", "disable", "alice"], env)["disabled"] is True
    assert ok(["users", "enable", "alice"], env)["disabled"] is False
    assert ok(["users", "delete", "alice"], env) == {"deleted": "alice"}
    stored = await db.fetchval("SELECT password_hash FROM dl_users WHERE name = 'root'")
    assert stored.startswith("$argon2id$") and "another long pass" not in stored


@pytest.mark.parametrize(("args", "stdin", "said"), [
    (["users", "add", "Alice", "--password-stdin"], "long enough pass\n", "user name"),
    (["users", "add", "alice", "--role", "god", "--password-stdin"], "long enough pass\n", "must be one of"),
    (["users", "add", "alice", "--password-stdin"], "short\n", "at least 12 characters"),
    (["users", "add", "alice"], "long enough pass\ndifferent pass!!\n", "the two entries differ"),
    (["users", "set-role", "alice", "root"], None, "must be one of"),
    (["users", "add", "alice", "--password", "long enough pass"], None, "No such option"),
])
async def test_bad_input_is_one_line_and_exit_2_and_writes_nothing(env, db, args, stdin, said):
    result = run(args, env, input=stdin)
    assert result.returncode == 2, (result.stdout, result.stderr)
    if said != "No such option":
        assert said in error_line(result)
    assert "long enough pass" not in result.stderr
    assert not await db.fetchval("SELECT count(*) FROM dl_users")


async def test_failed_operations_exit_1_with_their_code(env):
    ok(["users", "add", "root", "--role", "admin", "--password-stdin"], env, input="long enough pass\n")
    ok(["users", "add", "ops", "--role", "operator", "--password-stdin"], env, input="long enough pass\n")
    for args, code in ((["users", "add", "root", "--password-stdin"], "user_exists"),
                       (["users", "delete", "root"], "last_admin"), (["users", "disable", "nobody"], "user_not_found")):
        result = run(args, env, input="long enough pass\n")
        assert result.returncode == 1 and error_line(result).startswith(f"dataloader: {code}: "), result.stderr
