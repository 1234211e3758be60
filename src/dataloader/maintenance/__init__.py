"""The duty framework: a background duty is a `Service` run by the `Supervisor`, on every node or
only on the elected leader; the duties themselves live with their capability (jobs/, retention/,
operations/, schedules/, observers/).

See docs/maintenance.md.
"""

from dataloader.maintenance.leader import LEADER_LOCK_CLASS, LEADER_LOCK_ID, LeaderElector, LeaderSettings
from dataloader.maintenance.periodic import LoopService, PeriodicService, PeriodicSettings
from dataloader.maintenance.registry import ServiceDeps, ServiceFactory, register_service, registered_services
from dataloader.maintenance.service import Scope, Service, ServiceSettings, ServiceState
from dataloader.maintenance.supervisor import BackoffPolicy, ServiceSnapshot, Supervisor

__all__ = [
    "LEADER_LOCK_CLASS",
    "LEADER_LOCK_ID",
    "BackoffPolicy",
    "LeaderElector",
    "LeaderSettings",
    "LoopService",
    "PeriodicService",
    "PeriodicSettings",
    "Scope",
    "Service",
    "ServiceDeps",
    "ServiceFactory",
    "ServiceSettings",
    "ServiceSnapshot",
    "ServiceState",
    "Supervisor",
    "register_service",
    "registered_services",
]
