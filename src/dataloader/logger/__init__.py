"""Structured logging: JSON lines with request/job context and masking of secrets."""

from dataloader.logger.logger import setup_logging

__all__ = ["setup_logging"]
