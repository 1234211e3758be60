"""Every error dataloader raises, in one place. Each carries a stable `code` that the HTTP API
(`api/v1/models.py` maps codes to statuses) and the CLI print, so callers can tell them apart
without parsing messages."""

from __future__ import annotations


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


class SchemaMismatch(DataloaderError):
    """dl_jobs exists but is not the 003 table: refused untouched."""

    code = "schema_mismatch"


class SchemaNotReady(DataloaderError):
    """The database has no dataloader schema (or an older one): run `dataloader db upgrade`."""

    code = "schema_not_ready"


class DatabaseUnavailable(DataloaderError):
    code = "database_unavailable"


# -- requests about jobs -------------------------------------------------------------------------

class InvalidJobRequest(DataloaderError):
    code = "invalid_request"


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


class JobAlreadyFinished(DataloaderError):
    code = "job_already_finished"


class JobNotRetryable(DataloaderError):
    """Only a failed, canceled or lost job can be retried."""

    code = "job_not_retryable"


# -- requests about schedules --------------------------------------------------------------------

class InvalidScheduleRequest(DataloaderError):
    """A schedule that cannot be: a bad cron expression or time zone, an impossible date, bad args."""

    code = "invalid_request"


class ScheduleNotFound(DataloaderError):
    code = "schedule_not_found"


class ScheduleExists(DataloaderError):
    code = "schedule_exists"


# -- raised by pipelines to steer their job --------------------------------------------------------

class FatalError(Exception):
    """The job fails at once, without retries (bad input, a permanent refusal, ...)."""


class JobStopped(Exception):
    """Raised inside a pipeline by `JobContext.raise_if_stopped()` once the job was asked to stop
    (cancel, shutdown, or the lease was lost). The worker then ends the attempt accordingly."""
