"""Loaded by CLI and worker subprocesses (DL_PIPELINE_MODULES): the test processor on namespace
`clitest` (and `zombie`, whose lost tasks park the process in error)."""

from tests.processes.processors import register

register("clitest", concurrency=4, lease_ttl_sec=2)
register("zombie", concurrency=4, lease_ttl_sec=2, on_lost="error")
