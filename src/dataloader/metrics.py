"""Prometheus metrics of the engine and the service.

Timings follow seed 000 (progressor): *scanning* is dl_claim_duration_seconds, *processing* is
dl_job_run_duration_seconds, *completion* is dl_finish_duration_seconds, *notification* is
dl_notifications_total plus dl_job_queue_wait_seconds (enqueue → start).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram

_FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_SLOW = (0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600)

JOBS_ENQUEUED = Counter("dl_jobs_enqueued_total", "Jobs inserted into the queue", ["queue", "task"])
JOBS_RETRIGGERED = Counter(
    "dl_jobs_retriggered_total",
    "Restartable triggers that updated a queued job of their lock_key instead of inserting one",
    ["queue", "task"])
JOBS_UNIQUE_HITS = Counter(
    "dl_jobs_unique_hits_total",
    "Triggers with unique_for_sec that found a job of their window and inserted nothing",
    ["queue", "task"])
JOB_TIMEOUTS = Counter(
    "dl_job_timeouts_total",
    "Attempts stopped by this node because they ran past their run-time limit",
    ["queue", "task"],
)
JOBS_FINISHED = Counter(
    "dl_jobs_finished_total",
    "Attempts ended by this node, by outcome (succeeded, failed, retried, canceled, released, fenced)",
    ["queue", "task", "outcome"],
)
JOB_RUN_SECONDS = Histogram(
    "dl_job_run_duration_seconds", "Processing: pipeline run time of one attempt", ["queue", "task"],
    buckets=_SLOW,
)
JOB_WAIT_SECONDS = Histogram(
    "dl_job_queue_wait_seconds", "Queue wait: from runnable (enqueue or available_at) to claim",
    ["queue"], buckets=_SLOW,
)
CLAIM_SECONDS = Histogram(
    "dl_claim_duration_seconds", "Scanning: one (batch) claim statement", ["queue"], buckets=_FAST
)
HEARTBEAT_SECONDS = Histogram(
    "dl_heartbeat_duration_seconds", "One (batch) heartbeat statement", ["queue"], buckets=_FAST
)
FINISH_SECONDS = Histogram(
    "dl_finish_duration_seconds", "Completion: one (batch) finish statement", ["queue"], buckets=_FAST
)
REAPER_SECONDS = Histogram("dl_reaper_duration_seconds", "One reaper pass", buckets=_FAST)
JOBS_REAPED = Counter(
    "dl_jobs_reaped_total", "Jobs taken back by the reaper (outcome queued or lost)", ["queue", "outcome"]
)
NOTIFICATIONS = Counter(
    "dl_notifications_total", "Notification: LISTEN messages received", ["channel"]
)
WAKEUPS = Counter(
    "dl_worker_wakeups_total", "Hints of new work to a queue worker by source (notify, timer, poll, reconnect)",
    ["queue", "source"],
)
CLAIM_SKIPPED = Counter(
    "dl_claim_skipped_total",
    "Runnable jobs a claim left queued because of their lock_key: same_key_in_batch (an earlier job of "
    "the key was claimed), lock_held_by_claim (another node claimed a job of the key at that instant), "
    "lock_held_by_stray (held back DL_CLAIM_BACKOFF_SEC), lock_held_by_us (put back)",
    ["queue", "reason"],
)
RUNNING_JOBS = Gauge("dl_running_jobs", "Attempts running in this process", ["queue"])
CLAIMED_AHEAD = Gauge(
    "dl_claimed_ahead_jobs",
    "Jobs this process claimed beyond its queue's concurrency and has not started yet (DL_CLAIM_AHEAD)",
    ["queue"],
)
CLAIM_AHEAD_RETURNED = Counter(
    "dl_claim_ahead_returned_total",
    "Jobs claimed ahead and given back unstarted: shutdown, waited (a heartbeat period without a free "
    "slot), cancel (a cancel was asked for), lease_lost, reconnect (the control connection was lost), "
    "queue_changed (limits or fair share were set)",
    ["queue", "reason"],
)
JOBS_PARKED = Counter(
    "dl_jobs_parked_total",
    "Jobs parked behind a lock_key this worker holds (out of the claim's walk until the key is free)",
    ["queue"],
)
DB_RECONNECTS = Counter("dl_db_reconnects_total", "Database connection losses recovered", ["component"])
# The node's one listening session (storage/notifier.py). Deaf means no NOTIFY wakes anything here:
# work still runs, on the fallback polls' delay (a gauge at 0 for long, or a climbing counter, is
# the server or the network dropping the session).
NOTIFIER_LISTENING = Gauge("dl_notifier_listening", "1 while this process's LISTEN session is up, else 0")
NOTIFIER_RECONNECTS = Counter(
    "dl_notifier_reconnects_total",
    "LISTEN sessions re-established after a loss (each one told every subscriber to re-read what it watches)")

# HTTP face (api/middleware.py). `route` is the route template (/api/v1/jobs/{job_id}/status), never
# the raw path, so job ids do not multiply the series; unmatched paths share route="unmatched".
HTTP_REQUESTS = Counter(
    "dl_http_requests_total", "HTTP requests by method, route template and status code",
    ["method", "route", "status"],
)
HTTP_SECONDS = Histogram(
    "dl_http_request_duration_seconds", "HTTP request handling time", ["method", "route"], buckets=_FAST
)

# Maintenance services (dataloader.maintenance): what the supervisor runs on this node.
SERVICE_UP = Gauge("dl_service_up", "1 while a maintenance service runs on this node, else 0", ["service"])
SERVICE_RESTARTS = Counter(
    "dl_service_restarts_total", "Restarts of a maintenance service after it crashed", ["service"]
)
SERVICE_TICK_SECONDS = Histogram(
    "dl_service_tick_seconds", "One tick of a periodic maintenance service (failed ticks included)", ["service"],
    buckets=(*_FAST, 5.0, 10.0, 30.0, 60.0),
)
LEADER = Gauge(
    "dl_leader", "1 while this node holds the maintenance leader lock, else 0 (absent: no election runs)", ["node"]
)
LEADER_ACQUIRED = Counter(
    "dl_leader_acquired_total",
    "Times this node became the maintenance leader (summed over nodes: the leader changes)", ["node"]
)

# Retention and stats (retention/pruner.py, retention/rollup.py; docs/patterns.md).
JOBS_PRUNED = Counter(
    "dl_jobs_pruned_total", "Finished jobs deleted (with their journal rows) by the pruner", ["queue", "status"]
)
# Encryption at rest (docs/security.md): stored payloads this node could not open (their key is not
# in DL_ENCRYPTION_KEYS, by kid: add it back) and envelopes a rotation re-encrypted.
PAYLOADS_UNREADABLE = Counter("dl_encryption_unreadable_total",
                              "Stored payload envelopes this node read but could not decrypt", ["kid"])
PAYLOADS_REENCRYPTED = Counter("dl_encryption_reencrypted_total",
                               "Stored payload envelopes re-encrypted under the current key by a rotation", ["payload"])
JOBS_CHANGED_BY_OPERATOR = Counter(
    "dl_jobs_changed_by_operator_total",
    "Single jobs an operator changed through set_job_priority or delete_job (bulk ones: dl_operation_jobs_total)",
    ["queue", "action"],
)
# The audit trail (storage/audit_repository.py; docs/security.md "Audit trail").
AUDIT_ROWS = Counter(
    "dl_audit_rows_total", "Rows written to the audit trail (counted once committed), by action and outcome",
    ["action", "outcome"],
)
AUDIT_ROWS_PRUNED = Counter("dl_audit_pruned_total", "Audit rows deleted by the pruner (DL_AUDIT_RETENTION)")
FEED_ROWS_PRUNED = Counter(
    "dl_process_feed_pruned_total",
    "Rows of the processes' event feed deleted by the pruner (DL_RETENTION_PROCESS_FEED)",
)
PRUNE_BATCH_SECONDS = Histogram(
    "dl_prune_batch_duration_seconds", "One prune batch statement (at most DL_RETENTION_BATCH_SIZE jobs)",
    buckets=(*_FAST, 5.0, 10.0),
)
# Archival (retention/archive.py, docs/patterns.md "Archival"): what the pruner exported before
# deleting. A failed export deletes nothing and counts here; the pruner tries again next period.
ARCHIVE_FILES = Counter(
    "dl_archive_files_total", "Archive files written before a delete (one per batch or partition), by outcome "
    "(ok, failed: nothing was deleted)", ["outcome"]
)
ARCHIVE_JOBS = Counter("dl_archive_jobs_total", "Jobs exported to the archive before their delete")
ARCHIVE_BYTES = Counter("dl_archive_bytes_total", "Compressed bytes written to the archive")
ARCHIVE_LAST_SUCCESS = Gauge(
    "dl_archive_last_success_timestamp_seconds", "When this process last wrote an archive file (Unix time)"
)
STATS_ROLLUP_SECONDS = Histogram(
    "dl_stats_rollup_duration_seconds", "One stats rollup window (finished jobs into hourly buckets)",
    buckets=(*_FAST, 5.0, 10.0, 30.0),
)
STATS_LAST_HOUR_JOBS = Gauge(
    "dl_stats_last_hour_jobs",
    "Jobs finished in the last complete hour, by queue and status (from the rollup; set on the leader)",
    ["queue", "status"],
)
STATS_LAST_HOUR_RUN_P95 = Gauge(
    "dl_stats_last_hour_run_p95_seconds",
    "p95 of the last attempt's run time of jobs finished in the last complete hour (set on the leader)",
    ["queue"],
)
STATS_LAST_HOUR_WAIT_P95 = Gauge(
    "dl_stats_last_hour_wait_p95_seconds",
    "p95 of the queue wait of jobs finished in the last complete hour (set on the leader)",
    ["queue"],
)

# Recovery and operations (docs/operations.md). With dl_job_timeouts_total (run-time
# expiries), the three timeouts of seed 002 per queue and task.
LEASE_EXPIRIES = Counter(
    "dl_lease_expiries_total", "Attempts whose lease expired (the reaper took them back), by queue and task",
    ["queue", "task"],
)
WORKER_DEATHS_JOBS = Counter(
    "dl_jobs_taken_from_dead_workers_total",
    "Running jobs taken back before their lease ran out because their worker's process was found dead "
    "on its machine (a restarted node's first look), by queue",
    ["queue"],
)
ATTEMPTS_SELF_FENCED = Counter(
    "dl_attempts_self_fenced_total",
    "Attempts this node stopped because no heartbeat could renew their lease in time (the database was "
    "unreachable): stopped before the lease ran out, so another node may take the job",
    ["queue"],
)
QUEUE_TIME_EXPIRIES = Counter(
    "dl_queue_time_expiries_total",
    "Jobs found waiting to start longer than their queue's limit, by queue, task and action (flagged, failed)",
    ["queue", "task", "action"],
)
OPERATION_JOBS = Counter(
    "dl_operation_jobs_total",
    "Jobs (processes, workflow runs) a bulk operation handled on this node, by kind and result (changed, "
    "skipped: no longer eligible, failed: refused for a reason of its own)",
    ["kind", "result"],
)
OPERATION_BATCH_SECONDS = Histogram(
    "dl_operation_batch_duration_seconds", "One bulk operation batch (one transaction)", ["kind"],
    buckets=(*_FAST, 5.0, 10.0),
)
OPERATION_TAKEOVERS = Counter(
    "dl_operation_takeovers_total", "Bulk operations this node took over from a runner whose lease expired"
)

# --- Node registry and observers (docs/observers.md) --------------------------------------
OBSERVERS_RUNNING = Gauge("dl_observers_running", "Observers running on this node now")
OBSERVER_CLAIMS = Counter("dl_observer_claims_total", "Observers this node took (started or moved here)")
OBSERVER_CRASHES = Counter(
    "dl_observer_crashes_total", "Observers that ended by themselves here (raised or returned); they restart "
    "with backoff", ["kind"])
NODES_MARKED_DEAD = Counter("dl_nodes_marked_dead_total", "Silent nodes this node declared dead")
NODE_HEARTBEAT_SECONDS = Histogram("dl_node_heartbeat_duration_seconds", "One node heartbeat statement",
                                   buckets=_FAST)
# Workflows (docs/workflows.md). Labeled by the registered workflow's name, never by a step's name
# (a step name may be built at run time: no bound on its values).
WORKFLOW_STEPS = Counter(
    "dl_workflow_steps_total", "Workflow step functions run by this process, by how they ended (succeeded, "
    "retried: it raised and runs again after its backoff, failed: out of attempts or a FatalError)",
    ["workflow", "outcome"],
)
WORKFLOW_STEP_SECONDS = Histogram(
    "dl_workflow_step_duration_seconds", "A workflow step function's run time", ["workflow"], buckets=_SLOW,
)
WORKFLOW_TOKENS_COMPLETED = Counter(
    "dl_workflow_tokens_completed_total", "Wait tokens completed (each counts once; a second completion is refused)",
)
WORKFLOW_DEADLINES = Counter(
    "dl_workflow_deadlines_total", "Runs that failed because they passed their deadline, by workflow", ["workflow"],
)
WORKFLOW_SUSPENDS = Counter(
    "dl_workflow_suspends_total", "Runs that handed their job back without a worker, by why: sleep, wait, "
    "gather, step_job (a step running as a job of its own), retry (a step's backoff), taken_back (the run's "
    "job was no longer this attempt's), database",
    ["workflow", "reason"],
)
# Processes (docs/processes.md). Progressor's timings in seconds: scanning is
# dl_claim_duration_seconds (the claim of queue process:<ns>), the rest are below.
PROCESS_PREPARE_SECONDS = Histogram(
    "dl_process_request_preparing_duration_seconds",
    "Preparing a request (init, call, repair): checks and the task's insert, until it is queued",
    ["ns", "task_type"], buckets=_FAST,
)
PROCESS_TASK_SECONDS = Histogram(
    "dl_process_task_processing_duration_seconds", "Task processing: the processor's run time",
    ["ns", "task_type", "outcome"], buckets=_SLOW,
)
PROCESS_COMPLETION_SECONDS = Histogram(
    "dl_process_task_completion_duration_seconds",
    "Task completion: the step's write transaction (events, state, timer, task end, job finish)",
    ["ns"], buckets=_FAST,
)
PROCESS_REMOVE_SECONDS = Histogram(
    "dl_process_removing_duration_seconds", "Removing a process (by its remove timer or the API)",
    ["ns"], buckets=_FAST,
)
PROCESS_TIMER_LATENESS_SECONDS = Histogram(
    "dl_process_timer_lateness_seconds", "Timers: how late after its due time a timer task started",
    ["ns", "task_type"], buckets=_FAST,
)
PROCESS_ZOMBIE_SECONDS = Histogram(
    "dl_process_zombie_collection_duration_seconds",
    "Zombie collection (on_lost='error'): parking the process of a task whose node died",
    ["ns"], buckets=_FAST,
)
PROCESS_NOTIFICATION_SECONDS = Histogram(
    "dl_process_notification_duration_seconds",
    "Notification: from a task's end (commit) to its waiting caller learning of it", ["ns"], buckets=_FAST,
)
PROCESS_RESTARTS = Counter(
    "dl_process_restarts_total", "Processes restarted (from: start, error, task, event)", ["ns", "from"],
)
PROCESS_RESTART_SECONDS = Histogram(
    "dl_process_restart_duration_seconds", "One process restart's transaction", ["ns"], buckets=_FAST,
)
PROCESS_CHECK_FINDINGS = Counter(
    "dl_process_check_findings_total",
    "Processes a consistency check found at fault, by kind of fault (repaired or only reported)",
    ["ns", "kind", "repaired"],
)
PROCESSES_IDLE = Gauge(
    "dl_processes_idle",
    "Running processes with no timer, no task and no change for longer than DL_PROCESS_IDLE_SEC",
    ["ns"],
)
PROCESSES = Gauge("dl_processes", "Processes by namespace and status (read at scrape time)", ["ns", "status"])
QUEUE_PAUSED = Gauge(
    "dl_queue_paused",
    "1 while a queue is paused (flow control, all nodes; read at scrape time), 0 once resumed",
    ["queue"],
)
TASK_PAUSED = Gauge(
    "dl_task_paused",
    "1 while one task of a queue is paused (flow control, all nodes; read at scrape time), 0 once resumed",
    ["queue", "task"],
)
QUEUE_DESIRED_WORKERS = Gauge(
    "dl_queue_desired_workers",
    "Job slots a queue wants on all nodes now (backlog, oldest job's age, recent throughput, pause and "
    "concurrency cap; read at scrape time, the same on every node): the autoscaling signal",
    ["queue"],
)
FLOW_HELD_BACK = Counter(
    "dl_flow_held_back_total",
    "Claim candidates a queue limit held back (flow control: concurrency, partition_concurrency, rate, "
    "partition_rate), counted by the worker that claimed; a queue at its limit is not walked at all",
    ["queue", "limit"],
)
FLOW_HELD_BACK_NOW = Gauge(
    "dl_flow_held_back_jobs",
    "Runnable jobs each queue limit holds back now, all nodes (read at scrape time)",
    ["queue", "limit"],
)
FLOW_LIMIT = Gauge(
    "dl_flow_limit",
    "A queue's limit across every node: concurrency (running jobs) or rate (starts per its period), "
    "read at scrape time",
    ["queue", "limit"],
)
FLOW_IN_USE = Gauge(
    "dl_flow_in_use",
    "Jobs of a queue with a concurrency limit running now, all nodes (read at scrape time)",
    ["queue", "limit"],
)
# Limits per task of a queue (0027): the `limit` label is concurrency or rate, as the task declares it.
TASK_HELD_BACK = Counter(
    "dl_task_held_back_total",
    "Claim candidates a task's own limit held back (flow control: concurrency, rate), counted by the "
    "worker that claimed; a task at its limit is not walked at all",
    ["queue", "task", "limit"],
)
TASK_HELD_BACK_NOW = Gauge(
    "dl_task_held_back_jobs",
    "Runnable jobs of a task each of its limits holds back now, all nodes (read at scrape time)",
    ["queue", "task", "limit"],
)
TASK_LIMIT = Gauge(
    "dl_task_limit",
    "A task's limit in its queue across every node: concurrency (running jobs) or rate (starts per its "
    "period), read at scrape time",
    ["queue", "task", "limit"],
)
TASK_IN_USE = Gauge(
    "dl_task_in_use",
    "A limited task's use now, all nodes: concurrency (its jobs running) or rate (its starts in the "
    "rate's window), read at scrape time",
    ["queue", "task", "limit"],
)

# Read from the database at scrape time, in dataloader.health.collector, the same on every
# node: dl_jobs_lease_expired, dl_jobs_held, dl_observers_waiting, dl_nodes, dl_db_connections,
# dl_db_max_connections, dl_db_connections_budget, dl_db_oldest_xmin_age_seconds,
# dl_table_dead_tuples and friends; in api/metric_router.py: dl_queue_jobs and
# dl_queue_oldest_runnable_age_seconds. docs/observability.md lists them with their alert rules.

# The operator's console (ui/live.py): one shared live poll per node, whatever the browsers.
UI_LIVE_SUBSCRIBERS = Gauge("dl_ui_live_subscribers", "Browsers subscribed to the console's live updates on this node")
UI_LIVE_RENDERS = Counter("dl_ui_live_renders_total",
                          "Live fragments the console's shared poll rendered (one per watched topic and round)")


class AttemptMetrics:
    """The labelled series an attempt of one (queue, task) writes, looked up once per pair rather
    than per job: `labels()` costs about 2 µs a call, and a drain of short jobs made five of them
    per job (about a tenth of the worker's CPU, bench/README.md "issue 25, part 3")."""

    __slots__ = ("_finished", "queue", "run", "task", "wait")

    def __init__(self, queue: str, task: str) -> None:
        self.queue, self.task = queue, task
        self.wait = JOB_WAIT_SECONDS.labels(queue)
        self.run = JOB_RUN_SECONDS.labels(queue, task)
        self._finished: dict[str, Any] = {}

    def finished(self, outcome: str) -> None:
        child = self._finished.get(outcome)
        if child is None:
            child = self._finished[outcome] = JOBS_FINISHED.labels(self.queue, self.task, outcome)
        child.inc()


_ATTEMPT_METRICS: dict[tuple[str, str], AttemptMetrics] = {}
_ENQUEUED: dict[tuple[str, str], Any] = {}


def jobs_enqueued(queue: str, task: str) -> Any:
    """`JOBS_ENQUEUED`'s series of (queue, task), looked up once per pair as `attempt_metrics`'
    are: a single enqueue's `labels()` was a twentieth of its client CPU."""
    series = _ENQUEUED.get((queue, task))
    if series is None:
        series = _ENQUEUED[(queue, task)] = JOBS_ENQUEUED.labels(queue, task)
    return series


def count_enqueue(outcome: str, queue: str, task: str) -> None:
    """One enqueue, by what it did (model/stored_job.py EnqueueOutcome); a replay counts nothing."""
    if outcome == "enqueued":
        jobs_enqueued(queue, task).inc()
    elif outcome == "retriggered":
        JOBS_RETRIGGERED.labels(queue, task).inc()
    elif outcome == "unique_hit":
        JOBS_UNIQUE_HITS.labels(queue, task).inc()


def attempt_metrics(queue: str, task: str) -> AttemptMetrics:
    """The series of (queue, task): as many pairs as the labels themselves have."""
    series = _ATTEMPT_METRICS.get((queue, task))
    if series is None:
        series = _ATTEMPT_METRICS[(queue, task)] = AttemptMetrics(queue, task)
    return series
