"""Shared base classes for schemas (pydantic) used across layers."""

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Rejects unknown fields, so a typo in a request is an error instead of a silent default."""

    model_config = ConfigDict(extra="forbid")
