"""Flow control (issue 21): pause and resume queues (docs/flow-control.md)."""
