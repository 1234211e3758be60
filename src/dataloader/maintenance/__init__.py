"""Background duties of a node (reaper; next: pruner, cron scheduler, stats rollup, node
heartbeat), each a `Service` run by the `Supervisor`, some only on the elected leader.

See docs/maintenance.md.
"""

from dataloader.maintenance.leader import LEADER_LOCK_CLASS, LEADER_LOCK_ID, LeaderElector, LeaderSettings
from dataloader.maintenance.periodic import PeriodicService, PeriodicSettings
from dataloader.maintenance.reaper import Reaper, ReaperSettings
from dataloader.maintenance.registry import ServiceDeps, ServiceFactory, register_service, registered_services
from dataloader.maintenance.service import Scope, Service, ServiceSettings, ServiceState
from dataloader.maintenance.supervisor import BackoffPolicy, ServiceStatus, Supervisor

__all__ = [
    "LEADER_LOCK_CLASS",
    "LEADER_LOCK_ID",
    "BackoffPolicy",
    "LeaderElector",
    "LeaderSettings",
    "PeriodicService",
    "PeriodicSettings",
    "Reaper",
    "ReaperSettings",
    "Scope",
    "Service",
    "ServiceDeps",
    "ServiceFactory",
    "ServiceSettings",
    "ServiceState",
    "ServiceStatus",
    "Supervisor",
    "register_service",
    "registered_services",
]
