"""Every error dataloader raises, in one place. Each carries a stable `code` that the HTTP API
(`api/v1/models.py` maps codes to statuses) and the CLI print, so callers can tell them apart
without parsing messages."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any


class DataloaderError(Exception):
    code = "error"


# -- configuration and schema --------------------------------------------------------------------

class ConfigError(DataloaderError):
    """A setting is missing or wrong; names the environment variable."""

    code = "config_error"

    def __init__(self, variable: str, problem: str) -> None:
        self.variable = variable
        self.problem = problem
        super().__init__(f"{variable}: {problem}")


class SchemaMismatch(DataloaderError, RuntimeError):
    """dl_jobs exists but is not the 003 table: refused untouched. (storage/migrate.py raises this
    one class; RuntimeError is kept as a base for callers that caught it before it moved here.)"""

    code = "schema_mismatch"


class SchemaNotReady(DataloaderError):
    """The database has no dataloader schema (or an older one): run `dataloader db upgrade`."""

    code = "schema_not_ready"


class DatabaseUnavailable(DataloaderError):
    """The database cannot be reached (refused, unknown host, timed out, too many connections)."""

    code = "database_unavailable"


class EmbeddedServerFailed(DataloaderError):
    """The embedded PostgreSQL (DL_DB_DSN unset) did not start; the message carries the server's own
    reason (its last FATAL line) and where its log is."""

    code = "embedded_server_failed"


class TooManyQueries(DataloaderError):
    """This node already runs as many expensive queries (searches, counts, dry runs) as
    DL_API_MAX_EXPENSIVE_QUERIES allows; retry in a moment."""

    code = "too_many_queries"


# -- requests about jobs -------------------------------------------------------------------------

class InvalidJobRequest(DataloaderError):
    code = "invalid_request"


# -- bad input, whatever the face -----------------------------------------------------------------

class ValidationFailed(InvalidJobRequest, ValueError):
    """A request that does not fit its model: a wrong type, a value out of range, a blank name, two
    options that exclude each other. The Python API raises it where HTTP answers 422
    `validation_error` and the CLI exits 2, from the same model (ValueError is a base so code that
    caught the ValueError of a bad argument still does). `fields` lists each problem as
    `{"loc": [...], "msg": ..., "type": ...}`, as the HTTP body's `fields`. An InvalidJobRequest
    too: code that caught that for a bad listing status still does."""

    code = "validation_error"

    def __init__(self, message: str, fields: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        # Never empty, as HTTP's: a check over the whole request has one problem with no location.
        self.fields = fields or [{"loc": [], "msg": message, "type": "value_error"}]

    @classmethod
    def from_errors(cls, errors: Sequence[Mapping[str, Any]], *, prefix: Sequence[str | int] = ()
                    ) -> ValidationFailed:
        """From pydantic's `ValidationError.errors()`: one line naming each field (at most five)."""
        fields = [{"loc": [*prefix, *e.get("loc", ())], "msg": str(e.get("msg", "")).removeprefix("Value error, "),
                   "type": str(e.get("type", ""))} for e in errors[:50]]
        summary = "; ".join(f"{'.'.join(str(p) for p in f['loc']) or 'request'}: {f['msg']}" for f in fields[:5])
        return cls(summary or "invalid request", fields)


class InvalidJson(InvalidJobRequest):
    """Text that should be JSON is not (an HTTP body, a CLI option such as --args)."""

    code = "invalid_json"


class ArgsTooLarge(InvalidJobRequest):
    code = "args_too_large"


class InvalidCursor(InvalidJobRequest):
    code = "invalid_cursor"


class UnknownTask(InvalidJobRequest):
    code = "unknown_task"


class JobNotFound(DataloaderError):
    code = "job_not_found"


class IdempotencyConflict(DataloaderError):
    code = "idempotency_conflict"


class RestartConflict(DataloaderError):
    """A restartable trigger's lock_key names a queued restartable job of another task or queue."""

    code = "restart_conflict"


class ChainNotFound(DataloaderError):
    code = "chain_not_found"


class JobAlreadyFinished(DataloaderError):
    code = "job_already_finished"


class JobNotRetryable(DataloaderError):
    """Only a failed, canceled or lost job can be retried."""

    code = "job_not_retryable"


