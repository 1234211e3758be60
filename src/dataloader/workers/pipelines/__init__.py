"""The pipeline API: what user code imports."""

from dataloader.exceptions import FatalError, JobStopped
from dataloader.workers.pipelines.context import JobContext
from dataloader.workers.pipelines.registry import Pipeline, PipelineRegistry, pipeline, registry

__all__ = ["FatalError", "JobContext", "JobStopped", "Pipeline", "PipelineRegistry", "pipeline", "registry"]
