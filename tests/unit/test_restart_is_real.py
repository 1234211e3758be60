"""Under CI a PostgreSQL "restart" must be real: with an external DL_TEST_DSN server and no
DL_TEST_RESTART_CMD, restart_server could only terminate the sessions, which passes the restart
tests (test_crashes.py, the every-capability restart, the chaos run) without a restart ever
happening. Locally that is a warning; under CI (env CI set, as .ci/run sets it) it fails the test."""

from __future__ import annotations

import pytest

from tests.support.database import RestartNotReal, TestServer, real_restart_required, restart_server

# nothing listens there: a restart_server that got as far as terminating sessions would fail
# with a connection error, not with RestartNotReal
NOWHERE = "postgresql://postgres@127.0.0.1:9/postgres"


async def test_under_ci_a_restart_that_could_only_terminate_sessions_fails(monkeypatch) -> None:
    monkeypatch.setenv("CI", "1")
    monkeypatch.delenv("DL_TEST_RESTART_CMD", raising=False)
    monkeypatch.delenv("DL_TEST_REQUIRE_RESTART", raising=False)
    with pytest.raises(RestartNotReal, match=r"NOT be restarted.*CI is set"):
        await restart_server(TestServer(admin_dsn=NOWHERE), NOWHERE)


async def test_the_same_is_asked_locally_with_dl_test_require_restart(monkeypatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("DL_TEST_RESTART_CMD", raising=False)
    monkeypatch.setenv("DL_TEST_REQUIRE_RESTART", "1")
    with pytest.raises(RestartNotReal, match="DL_TEST_REQUIRE_RESTART=1"):
        await restart_server(TestServer(admin_dsn=NOWHERE), NOWHERE)


def test_outside_ci_terminating_sessions_stays_allowed(monkeypatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("DL_TEST_REQUIRE_RESTART", raising=False)
    assert real_restart_required() is None
