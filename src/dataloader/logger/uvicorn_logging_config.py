"""Uvicorn's loggers routed through our formatter (pass as `log_config` to uvicorn)."""

from __future__ import annotations

from typing import Any


def uvicorn_log_config(level: str = "INFO", log_format: str = "auto") -> dict[str, Any]:
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "dl": {"()": "dataloader.logger.logger.make_formatter", "log_format": log_format},
        },
        "handlers": {
            "default": {"class": "logging.StreamHandler", "formatter": "dl", "stream": "ext://sys.stderr"},
        },
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": level, "propagate": False},
            "uvicorn.error": {"handlers": ["default"], "level": level, "propagate": False},
            "uvicorn.access": {"handlers": ["default"], "level": level, "propagate": False},
        },
    }
