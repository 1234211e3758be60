"""Observers (seed 004): never-ending work — a websocket watcher per exchange pair, a
feed follower, a poller — defined in code with `@observer`, created and stopped by name, spread
over the nodes up to each node's capacity, and moved to a live node when theirs dies.

See docs/observers.md. The engine parts: `runner` (one node's observers) driven by
`maintenance.node_registry.NodeHeartbeat`; the rules behind the API: `services.observers`.
"""

from dataloader.model.observer import Node, Observer, ObserverSpec, ObserverState
from dataloader.observers.context import ObserverContext
from dataloader.observers.registry import ObserverKind, ObserverRegistry, observer, observers

__all__ = [
    "Node",
    "Observer",
    "ObserverContext",
    "ObserverKind",
    "ObserverRegistry",
    "ObserverSpec",
    "ObserverState",
    "observer",
    "observers",
]
