"""The streaming mapping job: raw topics in, node topics and dead letters out.

One Structured Streaming query reads ``dls.raw.subscriptions``, ``dls.raw.unsubscriptions``
and ``dls.raw.events`` (one Kafka source each), maps each topic's records with
:mod:`spark.mapping` and writes the union to the Kafka sink (the topic of every record is a
column). With a checkpoint location a restarted query resumes where the last one stopped.

Spark's Kafka sink is at-least-once: after a crash between a write and the checkpoint's
commit, a micro-batch is written again. Nodes take a repeated subscription (same id, client
and labels) as a no-op and drop an event whose origin and id they have already routed, so
repeats are harmless there (see the architecture notes for what a repeated unsubscription
does).

The sink cannot set the timestamp of a record it writes (Kafka stamps it with the write
time), so each event carries its raw record's timestamp, its publication time, in the
``dls-published-ms`` header, which nodes keep on every copy.

In a sharded network (``shards`` above 1, the nodes' setting) the job writes the shards'
node topics as the SDK does: an event to its label's shard, a subscription as a part per
shard it has labels of, an unsubscription to every shard.

``--once`` (``trigger(availableNow=True)``) processes what is in the raw topics when the
query starts and stops: for batch use and tests.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connectors.kafka import ensure_topics
from connectors.topics import CONTROL_TOPIC_CONFIG, Topics
from dls.space import ContentSpace

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["input_rows", "map_raw", "prepare_topics", "start_query"]

log = logging.getLogger(__name__)


def prepare_topics(bootstrap: str, topics: Topics, nodes: Iterable[str] = (),
                   kafka: Mapping[str, str] | None = None, *, shards: int = 1) -> None:
    """Create the raw topics, the dead-letter topic and the given nodes' input topics.

    A node's subscribe and unsubscribe topics get the settings of
    :data:`connectors.topics.CONTROL_TOPIC_CONFIG` (unlimited retention), as the node itself
    creates them; otherwise the first record the job writes for a node that has not started
    yet would create them with the broker's default retention. ``kafka``: librdkafka
    settings of the admin client (security). ``shards`` above 1: the input topics of each
    of the nodes' label shards (``dls.node.N.s<k>.*``), which the job then writes.
    """
    ensure_topics(bootstrap, [topics.raw_subscriptions, topics.raw_unsubscriptions,
                              topics.raw_events, topics.deadletter], kafka=kafka)
    nodes = list(nodes)
    if nodes:
        parts = [topics] if shards == 1 else [topics.of_shard(k) for k in range(shards)]
        ensure_topics(bootstrap, [t for p in parts for n in nodes
                                  for t in (p.node_subscribe(n), p.node_unsubscribe(n))],
                      config=CONTROL_TOPIC_CONFIG, kafka=kafka)
        ensure_topics(bootstrap, [p.node_publish(n) for p in parts for n in nodes],
                      kafka=kafka)


def map_raw(space: ContentSpace, sources: Mapping[str, DataFrame], topics: Topics, *,
            shards: int = 1) -> DataFrame:
    """The union of the three mappings; ``sources`` maps each raw topic to its DataFrame.

    ``shards``: the network's label shards (records go to the shards' topics, split as
    the SDK splits them: :mod:`spark.mapping`).

    Events first, unsubscriptions last: the sink writes a micro-batch partition by
    partition (a task each, flushed at its end), in this order when the tasks run one after
    the other (one core), so that a job killed in the middle of a batch has not written a
    cancellation without the events published before it (the order rule through the job:
    docs/architecture.md#order-of-changes-and-events).
    """
    from spark.mapping import map_events, map_subscriptions, map_unsubscriptions

    return (map_events(space, sources[topics.raw_events], topics, shards=shards)
            .unionByName(map_subscriptions(space, sources[topics.raw_subscriptions], topics,
                                           shards=shards))
            .unionByName(map_unsubscriptions(space, sources[topics.raw_unsubscriptions],
                                             topics, shards=shards)))


def start_query(spark: SparkSession, space: ContentSpace, bootstrap: str, *,
                topics: Topics | None = None, checkpoint: str | Path | None = None,
                once: bool = False, trigger_seconds: float = 1.0,
                starting_offsets: str = "earliest", max_offsets_per_trigger: int | None = None,
                kafka_options: Mapping[str, str] | None = None,
                query_name: str | None = None, shards: int = 1,
                fail_on_data_loss: bool = True) -> StreamingQuery:
    """Start the mapping query and return it (running; ``awaitTermination`` to wait).

    Args:
        spark: The session (see :func:`spark.session.spark_session`).
        space: The content space of the nodes.
        bootstrap: Kafka bootstrap servers.
        topics: Topic names (default prefix ``dls``).
        checkpoint: Checkpoint folder; a restarted query with the same folder resumes where
            the last one stopped. None: a fresh temporary folder (no resuming).
        once: Process what is there, then stop (``availableNow``).
        trigger_seconds: Micro-batch interval when not ``once``.
        starting_offsets: Where a query without a checkpoint starts (``earliest``/``latest``).
        max_offsets_per_trigger: Cap on records per micro-batch and raw topic (None: none).
        kafka_options: More ``kafka.*`` options for the source and the sink (security).
        query_name: Name of the streaming query.
        shards: The network's label shards (``NodeSettings.shards``): above 1 the job
            writes each shard's node topics (``dls.node.N.s<k>.*``), as the SDK does.
        fail_on_data_loss: Spark's ``failOnDataLoss``: a raw partition whose resume point
            retention deleted fails the query (True), or it goes on from the first offset
            left with a warning of Spark's (False; :mod:`spark.retention` says the gap).

    Raises:
        MappingArgumentError: ``shards`` is not an integer in ``[1, MAX_SHARDS]``.
    """
    topics = topics or Topics()
    extra = {k if k.startswith("kafka.") else f"kafka.{k}": v
             for k, v in (kafka_options or {}).items()}

    def source(topic: str) -> DataFrame:
        # One source per raw topic: a single source feeding three filtered branches would be
        # scanned three times per micro-batch.
        reader = (spark.readStream.format("kafka")
                  .option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic)
                  .option("startingOffsets", starting_offsets)
                  .option("includeHeaders", "true")
                  .option("failOnDataLoss", "true" if fail_on_data_loss else "false")
                  # A group of the network's prefix, so that an ACL can grant it
                  # (`dlsroute access add-mapper`).
                  .option("groupIdPrefix", f"{topics.prefix}-spark-map"))
        if max_offsets_per_trigger is not None:
            reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
        for k, v in extra.items():
            reader = reader.option(k, v)
        return reader.load()

    raw = (topics.raw_subscriptions, topics.raw_unsubscriptions, topics.raw_events)
    out = map_raw(space, {t: source(t) for t in raw}, topics, shards=shards)
    if checkpoint is None:
        checkpoint = tempfile.mkdtemp(prefix="dls-spark-map-")
        log.warning("no checkpoint location given: using %s, a restart will not resume",
                    checkpoint)
    writer = (out.writeStream.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("checkpointLocation", str(checkpoint))
              .outputMode("append"))
    for k, v in extra.items():
        writer = writer.option(k, v)
    if query_name:
        writer = writer.queryName(query_name)
    if once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
    return writer.start()


def input_rows(query: Any) -> int:
    """Raw records the query has read so far (from its recent progress reports)."""
    return sum(int(p.get("numInputRows", 0)) for p in query.recentProgress)
