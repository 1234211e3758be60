"""Errors shared across layers. Each carries a stable `code` for API and CLI output."""

from __future__ import annotations


class DataloaderError(Exception):
    code = "error"


class ConfigError(DataloaderError):
    code = "config_error"

    def __init__(self, variable: str, problem: str) -> None:
        self.variable = variable
        self.problem = problem
        super().__init__(f"{variable}: {problem}")


class JobNotFound(DataloaderError):
    code = "job_not_found"


class IdempotencyConflict(DataloaderError):
    code = "idempotency_conflict"


class JobAlreadyFinished(DataloaderError):
    code = "job_already_finished"


class InvalidJobRequest(DataloaderError):
    code = "invalid_request"


class UnknownTask(DataloaderError):
    code = "unknown_task"


class DatabaseUnavailable(DataloaderError):
    code = "database_unavailable"