class JobNotQueued(DataloaderError):
    """Only a queued job's priority can change: the claim is its only reader, so a running or
    finished job's priority would change nothing but its history."""

    code = "job_not_queued"


class JobNotFinished(DataloaderError):
    """Only a finished job can be deleted: a queued or running one is canceled first (a worker must
    never find its running job gone, and a queued one may hold its key's place)."""

    code = "job_not_finished"


# -- requests about schedules --------------------------------------------------------------------

class InvalidScheduleRequest(DataloaderError):
    """A schedule that cannot be: a bad cron expression or time zone, an impossible date, bad args."""

    code = "invalid_request"


class InvalidSchedule(ValidationFailed, InvalidScheduleRequest):
    """A schedule that does not fit its model (a bad cron or zone, an interval out of range, a bad
    name): HTTP's validation_error for the same body. An InvalidScheduleRequest as before."""


class ScheduleNotFound(DataloaderError):
    code = "schedule_not_found"


class ScheduleExists(DataloaderError):
    code = "schedule_exists"


# -- observers and nodes (docs/observers.md) --------------------------------------------

class InvalidObserverRequest(DataloaderError):
    """An observer that cannot be created: a bad name, an unknown kind, args that cannot be stored."""

    code = "invalid_request"


class InvalidObserver(ValidationFailed, InvalidObserverRequest):
    """An observer that does not fit its model (a bad name, restarts out of range): HTTP's
    validation_error for the same body. An InvalidObserverRequest as before."""


class ObserverNotFound(DataloaderError):
    code = "observer_not_found"


class ObserverExists(DataloaderError):
    code = "observer_exists"


# -- people and access (docs/security.md) -------------------------------------------------------

class UserNotFound(DataloaderError):
    code = "user_not_found"


class UserExists(DataloaderError):
    code = "user_exists"


class LastAdmin(DataloaderError):
    """The change would leave no enabled admin among the users (nobody could manage them from the
    console or the API any more): promote or enable another admin first."""

    code = "last_admin"



class ObserverFenced(Exception):
    """Raised inside an observer whose run no longer holds it (moved to another node, or stopped):
    it must end without writing more."""
# -- requests about processes (docs/processes.md) --------------------------------------

class InvalidProcessRequest(DataloaderError):
    code = "invalid_request"


class InvalidProcess(ValidationFailed, InvalidProcessRequest):
    """A process request whose shape is wrong (a namespace or id that cannot be, a key or timeout
    out of range, a bad page): HTTP's validation_error for the same request. An
    InvalidProcessRequest as before."""


class UnknownNamespace(DataloaderError):
    """No processor is registered for the namespace in this process."""

    code = "unknown_namespace"


class ProcessNotFound(DataloaderError):
    code = "process_not_found"


class ProcessExists(DataloaderError):
    code = "process_exists"


class ProcessWrongStatus(DataloaderError):
    """The operation needs another status (a call needs `running`, a repair `error`); the message
    names the process's status."""

    code = "process_wrong_status"

    def __init__(self, message: str, status: str) -> None:
        super().__init__(message)
        self.status = status


class ProcessTaskFailed(DataloaderError):
    """The processor raised (or the task could not apply); `error` is its text, `task_id` the task."""

    code = "process_task_failed"

    def __init__(self, message: str, task_id: str | None = None) -> None:
        super().__init__(message)
        self.task_id = task_id


class ProcessTimeout(DataloaderError):
    """The task did not end within the caller's wait; it goes on, its result will be stored (read it
    with the same idempotency key, or in the process's trace)."""

    code = "process_timeout"

    def __init__(self, message: str, task_id: str | None = None) -> None:
        super().__init__(message)
        self.task_id = task_id



# -- requests about workflows (docs/workflows.md) --------------------------------------------------

class UnknownWorkflow(DataloaderError):
    """No workflow of that name is registered in this process (DL_PIPELINE_MODULES imports them)."""

    code = "unknown_workflow"


class WorkflowNotFound(DataloaderError):
    code = "workflow_not_found"


class WorkflowFinished(DataloaderError):
    """The run has ended (a signal or a cancel needs a run that has not); `status` is its end."""

    code = "workflow_finished"

    def __init__(self, message: str, status: str) -> None:
        super().__init__(message)
        self.status = status


