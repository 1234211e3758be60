"""Command line: `dataloader serve|worker|db|jobs`. A bare `dataloader` prints help (exit 2, as click
does for a group called without a command); `python -m dataloader` with no arguments runs the
service instead (see __main__.py).

One module per command group: service.py (`serve`, `worker`, `db`), jobs.py, retention.py (`jobs
prune`, `stats`), schedules.py, operations.py (`ops`), observers.py (`observers`, `nodes`) and
processes.py, workflows.py, users.py, tokens.py, audit.py; common.py holds what they share (the
error answer, output, opening the App). Nothing else in the package imports the CLI but __main__
(tests/unit/test_layers.py)."""

from __future__ import annotations

import os
import sys

import typer

from dataloader.cli.audit import audit_app
from dataloader.cli.common import _Commands, _options
from dataloader.cli.jobs import jobs_app
from dataloader.cli.keys import keys_app
from dataloader.cli.observers import nodes_command, observers_app
from dataloader.cli.operations import ops_app
from dataloader.cli.processes import processes_app
from dataloader.cli.queues import queues_app
from dataloader.cli.retention import jobs_prune, retention_app, stats_command
from dataloader.cli.schedules import schedules_app
from dataloader.cli.service import db_app, serve, worker
from dataloader.cli.tokens import tokens_app
from dataloader.cli.users import users_app
from dataloader.cli.workflows import workflows_app

__all__ = ["app", "main"]

app = typer.Typer(
    cls=_Commands, no_args_is_help=True, add_completion=True, pretty_exceptions_enable=False,
    help="Durable background jobs on PostgreSQL. Errors: one line and exit code 2 (bad input or "
         "configuration) or 1 (a failed operation); see docs/errors.md.",
)
app.callback()(_options)

# The root's commands, then its groups, in the order `dataloader --help` lists them.
app.command()(serve)
app.command()(worker)
app.command("stats")(stats_command)
app.command("nodes")(nodes_command)
app.add_typer(db_app, name="db")
app.add_typer(jobs_app, name="jobs")
jobs_app.command("prune")(jobs_prune)
app.add_typer(schedules_app, name="schedules")
app.add_typer(ops_app, name="ops")
app.add_typer(observers_app, name="observers")
app.add_typer(processes_app, name="processes")
app.add_typer(queues_app, name="queues")
app.add_typer(retention_app, name="retention")
app.add_typer(workflows_app, name="workflows")
app.add_typer(users_app, name="users")
app.add_typer(tokens_app, name="tokens")
app.add_typer(audit_app, name="audit")
app.add_typer(keys_app, name="keys")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `dataloader` script (argv None: sys.argv)."""
    if not sys.stdout.isatty() and "COLUMNS" not in os.environ and "TERMINAL_WIDTH" not in os.environ:
        # Rich lays out --help for 80 columns when it cannot ask a terminal (a pipe, a pager, a CI
        # log), cutting the options' help into slivers; a pipe has no width to respect.
        os.environ["COLUMNS"] = "120"
    app(args=argv)
