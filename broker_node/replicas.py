"""Replicas of one logical node: its label shards shared by a Kafka consumer group.

A node of a sharded network (``shards`` > 1) is run by any number of processes, each
``dlsroute node --config a.toml``. Each joins the consumer group
:attr:`~broker_node.config.NodeSettings.replica_group` on the node's shards topic
(``<prefix>.node.<node>.shards``, one partition per shard, never written): the partitions
the group gives a process are the shards it routes. For each it runs an *engine*, a
:class:`~broker_node.service.NodeService` on that shard's topics, on a thread of its own.

Handing a shard over: the group uses the cooperative protocol, so a rebalance moves only
the shards that change hands, and a shard is given to its new process only after its old
process gave it up; giving up stops its engine (the batch finished and committed, the
clients closed). A process that dies without giving up loses its shards when its session
times out; the new engine of a shard has the same static member id and transactional id
as the old one, so an old engine still alive somewhere is fenced by Kafka and cannot
write again. Each engine recovers its shard's state from the shard's snapshot and control
topics, as a node does at start.

Any engine that fails stops the whole process with that error (its supervisor restarts
it, and the group gives its shards to the others meanwhile): one rule, as for the
single-process node.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from broker_node.config import NodeSettings
from broker_node.exceptions import BrokerError
from broker_node.metrics import MetricsServer, NodeCollector
from broker_node.rehearsal import rehearse
from broker_node.service import NodeService
from connectors.closing import close_consumer
from connectors.exceptions import ConnectorError
from connectors.kafka import consumer_config, ensure_partitioned_topic
from connectors.topics import Topics
from dls.space import ContentSpace

__all__ = ["Engine", "ReplicaSet"]

log = logging.getLogger(__name__)

#: How long the process waits for an engine to stop when its shard is taken away (s).
STOP_TIMEOUT_S = 120.0


class Engine:
    """The engine of one shard: a node service on its own thread."""

    def __init__(self, settings: NodeSettings, space: ContentSpace,
                 on_stuck: Callable[[str, float], None] | None) -> None:
        """Start the engine's thread: it recovers the shard, then routes until stopped."""
        self.shard = settings.shard
        self.service = NodeService(settings, space, on_stuck=on_stuck)
        self.error: BaseException | None = None
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"shard-{self.shard}",
                                       daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.service.start()
            self.started.set()
            self.service.run()
        except BaseException as exc:  # the process stops with it (ReplicaSet.run)
            self.error = exc
            log.error("node %s shard %s failed: %r", self.service.settings.node, self.shard,
                      exc)
        finally:
            self.started.set()
            self.service.close()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Finish the batch, commit, close; wait for the thread."""
        self.service.stop()
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise BrokerError(f"shard {self.shard} did not stop within {timeout:g} s",
                              field="shard", value=self.shard)


class ReplicaSet:
    """One process's share of a sharded node: the shards the consumer group gives it."""

    def __init__(self, settings: NodeSettings, space: ContentSpace | None = None, *,
                 on_stuck: Callable[[str, float], None] | None = None) -> None:
        """Nothing touches Kafka until :meth:`run`."""
        if settings.shards < 2:
            raise BrokerError(f"node {settings.node}: a replica set serves a sharded node "
                              f"(shards >= 2), got shards = {settings.shards}",
                              field="shards", value=settings.shards)
        if settings.shard is not None:
            raise BrokerError(f"node {settings.node}: the group chooses the shards; shard must "
                              f"not be set, got {settings.shard}", field="shard",
                              value=settings.shard)
        self.settings = settings
        self.space = space or ContentSpace.from_json(settings.space)
        self.topic = settings.topics().node_shards(settings.node)
        self.engines: dict[int, Engine] = {}
        self._on_stuck = on_stuck
        self._stop = threading.Event()
        self._consumer: Consumer | None = None
        self._metrics_server: MetricsServer | None = None

    # -- the group's callbacks ----------------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        """Every engine's metrics as one page: each sample labelled with its shard."""
        merged: dict[str, Metric] = {}
        for shard, engine in sorted(self.engines.items()):
            for family in NodeCollector(self.settings.node, engine.service.metrics,
                                        engine.service.state).collect():
                out = merged.get(family.name)
                if out is None:
                    out = merged[family.name] = Metric(family.name, family.documentation,
                                                       family.type)
                for sample in family.samples:
                    out.add_sample(sample.name, {**sample.labels, "shard": str(shard)},
                                   sample.value)
        yield from merged.values()

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        shards = sorted(tp.partition for tp in partitions)
        if shards:
            log.info("node %s: shards %s given to this process", self.settings.node, shards)
        for shard in shards:
            if shard not in self.engines:  # the process serves the metrics of all of them
                self.engines[shard] = Engine(
                    self.settings.model_copy(update={"shard": shard, "metrics_port": None}),
                    self.space, self._on_stuck)

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        shards = sorted(tp.partition for tp in partitions)
        if shards:
            log.info("node %s: shards %s taken from this process: stopping them",
                     self.settings.node, shards)
        for shard in shards:
            engine = self.engines.pop(shard, None)
            if engine is not None:
                engine.stop()

    # -- lifecycle ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask every engine, and then the process, to finish."""
        self._stop.set()

    def run(self, max_seconds: float | None = None) -> None:
        """Join the group and run the shards it gives, until :meth:`stop` or an engine fails.

        Raises:
            BaseException: The error of an engine that failed (after stopping the others).
        """
        s = self.settings
        # The compiled kernels once, before the engines start together on their threads.
        if warm_s := rehearse(NodeService):
            log.info("node %s: compiled kernels ready in %.2f s", s.node, warm_s)
        try:
            ensure_partitioned_topic(s.bootstrap, self.topic, s.shards,
                                     kafka=s.kafka_security(), **s.topic_replication())
        except ConnectorError as exc:
            raise BrokerError(f"node {s.node}: {exc} (the shards topic has one partition per "
                              f"shard)", field="shards", value=s.shards) from exc
        self._misdirected()
        consumer = Consumer(consumer_config(
            s.bootstrap, s.replica_group,
            **{"partition.assignment.strategy": "cooperative-sticky",
               "session.timeout.ms": s.session_timeout_ms}, **s.kafka_security()))
        self._consumer = consumer
        if s.metrics_port is not None:
            registry = CollectorRegistry()
            registry.register(self)
            self._metrics_server = MetricsServer(registry, s.metrics_host, s.metrics_port,
                                                 s.node)
        consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked,
                           on_lost=self._revoked)
        until = None if max_seconds is None else time.monotonic() + max_seconds
        try:
            while not self._stop.is_set() and (until is None or time.monotonic() < until):
                try:
                    consumer.poll(0.2)  # serves the group: heartbeats, rebalances
                except KafkaException as exc:
                    log.warning("node %s: replica group: %s", s.node, exc)
                failed = [e for e in self.engines.values() if e.error is not None]
                if failed:
                    raise failed[0].error  # type: ignore[misc]
        finally:
            self.close()

    def _misdirected(self) -> None:
        """Say so loudly when the unsharded inputs of this sharded node hold messages.

        No engine reads them: a writer that does not know the network is sharded (a client
        with ``shards`` 1, or the Spark mapping job without ``--shards``) wrote there, and
        its subscriptions and events are not routed.
        """
        s = self.settings
        t = Topics(s.topic_prefix)
        names = [t.node_subscribe(s.node), t.node_unsubscribe(s.node), t.node_publish(s.node)]
        reader = Consumer(consumer_config(s.bootstrap, f"{s.replica_group}-check",
                                          **s.kafka_security()))
        try:
            known = reader.list_topics(timeout=10).topics
            for name in names:
                if name in known:
                    low, high = reader.get_watermark_offsets(TopicPartition(name, 0),
                                                             timeout=10)
                    if high > low:
                        log.error("node %s is sharded (%d shards) but %s holds %d messages "
                                  "no engine reads: a writer that does not shard wrote there "
                                  "(SDK clients need shards=%d, the Spark job --shards %d)",
                                  s.node, s.shards, name, high - low, s.shards, s.shards)
        except KafkaException as exc:
            log.debug("node %s: unsharded inputs not checked (%s)", s.node, exc)
        finally:
            reader.close()

    def close(self) -> None:
        """Stop every engine, then leave the group (its shards go to the other processes)."""
        for shard in sorted(self.engines):
            try:
                self.engines.pop(shard).stop()
            except BrokerError as exc:
                log.error("node %s: %s", self.settings.node, exc)
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            try:
                consumer.unsubscribe()  # engines are stopped: the callbacks find none
                close_consumer(consumer)
            except (KafkaException, RuntimeError) as exc:
                log.warning("node %s: leaving the replica group: %r", self.settings.node, exc)
        if self._metrics_server is not None:
            self._metrics_server.close()
            self._metrics_server = None

    @property
    def metrics_port(self) -> int | None:
        """The port the metrics page of every shard here is served on (None: not served)."""
        return None if self._metrics_server is None else self._metrics_server.port

    @property
    def shards(self) -> list[int]:
        """The shards this process routes now."""
        return sorted(self.engines)

    def ready(self) -> bool:
        """True when every engine of this process has recovered its shard."""
        return all(e.started.is_set() for e in self.engines.values())

    def engine(self, shard: int) -> Any:
        """The node service of ``shard`` (KeyError if this process does not route it)."""
        return self.engines[shard].service
