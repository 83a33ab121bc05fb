"""Node services of one topology, each on a thread of this process.

Used by ``dlsroute replay`` and the Kafka demo; a test or a tool that drives a whole
overlay from one process. Each node runs the same :class:`NodeService` loop as
``dlsroute node`` does in its own process.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from broker_node.config import NodeSettings
from broker_node.overlay import Overlay, Topology
from broker_node.service import NodeService
from dls.space import ContentSpace
from dlsroute.exceptions import NodeFailedError

__all__ = ["LOCAL_PUBLISH_DELAY_S", "LocalNetwork"]

#: publish_delay_s of the nodes of a local network (the nodes' default is for production)
LOCAL_PUBLISH_DELAY_S = 3.0


class LocalNetwork:
    """One :class:`NodeService` per topology node, each looping on its own thread."""

    def __init__(self, bootstrap: str, prefix: str, space_path: Path, space: ContentSpace,
                 topology: Topology, **config: Any):
        """Create and start the nodes; ``config`` goes to every node's settings.

        A cancelled subscription stays until a node's inputs passed ``publish_delay_s``
        beyond it (the order rule); unless ``config`` says otherwise it is
        :data:`LOCAL_PUBLISH_DELAY_S` here, so that a replay or a demo settles soon after
        an unsubscription (publishers and nodes share one clock).
        """
        config = {"publish_delay_s": LOCAL_PUBLISH_DELAY_S, "clock_skew_s": 0.2, **config}
        self.services: dict[str, NodeService] = {}
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []
        for name in topology.nodes:
            settings = NodeSettings(node=name, neighbours=tuple(topology.neighbours(name)),
                                    space=space_path, bootstrap=bootstrap,
                                    topic_prefix=prefix, **config)
            self.services[name] = NodeService(settings, space)
        for name, svc in self.services.items():
            # run() starts the service (topics, transactions, recovery) on its thread.
            t = threading.Thread(target=self._run, args=(svc,), name=f"node-{name}",
                                 daemon=True)
            t.start()
            self.threads.append(t)

    def _run(self, svc: NodeService) -> None:
        try:
            svc.run()
        except BaseException as exc:  # surfaced by check()
            self.errors.append(exc)
        finally:
            svc.close()

    def check(self) -> None:
        """Raise if a node has failed."""
        if self.errors:
            raise NodeFailedError(f"a node failed: {self.errors[0]!r}", field="node",
                                  value=repr(self.errors[0])) from self.errors[0]

    def total(self, counter: str) -> int:
        """A metrics counter summed over the nodes."""
        return sum(int(getattr(svc.metrics, counter)) for svc in self.services.values())

    def settled(self, overlay: Overlay) -> bool:
        """Same live subscriptions and same labels heard from each neighbour as ``overlay``."""
        for name, svc in self.services.items():
            want = overlay.nodes[name]
            if len(svc.state) != len(want):
                return False
            for n in want.neighbours:
                try:
                    got = svc.state.received_from(n).tolist()
                except RuntimeError:  # read while the node's thread changed the counts
                    return False
                if got != want.received_from(n).tolist():
                    return False
        return True

    def routed(self, origin: str, event_id: str, nodes: list[str]) -> bool:
        """Whether every one of ``nodes`` has routed (and committed) the event."""
        return all((origin, event_id) in self.services[n].routed for n in nodes)

    def stop(self) -> None:
        """Stop every node (each finishes its batch and commits) and wait for the threads."""
        for svc in self.services.values():
            svc.stop()
        for t in self.threads:
            t.join(30)
