"""The processor the console's browser tests drive, loaded only by their `serve` processes through
DL_PIPELINE_MODULES (never imported by a test module: the import registers it): the test
processor of tests/processes, in namespace `console-pay`."""

from tests.processes.processors import register
from tests.ui import PROCESS_NS

register(PROCESS_NS)
