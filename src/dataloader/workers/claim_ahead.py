"""How many jobs a queue worker may hold claimed beyond its concurrency (DL_CLAIM_AHEAD).

Why: a worker's step (write the finishes, claim the next jobs: one statement and its commit) and
the execution of the jobs it claimed take turns. With short jobs the worker's Python waits on the
step, then the database waits on the Python. Jobs claimed ahead start as slots free while the next
step is in flight, so the two overlap, and each step carries more jobs per commit.

The cost: a job claimed ahead is `running` in the database before it runs, so another node cannot
take it. That is only worth it while a job runs for less than a claim takes (it would have waited
that long for its claim anyway), so the allowance is open only while the recent attempts' run time
is at most the recent claims' round trip; longer jobs close it and the worker claims for its free
slots only, as before. Pure: fed with durations, no clock, no database.
"""

from __future__ import annotations

from dataclasses import dataclass

from dataloader.storage.queue_connection import ClaimedJob

# Weight of the newest sample in the moving averages: a run of long jobs closes the allowance within
# a few attempts.
SMOOTHING = 0.2


@dataclass(slots=True)
class AheadJob:
    """A job claimed ahead, waiting for a slot. `claimed_at`: when (monotonic) the step that claimed
    it began; `lease_from`: when the step that last wrote its lease (that claim, or a heartbeat) began."""

    job: ClaimedJob
    claimed_at: float
    lease_from: float


class ClaimAhead:
    """The claim-ahead allowance of one queue worker."""

    __slots__ = ("_claim_sec", "_run_sec", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        # None until the first sample: closed until attempts have been seen to be short
        self._run_sec: float | None = None
        self._claim_sec: float | None = None

    def ran(self, seconds: float) -> None:
        """An attempt's pipeline ran this long."""
        self._run_sec = _smoothed(self._run_sec, seconds)

    def claimed(self, seconds: float) -> None:
        """A claim statement (with the step's finishes, when one statement did both) took this long."""
        self._claim_sec = _smoothed(self._claim_sec, seconds)

    @property
    def is_open(self) -> bool:
        return (self.limit > 0 and self._run_sec is not None and self._claim_sec is not None
                and self._run_sec <= self._claim_sec)

    def allowance(self) -> int:
        """Jobs that may wait claimed beyond the concurrency now."""
        return self.limit if self.is_open else 0


def _smoothed(average: float | None, sample: float) -> float:
    return sample if average is None else average + SMOOTHING * (sample - average)
