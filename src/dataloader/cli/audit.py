"""The audit trail (docs/security.md "Audit trail"): `dataloader audit list`, newest first, as a
table (or JSON with --json). The filter is the one of every face (model/audit.py `AuditFilter`),
checked before the database is opened: a bad value is one line and exit 2."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from dataloader.cli.common import _print, _with_app

if TYPE_CHECKING:
    from dataloader.app import App
    from dataloader.model.audit import AuditPage

audit_app = typer.Typer(help="The audit trail: who changed what, when, from where, and how it ended.",
                        no_args_is_help=True)


@audit_app.command("list")
def audit_list(
    actor: Annotated[str | None, typer.Option(help="A principal (user:alice, cli:root) or a kind (user)")] = None,
    action: Annotated[str | None, typer.Option(help="An action (job.cancel) or a family (job)")] = None,
    target: Annotated[str | None, typer.Option(help="kind:id (job:<uuid>, queue:load) or a kind")] = None,
    outcome: Annotated[str | None, typer.Option(help="ok or refused")] = None,
    since: Annotated[str | None, typer.Option(help="RFC 3339 time, or a duration back (1h, 7d)")] = None,
    until: Annotated[str | None, typer.Option(help="RFC 3339 time, or a duration back (exclusive)")] = None,
    limit: Annotated[int, typer.Option(help="Rows per page (1-500)")] = 100,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of the previous page")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")] = False,
) -> None:
    """The audit trail's rows that match, newest first."""
    from dataloader.model.audit import AuditFilter

    f = AuditFilter.of(actor=actor, action=action, target=target, outcome=outcome, since=since, until=until,
                       limit=limit, cursor=cursor)

    async def run(app: App) -> AuditPage:
        return await app.audit.search(f)

    page = _with_app(run)
    if as_json:
        _print({"entries": [e.to_dict() for e in page.entries], "next_cursor": page.next_cursor})
        return
    _table(page)


def _table(page: AuditPage) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from dataloader.model.clock import iso

    table = Table(show_lines=False)
    for column in ("time", "actor", "face", "action", "target", "outcome", "details"):
        table.add_column(column, overflow="fold")
    for e in page.entries:
        outcome = e.outcome if e.error_code is None else f"{e.outcome}: {e.error_code}"
        table.add_row(iso(e.ts), escape(e.actor), e.face or "", escape(e.action), escape(e.target or ""),
                      outcome, escape(json.dumps(e.details, default=str)))
    console = Console()
    if not console.is_terminal:  # a pipe or a log has no width to respect: keep each row whole
        console = Console(width=240)
    console.print(table)
    if page.next_cursor:
        console.print(f"next page: --cursor {page.next_cursor}", markup=False)
