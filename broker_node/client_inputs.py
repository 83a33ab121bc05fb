"""The clients' own input topics of a node (``client_inputs``): found, learned, kept right.

A mixin of :class:`broker_node.service.NodeService`: the node reads every client's own
topics by pattern (``Topics.client_inputs_pattern``), learns each when its consumer is
assigned it (before reading it), recovers and snapshots the control ones like its own, and
gives the publish ones the order rule's settings (docs/architecture.md#identity-from-the-topic).
"""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from broker_node.committers import Committer
from broker_node.config import NodeSettings
from broker_node.inbox import Inbox
from broker_node.metrics import Metrics
from connectors.exceptions import ConnectorError
from connectors.kafka import admin
from connectors.retention import GapWatch
from connectors.topic_settings import enforce_topic_config
from connectors.topics import Topics

__all__ = ["ClientInputs"]

log = logging.getLogger(__name__)


class ClientInputs:
    """Finding and learning the clients' own input topics (a part of the node service)."""

    settings: NodeSettings
    topics: Topics
    inbox: Inbox
    committer: Committer | None
    control_topics: list[str]
    _ends: Consumer | None
    metrics: Metrics
    _gaps: GapWatch  # what retention deleted before the node read it

    @property
    def _publish_config(self) -> dict[str, str]:
        """Settings of a publish topic: it refuses events older than ``publish_delay_s``."""
        return {"message.timestamp.type": "CreateTime",
                "message.timestamp.before.max.ms": str(int(self.settings.publish_delay_s
                                                           * 1000))}

    # -- the clients' own input topics (client_inputs) ---------------------------------------
    def _client_inputs_now(self) -> set[str] | None:
        """The input topics of this node's clients the broker has now (None: not known)."""
        s = self.settings
        try:
            meta = (self._ends or admin(s.bootstrap, **s.kafka_security())).list_topics(
                timeout=5.0)
        except KafkaException as exc:
            log.debug("node %s: topics unknown (%s)", s.node, exc)
            return None
        return {topic for topic in meta.topics
                if (p := self.topics.parse_client_input(topic)) is not None and p[0] == s.node}

    def _learn(self, topic: str, *, repair: bool = True) -> None:
        """Take ``topic`` on if it is a client's own input: read, recovered, snapshotted."""
        known = topic in self.inbox.client_control or topic in self.inbox.client_origin
        if known or not self.inbox.learn(topic):
            return
        parsed = self.topics.parse_client_input(topic)
        log.info("node %s reads client %s's own %s topic %s", self.settings.node,
                 parsed and parsed[1], parsed and parsed[2], topic)
        if topic in self.inbox.client_control:  # the snapshots cover it from now on
            self.control_topics.append(topic)
        elif repair:
            self._repair_client_publish([topic])

    def _repair_client_publish(self, names: list[str]) -> None:
        """Give clients' own publish topics the order rule's settings (logged, never fatal).

        Whoever made the topic (``dlsroute access``, the SDK) may not have known
        ``publish_delay_s``. A topic the broker will not set keeps the node going: only
        that client's late events are at stake, and the error says which topic.
        """
        if not names:
            return
        s = self.settings
        try:
            enforce_topic_config(s.bootstrap, names, self._publish_config,
                                 why="the order rule (publish_delay_s)",
                                 kafka=s.kafka_security())
        except ConnectorError as exc:
            log.error("node %s: a client's publish topic keeps other settings: %s", s.node,
                      exc)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The consumer was given ``partitions``: learn clients' topics before reading them.

        And say what retention deleted before the node read it (a node away longer than
        its publish topic's retention): logged as errors, counted in ``retention_lost``;
        while it runs, :meth:`_read` does the same between batches (a node fallen behind).
        """
        for tp in partitions:
            self._learn(tp.topic)
        s = self.settings
        self._gaps.assigned(consumer, admin(s.bootstrap, **s.kafka_security()), partitions)
        self.metrics.retention_lost = self._gaps.lost

    def _read(self, consumer: Consumer, msgs: list[Message]) -> list[Message]:
        """A batch was read: say what retention deleted since the last one (a node behind)."""
        if msgs:
            self._gaps.batch(consumer, msgs)
            self.metrics.retention_lost = self._gaps.lost
        return msgs

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """A rebalance (a client's topic appeared): commit what is done before it goes.

        Between batches: exactly once, everything consumed is committed already; at least
        once, the acknowledged batches are committed now, so the reassigned partitions
        resume where the node got to (what was not committed is read again: repeats).
        """
        log.info("node %s: rebalance, %d partitions revoked", self.settings.node,
                 len(partitions))
        if self.committer is not None and self.settings.delivery != "exactly_once":
            self.committer.finish()
