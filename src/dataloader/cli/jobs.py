"""`dataloader jobs`: enqueue, inspect, cancel, retry, reprioritise and delete jobs (`jobs prune` is retention's)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dataloader.cli.common import _json_option, _print, _uuid_argument, _with_app
from dataloader.exceptions import ValidationFailed

if TYPE_CHECKING:
    from dataloader.app import App

jobs_app = typer.Typer(help="Enqueue, inspect, cancel, retry, reprioritise and delete jobs.", no_args_is_help=True)


def _job_id(value: str) -> uuid.UUID:
    return _uuid_argument(value, "a UUID")


@jobs_app.command("trigger")
def jobs_trigger(
    task: Annotated[str, typer.Option(help="Pipeline name, e.g. dl.sleep")],
    lock_key: Annotated[str | None, typer.Option(
        help="Jobs with the same lock_key never run at once (default: the job's own id)")] = None,
    queue: Annotated[str, typer.Option()] = "default",
    args: Annotated[str, typer.Option(help="JSON object")] = "{}",
    idempotency_key: Annotated[str | None, typer.Option()] = None,
    partition_key: Annotated[str, typer.Option()] = "",
    priority: Annotated[int, typer.Option(help="Lower runs first")] = 100,
    available_at: Annotated[str | None, typer.Option(help="RFC 3339 time with timezone")] = None,
    delay: Annotated[float | None, typer.Option(help="Seconds from now (instead of --available-at)")] = None,
    max_attempts: Annotated[int | None, typer.Option()] = None,
    lease_ttl_sec: Annotated[int | None, typer.Option(
        help="Lease of each attempt, renewed by heartbeats (default: DL_DEFAULT_LEASE_TTL_SEC)")] = None,
    timeout_sec: Annotated[int | None, typer.Option(help="Run-time limit of each attempt, seconds")] = None,
    then: Annotated[list[str] | None, typer.Option(
        help="A stage to run after it succeeds: a task name, or a JSON Stage object; repeat for a chain")] = None,
    restartable: Annotated[bool, typer.Option(
        help="The lock_key re-triggers: updates the queued job, or runs once more after the running one")] = False,
    unique_for_sec: Annotated[int | None, typer.Option(
        help="At most one such job (task, queue, --unique-key or args) per window of this many seconds")] = None,
    unique_key: Annotated[str | None, typer.Option(help="What makes jobs the same for --unique-for-sec")] = None,
) -> None:
    """Enqueue a job; prints its id and status."""
    from dataloader.jobs.enqueue import job_request
    from dataloader.jobs.manager import status_view

    # The Python API's own request builder, checked before anything opens: the same model,
    # defaults and errors as App.enqueue (and the HTTP body).
    req = job_request(task, _json_option("args", args), queue=queue, lock_key=lock_key,
                      idempotency_key=idempotency_key, partition_key=partition_key, priority=priority,
                      available_at=_time_option("available-at", available_at), delay=delay,
                      max_attempts=max_attempts, lease_ttl_sec=lease_ttl_sec, timeout_sec=timeout_sec,
                      then=[_stage(item) for item in then or ()], restartable=restartable,
                      unique_for=unique_for_sec, unique_key=unique_key)

    async def run(app: App) -> dict[str, Any]:
        result = await app.jobs.trigger(req, producer="cli")
        return {**status_view(result.job), "created": result.created}

    _print(_with_app(run))


def _time_option(name: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ValidationFailed(f"--{name}: must be an RFC 3339 time with a timezone, e.g. 2030-01-01T12:00:00Z",
                               [{"loc": [name.replace("-", "_")], "msg": "must be an RFC 3339 time",
                                 "type": "datetime_parsing"}]) from None


def _stage(text: str) -> Any:
    """--then: a task name, or a JSON object with Stage's fields."""
    return _json_option("then", text) if text.lstrip().startswith("{") else {"task": text}


@jobs_app.command("chain")
def jobs_chain(chain_or_job_id: str) -> None:
    """Show a chain (multi-stage run) with its stages, by the chain's id or any of its jobs' ids."""
    jid = _job_id(chain_or_job_id)

    async def run(app: App) -> dict[str, Any]:
        return (await app.chain(jid)).to_dict()

    _print(_with_app(run))


