"""Structured logging: JSON lines with request/job context and masking of secrets."""

from dataloader.logger.logger import ensure_visible, setup_logging, writes_json

__all__ = ["ensure_visible", "setup_logging", "writes_json"]
