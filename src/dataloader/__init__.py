"""dataloader: durable background jobs on PostgreSQL."""

from dataloader.workers.pipelines.context import JobContext
from dataloader.workers.pipelines.errors import FatalError, JobStopped
from dataloader.workers.pipelines.registry import pipeline

__all__ = ["FatalError", "JobContext", "JobStopped", "pipeline"]
__version__ = "0.1.0"
