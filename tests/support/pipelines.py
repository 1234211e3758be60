"""Pipelines used by the tests (loaded by worker subprocesses through DL_PIPELINE_MODULES).

They record what happened in the `test_runs` table, so a test can check overlap and order across
processes without sharing memory."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import warnings
from datetime import UTC, datetime

import asyncpg

from dataloader import FatalError, JobContext, pipeline

RUNS_DDL = """
CREATE TABLE IF NOT EXISTS test_runs (
    id bigserial PRIMARY KEY,
    job_id uuid NOT NULL,
    lock_key text NOT NULL,
    attempt int NOT NULL,
    pid int NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at timestamptz
)
"""


async def _record_start(ctx: JobContext) -> int:
    import os

    conn = await asyncpg.connect(ctx.args["dsn"])
    try:
        return await conn.fetchval(
            "INSERT INTO test_runs (job_id, lock_key, attempt, pid) VALUES ($1, $2, $3, $4) RETURNING id",
            ctx.job_id, ctx.lock_key, ctx.attempt, os.getpid())
    finally:
        await conn.close()


async def _record_end(ctx: JobContext, run_id: int) -> None:
    conn = await asyncpg.connect(ctx.args["dsn"])
    try:
        await conn.execute("UPDATE test_runs SET ended_at = clock_timestamp() WHERE id = $1", run_id)
    finally:
        await conn.close()


@pipeline("test.recorded_sleep")
async def recorded_sleep(ctx: JobContext):
    """Records start and end in test_runs; sleeps `seconds` in `chunks` (`first_seconds` on its
    first attempt, when given: a run that is killed, then retried quickly)."""
    run_id = await _record_start(ctx)
    chunks = int(ctx.args.get("chunks", 10))
    seconds = float(ctx.args.get("seconds", 0.5))
    if ctx.attempt == 1 and "first_seconds" in ctx.args:
        seconds = float(ctx.args["first_seconds"])
    for _ in range(chunks):
        await asyncio.sleep(seconds / chunks)
        yield
    await _record_end(ctx, run_id)


@pipeline("test.recorded_to_the_end", max_attempts=50, backoff=lambda attempt: 0.1)
async def recorded_to_the_end(ctx: JobContext) -> None:
    """Records start and end in test_runs, the end also when the attempt is stopped (a lost lease,
    a shutdown), so an overlap check sees every run's whole span. Reports progress (a pool
    connection of the worker) every `chunks`th of `seconds`; with `transaction` set, ends in
    ctx.transaction() (another pool connection, and the worker's `committed` finish)."""
    run_id = await _record_start(ctx)
    ended = False
    try:
        chunks = int(ctx.args.get("chunks", 2))
        for n in range(chunks):
            await asyncio.sleep(float(ctx.args.get("seconds", 0.1)) / chunks)
            await ctx.progress({"chunk": n})
        if ctx.args.get("transaction"):
            async with ctx.transaction() as conn:
                # the run ends at this commit (the job is final; its lock_key is released after it)
                await conn.execute("UPDATE test_runs SET ended_at = clock_timestamp() WHERE id = $1", run_id)
            ended = True  # committed (a commit that failed rolled the end back: the finally records it)
    finally:
        if not ended:
            await asyncio.shield(_record_end(ctx, run_id))


# The same run under another task name: a queue's second task beside a limited one (0027).
pipeline("test.recorded_other")(recorded_sleep)


@pipeline("test.flaky", max_attempts=3, backoff=lambda attempt: 0.2)
async def flaky(ctx: JobContext) -> None:
    """Fails until attempt `succeed_on`; retries after 0.2 s."""
    if ctx.attempt < int(ctx.args.get("succeed_on", 99)):
        raise RuntimeError(f"flaky failure on attempt {ctx.attempt}")


@pipeline("test.fatal")
async def fatal(ctx: JobContext) -> None:
    raise FatalError("bad input, never retry")


@pipeline("test.sync_sleep")
def sync_sleep(ctx: JobContext) -> None:
    """A plain function (runs in a thread) that polls the stop flag."""
    deadline = time.monotonic() + float(ctx.args.get("seconds", 1))
    while time.monotonic() < deadline:
        if ctx.stop_requested:
            ctx.raise_if_stopped()
        time.sleep(0.02)
    ctx.progress_sync({"done": True})


@pipeline("test.sync_chunks")
def sync_chunks(ctx: JobContext):
    """A plain generator: chunks run in a thread."""
    for i in range(int(ctx.args.get("chunks", 3))):
        time.sleep(float(ctx.args.get("chunk_sec", 0.05)))
        ctx.progress_sync({"chunk": i + 1})
        yield


@pipeline("test.async_sleep")
async def async_sleep(ctx: JobContext) -> None:
    """A plain coroutine (no chunks)."""
    await asyncio.sleep(float(ctx.args.get("seconds", 1)))


@pipeline("test.sync_stuck")
def sync_stuck(ctx: JobContext) -> None:
    """A plain function that ignores stop requests (a badly behaved sync pipeline)."""
    time.sleep(float(ctx.args.get("seconds", 5)))


@pipeline("test.sync_fail_slow")
def sync_fail_slow(ctx: JobContext) -> None:
    """Ignores stop requests, then fails (retryable)."""
    time.sleep(float(ctx.args.get("seconds", 0.5)))
    raise RuntimeError("failed after a while")


@pipeline("test.recorded_chunks")
async def recorded_chunks(ctx: JobContext):
    """Like test.recorded_sleep, but records its end however it ends (also when stopped)."""
    run_id = await _record_start(ctx)
    try:
        for _ in range(int(ctx.args.get("chunks", 1))):
            await asyncio.sleep(float(ctx.args.get("chunk_sec", 1.0)))
            yield
    finally:
        await _record_end(ctx, run_id)


@pipeline("test.sync_polls_and_returns")
def sync_polls_and_returns(ctx: JobContext) -> None:
    """A plain function that polls the stop flag and simply returns when asked to stop (the
    README's advice), without raising."""
    deadline = time.monotonic() + float(ctx.args.get("seconds", 30))
    while time.monotonic() < deadline:
        if ctx.stop_requested:
            return
        time.sleep(0.01)


@pipeline("test.async_unaware")
async def async_unaware(ctx: JobContext) -> None:
    """A plain coroutine that never looks at the stop flag: when it returns, its work is done."""
    await asyncio.sleep(float(ctx.args.get("seconds", 0.5)))


@pipeline("test.progress_loop")
async def progress_loop(ctx: JobContext):
    """Reports progress every `interval` seconds for `seconds` (an async generator)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + float(ctx.args.get("seconds", 3))
    n = 0
    while loop.time() < end:
        n += 1
        await ctx.progress({"n": n})
        await asyncio.sleep(float(ctx.args.get("interval", 0.05)))
        yield


@pipeline("test.huge_backoff", backoff=lambda attempt: 1e300)
async def huge_backoff(ctx: JobContext) -> None:
    raise RuntimeError("fails; its backoff asks for 1e300 seconds")


@pipeline("test.nan_backoff", backoff=lambda attempt: float("nan"))
async def nan_backoff(ctx: JobContext) -> None:
    raise RuntimeError("fails; its backoff returns NaN")


# -- for dataloader.testing (tests/testing/test_testing_helpers.py) ------------------------------


@pipeline("test.inline_chunks")
async def inline_chunks(ctx: JobContext):
    """An async generator: one progress report and one log line per chunk; logs how it ended."""
    done = 0
    try:
        for i in range(int(ctx.args.get("chunks", 3))):
            await ctx.progress({"chunk": i + 1})
            ctx.log.info("chunk %d done", i + 1)
            done += 1
            yield
    finally:
        ctx.log.info("closed after %d chunks", done)


@pipeline("test.inline_sync_steps")
def inline_sync_steps(ctx: JobContext) -> None:
    """A plain function: reports each step, and returns as soon as it sees a stop request."""
    for i in range(int(ctx.args.get("steps", 5))):
        if ctx.stop_requested:
            ctx.log.info("stopping before step %d", i + 1)
            return
        ctx.progress_sync({"step": i + 1})


@pipeline("test.inline_async_steps")
async def inline_async_steps(ctx: JobContext) -> None:
    """A plain coroutine that never looks at the stop flag: reports each step, then awaits."""
    for i in range(int(ctx.args.get("steps", 5))):
        await ctx.progress({"step": i + 1})
        await asyncio.sleep(0)


@pipeline("test.enqueue_child")
async def enqueue_child(ctx: JobContext) -> None:
    """Enqueues a `dl.noop` job on its own queue (a job created while a drain runs)."""
    from dataloader import App, Settings

    async with App(Settings(db_dsn=ctx.args["dsn"], workers=[])) as app:
        await app.enqueue("dl.noop", {"parent": str(ctx.job_id)}, queue=ctx.queue)


# -- outcomes and results (tests/workers/test_outcomes.py, test_transaction_crashes.py) -------------

TX_DDL = """
CREATE TABLE IF NOT EXISTS test_business (
    id bigserial PRIMARY KEY,
    job_id uuid NOT NULL,
    attempt int NOT NULL,
    pid int NOT NULL
);
CREATE TABLE IF NOT EXISTS test_marks (
    id bigserial PRIMARY KEY,
    job_id uuid NOT NULL,
    attempt int NOT NULL,
    point text NOT NULL
)
"""


def _outcome_of(ctx: JobContext) -> object:
    """What `test.outcome` / `test.outcome_sync` end with: args `action` (value, snooze, retry,
    cancel, unstorable) and `how` (return or raise)."""
    from dataloader import Cancel, Retry, Snooze

    action = ctx.args.get("action", "value")
    if action == "value":
        return ctx.args.get("value")
    if action == "unstorable":
        return {"text": "a\x00b"}  # NUL: valid Python, refused by jsonb
    outcome: Exception
    if action == "snooze":
        outcome = Snooze(float(ctx.args.get("seconds", 3600)))
    elif action == "retry":
        outcome = Retry(after=float(ctx.args.get("seconds", 3600)), reason=ctx.args.get("reason"))
    else:
        outcome = Cancel(ctx.args.get("reason", "not needed any more"))
    if ctx.args.get("how", "return") == "raise":
        raise outcome
    return outcome


@pipeline("test.outcome", max_attempts=2)
async def outcome(ctx: JobContext) -> object:
    return _outcome_of(ctx)


@pipeline("test.outcome_sync", max_attempts=2)
def outcome_sync(ctx: JobContext) -> object:
    return _outcome_of(ctx)


@pipeline("test.snooze_once")
async def snooze_once(ctx: JobContext) -> str:
    """Snoozes `seconds` on its first run (recorded in test_runs), returns "woke" on the next."""
    from dataloader import Snooze

    await _record_start(ctx)
    conn = await asyncpg.connect(ctx.args["dsn"])
    try:
        runs = await conn.fetchval("SELECT count(*) FROM test_runs WHERE job_id = $1", ctx.job_id)
    finally:
        await conn.close()
    if runs < 2:
        raise Snooze(float(ctx.args.get("seconds", 0.2)))
    return "woke"


async def _mark(ctx: JobContext, point: str) -> None:
    """Record that the pipeline reached `point`, on a connection of its own (committed at once);
    on attempt 1 at `pause_at`, then wait to be killed."""
    conn = await asyncpg.connect(ctx.args["dsn"])
    try:
        await conn.execute("INSERT INTO test_marks (job_id, attempt, point) VALUES ($1, $2, $3)",
                           ctx.job_id, ctx.attempt, point)
    finally:
        await conn.close()
    if ctx.attempt == 1 and ctx.args.get("pause_at") == point:
        await asyncio.Event().wait()  # until the test kills this process


@pipeline("test.tx_business")
async def tx_business(ctx: JobContext) -> None:
    """Writes one business row inside ctx.transaction(); marks `before`, `after_writes` (inside the
    block, the row written but not committed) and `after_commit`."""
    import os

    await _mark(ctx, "before")
    async with ctx.transaction() as conn:
        await conn.execute("INSERT INTO test_business (job_id, attempt, pid) VALUES ($1, $2, $3)",
                           ctx.job_id, ctx.attempt, os.getpid())
        await _mark(ctx, "after_writes")
    await _mark(ctx, "after_commit")


# In-process only (tests/workers/test_outcomes.py): the test opens the gate of attempt 1.
TX_GATES: dict[object, tuple[asyncio.Event, asyncio.Event]] = {}
TX_ERRORS: list[BaseException] = []


@pipeline("test.tx_gated")
async def tx_gated(ctx: JobContext) -> None:
    """Writes a business row in ctx.transaction(); on attempt 1 waits inside the block (after the
    write) until the test opens its gate. Records what the block raised."""
    import os

    async with asyncio.timeout(30):
        try:
            async with ctx.transaction() as conn:
                await conn.execute("INSERT INTO test_business (job_id, attempt, pid) VALUES ($1, $2, $3)",
                                   ctx.job_id, ctx.attempt, os.getpid())
                if ctx.attempt == 1 and ctx.job_id in TX_GATES:
                    entered, gate = TX_GATES[ctx.job_id]
                    entered.set()
                    await gate.wait()
        except BaseException as exc:
            TX_ERRORS.append(exc)
            raise


@pipeline("test.tx_then_raise")
async def tx_then_raise(ctx: JobContext) -> str:
    """Commits its transaction, then raises: the job stays succeeded."""
    import os

    async with ctx.transaction() as conn:
        await conn.execute("INSERT INTO test_business (job_id, attempt, pid) VALUES ($1, $2, $3)",
                           ctx.job_id, ctx.attempt, os.getpid())
    raise RuntimeError("after the commit")


@pipeline("test.tx_then_fail_inside")
async def tx_fail_inside(ctx: JobContext) -> None:
    """Raises inside its transaction: rolled back, the attempt fails (and retries)."""
    import os

    async with ctx.transaction() as conn:
        await conn.execute("INSERT INTO test_business (job_id, attempt, pid) VALUES ($1, $2, $3)",
                           ctx.job_id, ctx.attempt, os.getpid())
        raise RuntimeError("inside the transaction")


# -- run-time limits (docs/patterns.md "Run-time limits") -------------------------------------------

# Gates a sync pipeline's thread waits on, by name (in-process engines only): set by the test to
# let the abandoned thread end.
THREAD_GATES: dict[str, threading.Event] = {}


@pipeline("test.timeout_async", timeout=0.5, max_attempts=2, backoff=lambda attempt: 0.1)
async def timeout_async(ctx: JobContext) -> None:
    await asyncio.sleep(float(ctx.args.get("seconds", 3600)))


@pipeline("test.timeout_chunks", timeout=0.5, max_attempts=1)
async def timeout_chunks(ctx: JobContext):
    """Yields every 50 ms: stops at the first yield past the limit."""
    while True:
        await asyncio.sleep(0.05)
        yield


@pipeline("test.timeout_chunk_stuck", timeout=0.5, max_attempts=1)
async def timeout_chunk_stuck(ctx: JobContext):
    """One chunk that never ends: cancelled after the grace."""
    yield
    await asyncio.sleep(3600)
    yield


@pipeline("test.timeout_sync_gated", timeout=0.5, max_attempts=1)
def timeout_sync_gated(ctx: JobContext) -> None:
    """Ignores the stop; its thread ends when the test opens its gate."""
    THREAD_GATES[ctx.args["gate"]].wait(20)


@pipeline("test.fail_until", backoff=lambda attempt: 0.2)
async def fail_until(ctx: JobContext) -> None:
    """Fails (RuntimeError with `message`) until the epoch second `until`, then succeeds: a job an
    operator holds, fixes (time passes) and releases."""
    if time.time() < float(ctx.args["until"]):
        raise RuntimeError(str(ctx.args.get("message", "not yet")))


# -- a worker paused past its lease (tests/workers/test_paused_worker.py) ---------------------------

PROBE_DDL = """
CREATE TABLE IF NOT EXISTS test_probe (
    id bigserial PRIMARY KEY,
    job_id uuid NOT NULL,
    attempt int NOT NULL,
    pid int NOT NULL,
    chunk int,               -- NULL on the row that says how the run ended
    note text,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- the handler's own clock when it began the chunk: a SIGSTOP can land after that but before
    -- its INSERT is sent, so `at` (when the server wrote it) may come after the SIGCONT
    began timestamptz
)
"""


@pipeline("test.probed_chunks", max_attempts=3)
async def probed_chunks(ctx: JobContext):
    """An independent probe of what really ran: on a connection of its own, every chunk writes a
    test_probe row (job, attempt, pid, chunk) before it works, and the run's last row says how it
    ended ("completed" or "stopped: <exception>"). Attempt 1 runs `chunks` chunks of `chunk_sec`
    (with a progress write each), later attempts 3."""
    import os

    conn = await asyncpg.connect(ctx.args["dsn"])
    note = "completed"

    async def probe(chunk: int | None, text: str | None = None) -> None:
        began = datetime.now(UTC)
        await conn.execute("INSERT INTO test_probe (job_id, attempt, pid, chunk, note, began) "
                           "VALUES ($1, $2, $3, $4, $5, $6)", ctx.job_id, ctx.attempt, os.getpid(), chunk, text, began)

    try:
        for i in range(int(ctx.args.get("chunks", 1)) if ctx.attempt == 1 else 3):
            await probe(i)
            await ctx.progress({"attempt": ctx.attempt, "chunk": i})
            await asyncio.sleep(float(ctx.args.get("chunk_sec", 0.05)))
            yield
    except BaseException as exc:
        note = f"stopped: {type(exc).__name__}"
        raise
    finally:
        try:
            await asyncio.shield(probe(None, note))
        finally:
            await asyncio.shield(conn.close())


# --- logs of user code (tests/logger/test_json_logs.py) ------------------------------------
# A pipeline module's own logger: its lines inside a job carry the job's context like ctx.log's.
_user_log = logging.getLogger(__name__)


@pipeline("test.logs_async", max_attempts=2, backoff=lambda attempt: 0.1)
async def logs_async(ctx: JobContext) -> None:
    """Logs through ctx.log, the logging module and a warning, and fails its first attempt."""
    ctx.log.info("async line through ctx.log", extra={"marker": "async-ctx"})
    _user_log.info("async line through logging", extra={"marker": "async-std"})
    warnings.warn("async pipeline warning", UserWarning, stacklevel=1)
    if ctx.attempt == 1:
        raise RuntimeError("the first attempt fails")


@pipeline("test.logs_sync", max_attempts=2, backoff=lambda attempt: 0.1)
def logs_sync(ctx: JobContext) -> None:
    """The same from a sync pipeline (it runs in a thread: the context must follow it there)."""
    ctx.log.info("sync line through ctx.log", extra={"marker": "sync-ctx"})
    _user_log.info("sync line through logging", extra={"marker": "sync-std"})
    warnings.warn("sync pipeline warning", UserWarning, stacklevel=1)
    if ctx.attempt == 1:
        raise RuntimeError("the first attempt fails")


@pipeline("test.retry_once", max_attempts=2)
async def retry_once(ctx: JobContext) -> str:
    """Asks for a retry `seconds` (arg) later on its first attempt; succeeds on the next."""
    from dataloader import Retry

    if ctx.attempt == 1:
        raise Retry(after=float(ctx.args["seconds"]))
    return "retried"


# In-process only (tests/tracing/test_tracing.py): the test sees the pipeline enter (`entered`) and
# decides when it returns (`release`), to place the end of a run at a moment of its choosing.
GATES: dict[str, tuple[asyncio.Event, asyncio.Event]] = {}


@pipeline("test.gated")
async def gated(ctx: JobContext) -> None:
    """Waits until the test opens the gate named `args["gate"]` (at most 30 s), then returns."""
    entered, release = GATES[ctx.args["gate"]]
    entered.set()
    async with asyncio.timeout(30):
        await release.wait()
