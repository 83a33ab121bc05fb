"""Nodes that run elsewhere, watched through Kafka alone (``dlsroute replay --attach``).

A driver that did not start the nodes cannot look into their state. What it can see is
Kafka: a node's input topics and the offsets its consumer group has committed. A node has
taken everything offered to it when, on every input partition, nothing visible to a
``read_committed`` reader lies at or after its committed offset (transaction markers take
offsets but are never delivered, so "committed == end" is too strict a test).

Outputs become visible no later than the commit of the input that caused them (in one
transaction with ``exactly_once``; flushed before the commit with ``at_least_once``). So
if two looks in a row find every node caught up and no partition grown in between, no
node is still working on anything: the network has settled.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaException, TopicPartition

from broker_node.overlay import Overlay, Topology
from connectors.kafka import consumer_config
from connectors.topics import Topics
from dlsroute.exceptions import OptionError, TopicWatchError

__all__ = ["AttachedNetwork"]

_Part = tuple[str, int]


class AttachedNetwork:
    """The nodes of ``topology`` running elsewhere, one consumer group each."""

    def __init__(self, bootstrap: str, prefix: str, topology: Topology,
                 groups: Mapping[str, str] | None = None, *, timeout_s: float = 10.0,
                 **kafka: Any):
        """Watch the nodes; ``groups``: node -> group (default ``<prefix>-node-<node>``)."""
        groups = dict(groups or {})
        unknown = sorted(set(groups) - set(topology.nodes))
        if unknown:
            raise OptionError(f"--group names a node not in the topology: {unknown[0]!r}",
                              field="group", value=unknown[0])
        t = Topics(prefix)
        self.groups = {n: groups.get(n) or f"{prefix}-node-{n}" for n in topology.nodes}
        self.inputs = {n: [t.node_subscribe(n), t.node_unsubscribe(n), t.node_publish(n)]
                       + [t.link(m, n) for m in topology.neighbours(n)]
                       + [t.forward(m, n) for m in topology.neighbours(n)]
                       for n in topology.nodes}
        self.timeout_s = timeout_s
        # One consumer per node group, never subscribed: it only reads committed offsets.
        self._offsets = {n: Consumer(consumer_config(bootstrap, g, **kafka))
                         for n, g in self.groups.items()}
        self._reader = Consumer(consumer_config(bootstrap, f"{prefix}-replay-watch", **kafka))
        self._last: dict[_Part, int] | None = None

    # -- the LocalNetwork interface used by replay ------------------------------------------
    def check(self) -> None:
        """Nothing to check: the nodes' failures show up as a network that never settles."""

    def settled(self, overlay: Overlay) -> bool:
        """Whether every node has taken all its input (``overlay`` is not looked at)."""
        del overlay
        return self.quiet()

    def routed(self, origin: str, event_id: str, nodes: list[str]) -> bool:
        """Whether the network has settled after the event was published."""
        del origin, event_id, nodes
        return self.quiet()

    def stop(self) -> None:
        """Close the watching consumers (the nodes are not ours to stop)."""
        for c in self._offsets.values():
            c.close()
        self._reader.close()
        self._offsets.clear()

    # -- watching ---------------------------------------------------------------------------
    def wait_ready(self, timeout_s: float) -> None:
        """Wait until every node's input topics exist (the nodes create them at start)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._ends()
                return
            except TopicWatchError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def quiet(self) -> bool:
        """True on the second look in a row with every node caught up and nothing new."""
        ends = self._ends()
        ok = all(self._caught_up(n, ends) for n in self.inputs)
        stable = ok and self._last == ends
        self._last = ends if ok else None
        return stable

    def _ends(self) -> dict[_Part, int]:
        out = {}
        for node, topics in self.inputs.items():
            for topic in topics:
                try:
                    high = self._end(topic)
                except KafkaException as exc:
                    raise TopicWatchError(f"cannot read the end of {topic} ({exc}); is node "
                                          f"{node!r} running under this topic prefix?",
                                          field="topic", value=topic) from exc
                out[(topic, 0)] = high
        return out

    def _end(self, topic: str) -> int:
        tp = TopicPartition(topic, 0)
        try:
            return int(self._reader.get_watermark_offsets(tp, timeout=self.timeout_s)[1])
        except KafkaException:
            # A topic created after this client last fetched metadata: fetch it, try again.
            self._reader.list_topics(topic, timeout=self.timeout_s)
            return int(self._reader.get_watermark_offsets(tp, timeout=self.timeout_s)[1])

    def _caught_up(self, node: str, ends: Mapping[_Part, int]) -> bool:
        parts = [TopicPartition(topic, 0) for topic in self.inputs[node]]
        committed = self._offsets[node].committed(parts, timeout=self.timeout_s)
        behind = []
        for tp in committed:
            start = 0 if tp.offset == OFFSET_INVALID or tp.offset < 0 else int(tp.offset)
            if start < ends[(tp.topic, 0)]:
                behind.append(TopicPartition(tp.topic, 0, start))
        return not behind or not self._visible(behind, ends)

    def _visible(self, parts: list[TopicPartition], ends: Mapping[_Part, int]) -> bool:
        """Whether a read_committed reader finds any record from these offsets on."""
        self._reader.assign(parts)
        try:
            # An open transaction holds a read_committed reader back: give up quickly, the
            # caller looks again.
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline:
                msg = self._reader.poll(0.05)
                if msg is not None and msg.error() is None:
                    return True
                positions = self._reader.position(parts)
                if all(p.offset >= ends[(p.topic, 0)] for p in positions):
                    return False
            return True  # could not tell in time: not settled
        finally:
            self._reader.unassign()