class TokenNotFound(DataloaderError):
    """No wait token with that value (docs/workflows.md "Wait tokens")."""

    code = "token_not_found"


class TokenUsed(DataloaderError):
    """The wait token was completed already: a token answers once."""

    code = "token_used"


class WorkflowFailed(DataloaderError):
    """The run ended failed, canceled or lost (`status`); the message is its error."""

    code = "workflow_failed"

    def __init__(self, message: str, status: str) -> None:
        super().__init__(message)
        self.status = status


class WorkflowTimeout(DataloaderError):
    """The run did not end within the caller's wait; it goes on."""

    code = "workflow_timeout"

class QueuePaused(DataloaderError):
    """A caller's task (`init`, `call`, `repair`) would wait in a paused queue: nothing is queued,
    and the caller hears so at once instead of waiting out its timeout (resume the queue, or the
    namespace's task `dl.process`, then call again). `.queue` names it."""

    code = "queue_paused"

    def __init__(self, message: str, queue: str | None = None) -> None:
        super().__init__(message)
        self.queue = queue


class ProcessBusy(DataloaderError):
    """A restart needs the process idle: one of its tasks runs now, or a caller's task waits in the
    queue (retry when it ended)."""

    code = "process_busy"


class RestartNotPossible(DataloaderError):
    """The process cannot go back to that point: an imported process has no `init` to restart
    from, an event written by an import has no task, a task that never changed the process (or
    ran before migration 0016) kept no state to go back to."""

    code = "restart_not_possible"


class ArchiveNotConfigured(DataloaderError):
    """A read of the archive (docs/patterns.md "Archival") where no DL_ARCHIVE_URL is set."""

    code = "archive_not_configured"


class ArchiveUnavailable(DataloaderError):
    """The archive's storage did not answer (a listing or a file read failed): try again."""

    code = "archive_unavailable"
# -- access: API tokens and what a principal may do (docs/security.md) ----------------------------

class Forbidden(DataloaderError):
    """The principal (a token's scopes, a user's role) does not allow the action: HTTP 403."""

    code = "forbidden"



class InvalidApiToken(ValidationFailed):
    """A token that does not fit its model (a bad name, no scope, an expiry out of bounds)."""


class ApiTokenNotFound(DataloaderError):
    """No API token with that id (or no token of that name that is not revoked)."""

    code = "api_token_not_found"


class ApiTokenExists(DataloaderError):
    """A token that is not revoked already has the name: revoke it first, or pick another name."""

    code = "api_token_exists"


# -- what each code means for the CLI's exit code (docs/errors.md) --------------------------------

# The request or the configuration is wrong: the CLI exits 2 (as click does for a bad option), HTTP
# answers 400/413/415/422. Every other code is a request that was fine but could not be done now or
# here (not found, a conflict, the database unreachable, a processor that raised): exit 1.
INPUT_ERROR_CODES = frozenset({
    "config_error", "schema_mismatch", "invalid_json", "unsupported_media_type", "validation_error",
    "invalid_request", "invalid_cursor", "unknown_task", "args_too_large", "request_too_large",
})


def exit_code(error: DataloaderError) -> int:
    """The CLI's exit code for `error`: 2 for bad input or configuration, 1 for a failed operation."""
    return 2 if error.code in INPUT_ERROR_CODES else 1


# -- raised by pipelines to steer their job --------------------------------------------------------

class FatalError(Exception):
    """The job fails at once, without retries (bad input, a permanent refusal, ...)."""


class JobStopped(Exception):
    """Raised inside a pipeline by `JobContext.raise_if_stopped()` once the job was asked to stop
    (cancel, shutdown, or the lease was lost). The worker then ends the attempt accordingly."""


class AttemptFenced(JobStopped):
    """`ctx.transaction()` could not finish its job at commit: the attempt had been fenced off (the
    reaper took the job back after a lost lease). Everything written in the block was rolled back;
    the job runs again elsewhere. Its `args[0]` is the stop reason, `"lease_lost"`."""

    def __init__(self, detail: str = "") -> None:
        super().__init__("lease_lost")
        self.detail = detail

    def __str__(self) -> str:
        return f"lease_lost: {self.detail}" if self.detail else "lease_lost"


