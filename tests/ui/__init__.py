# The namespace of the processor the browser tests' `serve` registers (console_processes.py). Kept
# here so a test module can name it without importing that module, whose import registers the
# processor in the test process, where every other test's App.running() would then serve its queue.
PROCESS_NS = "console-pay"
