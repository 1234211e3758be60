"""Flow control: pause and resume queues (docs/flow-control.md)."""
