"""Every duty's own settings, checked at start-up as the top-level Settings are.

Each duty validates its slice of Settings (`XSettings.from_settings`) when a node builds it, which
is after the pool is open and the workers start: a rule that spans variables (the node registry's
DL_NODE_DEAD_AFTER_SEC against its heartbeat) would otherwise surface as a pydantic traceback from
deep inside `running()`. `check_duty_settings` builds them all up front and reports the first
problem as the ConfigError the CLI prints as one line with exit code 2.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ValidationError

from dataloader.config import Settings
from dataloader.exceptions import ConfigError

_VARIABLE = re.compile(r"\bDL_[A-Z0-9_]+\b")


def check_duty_settings(settings: Settings) -> None:
    """ConfigError naming the variable when a duty could not be built from `settings`."""
    from dataloader.jobs.queue_time import QueueTimeSettings
    from dataloader.jobs.reaper import ReaperSettings
    from dataloader.maintenance.leader import LeaderSettings
    from dataloader.observers.node_registry import NodeSettings
    from dataloader.operations.runner import OperationRunnerSettings
    from dataloader.retention.pruner import PrunerSettings
    from dataloader.retention.rollup import StatsSettings

    # The duties a node builds (App.running): the switched-off ones are never built, so not checked.
    duties: list[type] = [ReaperSettings, LeaderSettings, NodeSettings, QueueTimeSettings]
    if settings.retention_enabled:
        duties.append(PrunerSettings)
    if settings.stats_enabled:
        duties.append(StatsSettings)
    if settings.operations_enabled:
        duties.append(OperationRunnerSettings)
    for duty in duties:
        try:
            duty.from_settings(settings)  # type: ignore[attr-defined]
        except ValidationError as exc:
            raise _config_error(duty, exc) from None


def _config_error(duty: type[BaseModel], exc: ValidationError) -> ConfigError:
    err = exc.errors()[0]
    message = str(err.get("msg", "")).removeprefix("Value error, ")
    named = _VARIABLE.search(message)
    if named:
        return ConfigError(named.group(0), message[named.end():].lstrip(" :") or message)
    field = str(err["loc"][0]) if err.get("loc") else ""
    described = duty.model_fields[field].description if field in duty.model_fields else None
    variable = described.split()[0] if described and described.startswith("DL_") else f"DL_{field.upper()}"
    return ConfigError(variable, message)
