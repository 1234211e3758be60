"""The processor the console's browser tests drive (loaded by their `serve` through
DL_PIPELINE_MODULES): the test processor of tests/processes, in namespace `console-pay`."""

from tests.processes.processors import register

NS = "console-pay"
register(NS)