@jobs_app.command("status")
def jobs_status(job_id: str) -> None:
    """Show a job's status."""
    from dataloader.jobs.manager import status_view

    jid = _job_id(job_id)

    async def run(app: App) -> dict[str, Any]:
        return status_view(await app.get(jid))

    _print(_with_app(run))


@jobs_app.command("cancel")
def jobs_cancel(job_id: str) -> None:
    """Cancel a job: at once if queued, at its next chunk if running."""
    from dataloader.jobs.manager import status_view

    jid = _job_id(job_id)

    async def run(app: App) -> dict[str, Any]:
        return status_view(await app.cancel(jid))

    _print(_with_app(run))


@jobs_app.command("retry")
def jobs_retry(job_id: str) -> None:
    """Put a failed, canceled or lost job back to the queue, with a fresh attempt budget."""
    from dataloader.jobs.manager import status_view

    jid = _job_id(job_id)

    async def run(app: App) -> dict[str, Any]:
        return status_view(await app.retry(jid))

    _print(_with_app(run))


@jobs_app.command("set-priority", context_settings={"ignore_unknown_options": True})
def jobs_set_priority(
    job_id: str,
    priority: Annotated[str, typer.Argument(help="The new priority, 0 to 2147483647 (lower runs first)")],
) -> None:
    """Change a queued job's priority (journaled as priority_changed)."""
    from dataloader.jobs.manager import check_priority

    jid = _job_id(job_id)
    # Read as text, so a word or a negative number gets the same validation_error as in every face.
    value = check_priority(int(priority) if priority.strip().lstrip("-").isdigit() else priority)

    async def run(app: App) -> dict[str, Any]:
        job = await app.set_job_priority(jid, value)
        return {k: v for k, v in job.to_dict().items() if k != "args"}

    _print(_with_app(run))


@jobs_app.command("delete")
def jobs_delete(job_id: str) -> None:
    """Delete a finished job with its journal (a queued or running one: cancel it first)."""
    jid = _job_id(job_id)

    async def run(app: App) -> dict[str, Any]:
        await app.delete_job(jid)
        return {"job_id": str(jid), "deleted": True}

    _print(_with_app(run))


@jobs_app.command("list")
def jobs_list(
    queue: Annotated[str | None, typer.Option()] = None,
    task: Annotated[str | None, typer.Option()] = None,
    status: Annotated[list[str] | None, typer.Option(help="Repeat for several")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of the previous page")] = None,
) -> None:
    """List jobs, newest first (without args)."""

    async def run(app: App) -> dict[str, Any]:
        page = await app.list(queue=queue, task=task, status=status, limit=limit, cursor=cursor)
        return {"jobs": [{k: v for k, v in job.to_dict().items() if k != "args"} for job in page.jobs],
                "next_cursor": page.next_cursor}

    _print(_with_app(run))


@jobs_app.command("events")
def jobs_events(job_id: str) -> None:
    """Print a job's journal."""
    jid = _job_id(job_id)

    async def run(app: App) -> list[dict[str, Any]]:
        return [event.to_dict() for event in await app.events(jid)]

    _print(_with_app(run))


@jobs_app.command("history")
def jobs_history(
    job_id: str,
    archive: Annotated[str | None, typer.Option(
        help="The archive's URL (file:///dir, s3://bucket/prefix); default DL_ARCHIVE_URL")] = None,
) -> None:
    """Print the journal of a job that retention pruned, read back from the archive (as `jobs events`
    prints a live job's). Reads the archive only: no database is needed."""
    from dataloader.cli.common import _run, _settings
    from dataloader.model.archive_url import check_archive_url
    from dataloader.retention.archive import Archive, NoArchive

    jid = _job_id(job_id)
    settings = _settings()
    if archive is not None:
        try:
            check_archive_url(archive)
        except ValueError as exc:
            raise ValidationFailed(f"--archive: {exc}", [{"loc": ["archive"], "msg": str(exc),
                                                          "type": "value_error"}]) from None
    url = archive or settings.archive_url
    reader = Archive(url) if url else NoArchive()

    async def run() -> list[dict[str, Any]]:
        return [event.to_dict() for event in (await reader.history(jid)).events]

    _print(_run(run()))