# -- outcomes a pipeline returns (or raises) instead of succeeding -------------------------------
#
# They are exceptions so a pipeline can `raise` them from anywhere (a helper deep in the call
# stack, a generator between chunks), and plain values so a function can `return` them. Seconds are
# checked here, when the outcome is made, like a backoff's delay: a finite number, 0 to one year.

MAX_OUTCOME_DELAY_SEC = 365 * 24 * 3600.0


def _seconds(name: str, value: object) -> float:
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise TypeError(f"{name} must be seconds (int or float) or a timedelta, got {type(value).__name__}")
    if seconds != seconds:  # NaN
        raise ValueError(f"{name} must be a number, got NaN")
    if not 0 <= seconds <= MAX_OUTCOME_DELAY_SEC:
        raise ValueError(f"{name} must be between 0 and {MAX_OUTCOME_DELAY_SEC:.0f} seconds (a year), got {seconds}")
    return seconds


class JobOutcome(Exception):  # named for what it is: an outcome, not an error
    """Base of the outcomes a pipeline may return or raise instead of succeeding."""


class Snooze(JobOutcome):
    """Run the job again `seconds` from now WITHOUT using an attempt (back to `queued`, like a
    shutdown's hand-back). Journal: `requeue` with reason `snooze`."""

    def __init__(self, seconds: float | timedelta = 0) -> None:
        self.seconds = _seconds("Snooze seconds", seconds)
        super().__init__(f"snoozed for {self.seconds:g} s")


class Retry(JobOutcome):
    """Fail this attempt and run again `after` seconds (or a timedelta) from now; without `after`,
    when the pipeline's backoff says. It uses an attempt: with none left the job fails as any error
    would. Journal: `requeue` with reason `retry`, or `failed` when no attempt is left."""

    def __init__(self, after: float | timedelta | None = None, reason: str | None = None) -> None:
        self.after = None if after is None else _seconds("Retry after", after)
        self.reason = reason
        when = "after the backoff" if self.after is None else f"in {self.after:g} s"
        super().__init__(reason or f"retry requested {when}")


class Cancel(JobOutcome):
    """End the job `canceled` now; `reason` becomes its error. Journal: `canceled`."""

    def __init__(self, reason: str = "canceled by the pipeline") -> None:
        self.reason = str(reason)
        super().__init__(self.reason)


# --- Recovery and operations ---------------------------------------------------------

class OperationNotFound(DataloaderError):
    code = "operation_not_found"


class OperationStateConflict(DataloaderError):
    """Pause, resume or cancel asked of an operation in a state that does not allow it (a finished
    operation cannot be resumed; a running one is not paused twice)."""

    code = "operation_state_conflict"


# --- Encryption at rest (docs/security.md) ------------------------------------------------

class EncryptionKeyMissing(DataloaderError):
    """A stored payload is encrypted with a key this process does not hold (or does not decrypt
    with the key of its id); `kid` names the key to add back to DL_ENCRYPTION_KEYS."""

    code = "encryption_key_missing"

    def __init__(self, message: str, kid: str) -> None:
        self.kid = kid
        super().__init__(message)



class EncryptionOff(DataloaderError):
    """A key operation (status, rotate) on a node without DL_ENCRYPTION_KEYS."""

    code = "encryption_off"


# -- not DataloaderErrors: each keeps the standard base its callers catch it by ------------------

class InsertGroupClosed(RuntimeError):
    """An enqueue on the pool reached an App that is closed, or closed before the enqueue ran
    (storage/insert_group.py)."""


class InvalidIntent(Exception):
    """The processor returned something that is not a valid Intent (the task fails as if it raised;
    processes/step.py)."""


class DrainTimeout(TimeoutError):
    """The queue still had work when `dataloader.testing.drain`'s timeout came; `result` (a
    `testing.DrainResult`) has what finished so far and `pending` the jobs (`Job`) that were still
    running or due. Importable from `dataloader.testing`, where docs/testing.md names it."""

    def __init__(self, message: str, result: Any, pending: list[Any]) -> None:
        super().__init__(message)
        self.result = result
        self.pending = pending
