"""Kept for imports written before the errors moved to `dataloader.exceptions` (the one errors
module); import from `dataloader` instead."""

from dataloader.exceptions import FatalError, JobStopped

__all__ = ["FatalError", "JobStopped"]
