"""Exceptions a pipeline raises to steer the outcome of its job."""


class FatalError(Exception):
    """The job fails at once, without retries (bad input, a permanent refusal, ...)."""


class JobStopped(Exception):
    """Raised inside a pipeline by `JobContext.raise_if_stopped()` once the job was asked to stop
    (cancel, shutdown, or the lease was lost). The worker then ends the attempt accordingly."""
