"""Jobs: the operator's search (every JobFilter field in the URL, keyset paging, a capped count)
and a job's page (args with secrets masked, progress, result, error and traceback, the journal as a
timeline, attempts, lock_key and who holds it, its chain), with cancel, retry (the requeue of a
failed, canceled or lost job), set priority (a queued job) and delete (a finished one), each the
`App` call every face makes. The job's state and its journal are live (topics `job:<id>` and
`journal:<id>`). A job that retention removed but the archive holds (docs/patterns.md "Archival")
shows as archived: its row and journal from the archive, read only."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from dataloader.exceptions import ArchiveNotConfigured, DataloaderError, JobNotFound
from dataloader.jobs.manager import check_priority
from dataloader.model.job import ACTIVE_STATUSES, FINISHED_STATUSES, RETRYABLE_STATUSES, JobStatus
from dataloader.ui import filters, render
from dataloader.ui.actions import action_form, ask, back, confirmed, to
from dataloader.ui.render import Can
from dataloader.ui.topic import Topic

if TYPE_CHECKING:
    from dataloader.app import App
    from dataloader.model.job import Job
    from dataloader.retention.archive import ArchivedJob

NAV = ("Jobs", "/jobs")
PAGE_SIZE = 50
# The count shown above the results stops here ("10,000+"): exact counts of millions cost seconds.
COUNT_CAP = 10_000
STATUSES = [s.value for s in JobStatus]
# The journal rows a job's page shows (oldest first), on the page and live.
JOURNAL_LIMIT = 500


async def search(request: Request) -> Response:
    """The results at once; their count comes after (`count`), so a costly count never holds the page."""
    app = request.app.state.console.app()
    values = filters.form_values(request.query_params)
    cursor = request.query_params.get("cursor") or None
    problem = page = None
    try:
        page = await app.search(filters.job_filter(values), cursor=cursor, limit=PAGE_SIZE)
    except DataloaderError as exc:  # a bad filter is shown next to the form it came from
        problem = f"{exc.code}: {exc}"
    return render.page(
        request, "jobs.html", status=200 if problem is None else 422, values=values, statuses=STATUSES,
        jobs=page.jobs if page else [], next_cursor=page.next_cursor if page else None,
        problem=problem, query=filters.query_string(values),
        next_query=filters.query_string(values, cursor=page.next_cursor or "") if page else "")


async def count(request: Request) -> Response:
    """GET /ui/jobs/count?<filter>: the number of matching jobs (a fragment the jobs page loads)."""
    app = request.app.state.console.app()
    values = filters.form_values(request.query_params)
    total = await app.count_jobs(filters.job_filter(values), at_most=COUNT_CAP)
    html = render.fragment("jobs_count.html", root=request.scope.get("root_path", ""), count=total,
                           count_cap=COUNT_CAP, query=filters.query_string(values),
                           can=render.can_of(request))
    return HTMLResponse(html)


async def lock_holder(app: App, job: Job) -> Job | None:
    """The running job of this job's lock_key (itself, another, or none)."""
    page = await app.search({"lock_key_prefix": job.lock_key, "statuses": ["running"]}, limit=20)
    return next((j for j in page.jobs if j.lock_key == job.lock_key), None)


async def job_state(app: App, job_id: uuid.UUID) -> dict[str, Any]:
    job = await app.get(job_id)
    return {"job": job, "holder": await lock_holder(app, job),
            "can_cancel": job.status in ACTIVE_STATUSES and not job.cancel_requested,
            "can_retry": job.status in RETRYABLE_STATUSES, "can_set_priority": job.status == JobStatus.queued,
            "can_delete": job.status in FINISHED_STATUSES}


async def render_job_live(app: App, arg: str, root: str, can: Can) -> str:
    return render.fragment("job_live.html", root=root, csrf="", can=can,
                           **await job_state(app, uuid.UUID(arg)))


async def render_journal_live(app: App, arg: str, root: str, can: Can) -> str:
    """The job's journal as the page shows it: a topic of its own, so a new row (a requeue, a
    priority change, a cancel request) appears without a reload, rendered once per round for every
    browser on the page, like the job's state."""
    events = await app.events(uuid.UUID(arg), limit=JOURNAL_LIMIT)
    return render.fragment("job_journal.html", root=root, events=events)


def is_uuid(arg: str) -> bool:
    try:
        uuid.UUID(arg)
    except ValueError:
        return False
    return True


