"""Vocabulary of the HTTP API: error codes, each with its HTTP status (job statuses: model.job.JobStatus)."""

from __future__ import annotations

from enum import StrEnum

from dataloader.model.job import JobStatus

__all__ = ["HTTP_STATUS", "ErrorCode", "JobStatus"]


class ErrorCode(StrEnum):
    """Stable values of the `error` field of every 4xx/5xx body."""

    invalid_json = "invalid_json"
    unsupported_media_type = "unsupported_media_type"
    validation_error = "validation_error"
    invalid_request = "invalid_request"
    invalid_cursor = "invalid_cursor"
    unknown_task = "unknown_task"
    args_too_large = "args_too_large"
    request_too_large = "request_too_large"
    unauthorized = "unauthorized"
    forbidden = "forbidden"
    api_token_not_found = "api_token_not_found"
    api_token_exists = "api_token_exists"
    job_not_found = "job_not_found"
    not_found = "not_found"
    method_not_allowed = "method_not_allowed"
    idempotency_conflict = "idempotency_conflict"
    job_already_finished = "job_already_finished"
    job_not_retryable = "job_not_retryable"
    job_not_queued = "job_not_queued"
    job_not_finished = "job_not_finished"
    restart_conflict = "restart_conflict"
    chain_not_found = "chain_not_found"
    schedule_not_found = "schedule_not_found"
    schedule_exists = "schedule_exists"
    observer_not_found = "observer_not_found"
    observer_exists = "observer_exists"
    user_not_found = "user_not_found"
    user_exists = "user_exists"
    last_admin = "last_admin"
    unknown_namespace = "unknown_namespace"
    process_not_found = "process_not_found"
    process_exists = "process_exists"
    process_wrong_status = "process_wrong_status"
    process_task_failed = "process_task_failed"
    process_timeout = "process_timeout"
    queue_paused = "queue_paused"
    unknown_workflow = "unknown_workflow"
    workflow_not_found = "workflow_not_found"
    workflow_finished = "workflow_finished"
    token_not_found = "token_not_found"
    token_used = "token_used"
    workflow_failed = "workflow_failed"
    workflow_timeout = "workflow_timeout"
    process_busy = "process_busy"
    restart_not_possible = "restart_not_possible"
    operation_not_found = "operation_not_found"
    operation_state_conflict = "operation_state_conflict"
    encryption_key_missing = "encryption_key_missing"
    encryption_off = "encryption_off"
    schema_not_ready = "schema_not_ready"
    query_timeout = "query_timeout"
    too_many_queries = "too_many_queries"
    too_many_failures = "too_many_failures"
    request_timeout = "request_timeout"
    database_unavailable = "database_unavailable"
    embedded_server_failed = "embedded_server_failed"
    archive_not_configured = "archive_not_configured"
    archive_unavailable = "archive_unavailable"
    internal_error = "internal_error"


HTTP_STATUS: dict[str, int] = {
    ErrorCode.invalid_json: 400,
    ErrorCode.unsupported_media_type: 415,
    ErrorCode.validation_error: 422,
    ErrorCode.invalid_request: 422,
    ErrorCode.invalid_cursor: 422,
    ErrorCode.unknown_task: 422,
    ErrorCode.args_too_large: 413,
    ErrorCode.request_too_large: 413,
    ErrorCode.unauthorized: 401,
    ErrorCode.forbidden: 403,
    ErrorCode.api_token_not_found: 404,
    ErrorCode.api_token_exists: 409,
    ErrorCode.job_not_found: 404,
    ErrorCode.not_found: 404,
    ErrorCode.method_not_allowed: 405,
    ErrorCode.idempotency_conflict: 409,
    ErrorCode.job_already_finished: 409,
    ErrorCode.job_not_retryable: 409,
    ErrorCode.job_not_queued: 409,
    ErrorCode.job_not_finished: 409,
    ErrorCode.restart_conflict: 409,
    ErrorCode.chain_not_found: 404,
    ErrorCode.schedule_not_found: 404,
    ErrorCode.schedule_exists: 409,
    ErrorCode.observer_not_found: 404,
    ErrorCode.observer_exists: 409,
    ErrorCode.user_not_found: 404,
    ErrorCode.user_exists: 409,
    ErrorCode.last_admin: 409,
    ErrorCode.unknown_namespace: 404,
    ErrorCode.process_not_found: 404,
    ErrorCode.process_exists: 409,
    ErrorCode.process_wrong_status: 409,
    ErrorCode.process_task_failed: 422,
    ErrorCode.process_timeout: 504,
    ErrorCode.queue_paused: 409,
    ErrorCode.unknown_workflow: 404,
    ErrorCode.workflow_not_found: 404,
    ErrorCode.workflow_finished: 409,
    ErrorCode.token_not_found: 404,
    ErrorCode.token_used: 409,
    ErrorCode.workflow_failed: 409,
    ErrorCode.workflow_timeout: 504,
    ErrorCode.process_busy: 409,
    ErrorCode.restart_not_possible: 409,
    ErrorCode.operation_not_found: 404,
    ErrorCode.operation_state_conflict: 409,
    ErrorCode.encryption_key_missing: 409,
    ErrorCode.encryption_off: 409,
    ErrorCode.schema_not_ready: 503,
    ErrorCode.query_timeout: 503,
    ErrorCode.too_many_queries: 429,
    ErrorCode.too_many_failures: 429,
    ErrorCode.request_timeout: 408,
    ErrorCode.database_unavailable: 503,
    ErrorCode.embedded_server_failed: 503,
    ErrorCode.archive_not_configured: 404,
    ErrorCode.archive_unavailable: 503,
    ErrorCode.internal_error: 500,
}

# Header set on a trigger response when no worker of this process serves the job's queue.
WARNING_HEADER = "X-Dataloader-Warning"
QUEUE_NOT_SERVED = "queue_not_served"
