"""Retention and stats (docs/patterns.md "Retention" and "Stats"): `jobs prune`, `stats` and
`retention partitions` (docs/retention.md), registered on the `jobs` group, the root and the
`retention` group in cli/__init__.py."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dataloader.cli.common import _print, _with_app
from dataloader.config import Settings

if TYPE_CHECKING:
    from dataloader.app import App


def jobs_prune(
    older_than: Annotated[str | None, typer.Option(
        help="Delete finished jobs older than this (7d, 12h, 90m, seconds); default: the configured retention")] = None,
    status: Annotated[list[str] | None, typer.Option(
        help="succeeded, canceled, failed or lost; repeat for several (default: all four)")] = None,
    queue: Annotated[list[str] | None, typer.Option(help="Only this queue; repeat for several")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only count what would be deleted")] = False,
) -> None:
    """Delete finished jobs (with their journal rows) in small batches; prints the counts."""
    from dataloader.model.job import FINISHED_STATUS_NAMES as FINISHED_STATUSES

    bad = sorted(set(status or ()) - set(FINISHED_STATUSES))
    if bad:
        raise typer.BadParameter(f"not a finished status: {', '.join(bad)} (allowed: {', '.join(FINISHED_STATUSES)})")
    seconds: float | None = None
    if older_than is not None:
        try:
            seconds = Settings.duration_seconds(older_than)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        if seconds < 0:
            raise typer.BadParameter("--older-than must not be negative")

    async def run(app: App) -> dict[str, Any]:
        report = await app.prune(older_than=seconds, statuses=status, queues=queue, dry_run=dry_run)
        return report.to_dict()

    _print(_with_app(run))


def stats_command(
    queue: Annotated[str | None, typer.Option(help="One queue (default: all)")] = None,
    hours: Annotated[float, typer.Option(min=1 / 60, max=366 * 24, help="How many hours back")] = 24,
    errors: Annotated[bool, typer.Option("--errors", help="Top errors of the period instead")] = False,
    rollup: Annotated[bool, typer.Option("--rollup/--no-rollup",
                                         help="Roll up recently finished jobs first")] = True,
) -> None:
    """Finished jobs per queue and hour (counts by status, run and wait time), or the top errors."""
    from datetime import UTC, timedelta

    async def run(app: App) -> dict[str, Any]:
        if rollup:
            await app.rollup_stats()
        since = datetime.now(UTC) - timedelta(hours=hours)
        if errors:
            return await app.stats_errors(queue=queue, since=since)
        return await app.stats(queue=queue, hours=hours)

    _print(_with_app(run))


retention_app = typer.Typer(no_args_is_help=True, help="The journal's partitions (docs/retention.md)")


@retention_app.command("partitions")
def retention_partitions() -> None:
    """The journal's partitions: ranges, row estimates, sizes and the next drop (JSON)."""

    async def run(app: App) -> dict[str, Any]:
        return await app.retention_partitions()

    _print(_with_app(run))