async def show(request: Request) -> Response:
    app = request.app.state.console.app()
    job_id = request.path_params["job_id"]
    try:
        state = await job_state(app, job_id)
    except JobNotFound:
        archived = await archived_job(app, job_id)
        if archived is None:
            raise
        return render.page(request, "job_archived.html", archived=archived, events=archived.events)
    job = state["job"]
    events = await app.events(job_id, limit=JOURNAL_LIMIT)
    chain = await app.chain(job_id) if job.chain_id is not None else None
    return render.page(request, "job.html", **state, events=events, chain=chain)


async def archived_job(app: App, job_id: uuid.UUID) -> ArchivedJob | None:
    """The job from the archive (docs/patterns.md "Archival") when retention removed it; None when
    no archive is configured or it is not there either (the page is then the usual not-found)."""
    try:
        return await app.archive.history(job_id)
    except (JobNotFound, ArchiveNotConfigured):
        return None


async def cancel(request: Request) -> Response:
    """Destructive (a running job stops): asks first (ui/actions.py)."""
    form = await action_form(request)
    job_id = request.path_params["job_id"]
    app = request.app.state.console.app()
    if not confirmed(form):
        job = await app.get(job_id)
        return ask(request, form, question=f"Cancel job {job_id}?", button="Cancel the job",
                   consequence=f"{job.task} in queue {job.queue} is {job.status.value}: "
                               + ("it is canceled at once." if job.status == JobStatus.queued else
                                  "it is asked to stop and turns canceled at its next chunk."
                                  if job.status == JobStatus.running else "it cannot be canceled any more.")
                               + " Retry puts a canceled job back in its queue.",
                   keep=f"/jobs/{job_id}")
    job = await app.cancel(job_id)
    said = (f"Job {job_id} canceled." if job.status == JobStatus.canceled
            else f"Job {job_id} asked to stop: it turns canceled at its next chunk.")
    return back(request, form, f"/jobs/{job_id}", said)


async def retry(request: Request) -> Response:
    form = await action_form(request)
    job_id = request.path_params["job_id"]
    job = await request.app.state.console.app().retry(job_id)
    return back(request, form, f"/jobs/{job_id}",
                f"Job {job_id} back in queue {job.queue} with a fresh attempt budget ({job.max_attempts}).")


def priority_from_form(text: str) -> int:
    """The form's text as a priority, refused as the CLI refuses the same text (one check,
    `check_priority`, behind every face)."""
    text = text.strip()
    return check_priority(int(text) if text.lstrip("-").isdigit() else text)


async def set_priority(request: Request) -> Response:
    form = await action_form(request)
    job_id = request.path_params["job_id"]
    job = await request.app.state.console.app().set_job_priority(job_id, priority_from_form(form.get("priority", "")))
    return back(request, form, f"/jobs/{job_id}", f"Priority of job {job_id} set to {job.priority}.")


async def delete(request: Request) -> Response:
    """Destructive: asks first. The job is gone afterwards: back to the jobs of its queue."""
    form = await action_form(request)
    app = request.app.state.console.app()
    job_id = request.path_params["job_id"]
    job = await app.get(job_id)
    if not confirmed(form):
        return ask(request, form, question=f"Delete job {job_id}?", button="Delete the job",
                   consequence=f"{job.task} in queue {job.queue} ({job.status.value}) and its journal are "
                               "removed from the database for good; only the log line `job deleted` remains.",
                   keep=f"/jobs/{job_id}")
    await app.delete_job(job_id)
    return to(request, f"/jobs?{urlencode({'queue': job.queue})}", f"Job {job_id} deleted with its journal.")


routes = [Route("/jobs", search, methods=["GET"]), Route("/jobs/count", count, methods=["GET"]),
          Route("/jobs/{job_id:uuid}", show, methods=["GET"]),
          Route("/jobs/{job_id:uuid}/cancel", cancel, methods=["POST"]),
          Route("/jobs/{job_id:uuid}/retry", retry, methods=["POST"]),
          Route("/jobs/{job_id:uuid}/priority", set_priority, methods=["POST"]),
          Route("/jobs/{job_id:uuid}/delete", delete, methods=["POST"])]
TOPICS = {"job": Topic(render_job_live, accepts=is_uuid), "journal": Topic(render_journal_live, accepts=is_uuid)}
