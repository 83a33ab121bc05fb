"""Both ends of a mapping: the source columns a record keeps, and the sink record it becomes.

:func:`with_source` reads what a dead letter needs of a Kafka source row (value, headers,
``topic[partition]@offset``) and the row's timestamp (an event's publication time);
:func:`with_topic` names the node topic and refuses a node whose topic name Kafka would
not take; :func:`finish` makes one sink record per row: the mapped record, or a
``DeadLetter`` on ``dls.deadletter`` as the nodes write theirs. A row that maps to several
records (a sharded network's parts) gets them as an array, :func:`finish_records`, still a
projection (the Java path's general mapping must be one), which :func:`explode` turns into
rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from connectors.topics import HEADER_DLQ_REASON, HEADER_DLQ_SOURCE, MAX_TOPIC_LENGTH, Topics
from spark.catalyst.columns import (
    HEADERS_TYPE,
    error,
    first_error,
    fns,
    header_bytes,
    non_null,
    quoted,
    replace_err,
    schema_json,
)
from spark.catalyst.sqlfns import select, with_column

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = [
    "RECORDS",
    "RECORD_TYPE",
    "explode",
    "finish",
    "finish_records",
    "node_topic",
    "published_ms",
    "record",
    "with_source",
    "with_topic",
]

RECORD_TYPE = f"struct<topic:string,key:binary,value:binary,headers:{HEADERS_TYPE}>"
"""A sink record as a struct (what the Kafka sink takes, one row of it)."""
RECORDS = "_records"
"""The column of :func:`finish_records`: the sink records of one input row."""


def published_ms(raw: DataFrame) -> Column | None:
    """The Kafka timestamp of ``raw``'s rows in ms (bigint); None when it has no such column.

    The raw record's timestamp is its publication time (the publisher's CreateTime); the
    Kafka sink cannot set the timestamp of what it writes, so an event carries it in the
    :data:`connectors.topics.HEADER_PUBLISHED` header.
    """
    F = fns()
    return F.unix_millis(F.col("timestamp")) if "timestamp" in raw.columns else None


def with_source(raw: DataFrame) -> DataFrame:
    """``_value``, ``_headers`` (never null), ``_source`` and ``_published`` of source rows.

    ``_published``: :func:`published_ms` (null without a ``timestamp`` column).
    """
    F = fns()
    cols = set(raw.columns)
    headers = F.col("headers") if "headers" in cols else F.lit(None)
    published = published_ms(raw)
    return select(raw,
        F.col("value").alias("_value"),
        F.coalesce(headers.cast(HEADERS_TYPE), F.array().cast(HEADERS_TYPE)).alias("_headers"),
        F.format_string("%s[%s]@%s", F.col("topic"), F.col("partition").cast("string"),
                        F.col("offset").cast("string")).alias("_source"),
        (F.lit(None).cast("bigint") if published is None else published).alias("_published"),
    )


def node_topic(node: Column, topics: Topics, suffix: str, shard: Column | None = None
               ) -> Column:
    """``dls.node.N.<suffix>``, or with ``shard`` that shard's ``dls.node.N.s<k>.<suffix>``."""
    F = fns()
    if shard is None:
        return F.concat(F.lit(f"{topics.prefix}.node."), node, F.lit(f".{suffix}"))
    return F.concat(F.lit(f"{topics.prefix}.node."), node, F.lit(".s"), shard.cast("string"),
                    F.lit(f".{suffix}"))


def _topic_err(topic: Column, shards: int) -> Column:
    F = fns()
    # Sharded: the longest shard part (.s<shards-1>) must fit, whichever shard a record takes.
    pad = 0 if shards == 1 else len(f".s{shards - 1}")
    return first_error((F.length(topic) + pad > MAX_TOPIC_LENGTH,
                        error(F.concat(F.lit("node "), quoted(F.col("node")),
                                       F.lit(f" makes a topic name longer than Kafka's "
                                             f"{MAX_TOPIC_LENGTH} characters")),
                              "node", F.col("node"))))


def with_topic(df: DataFrame, topics: Topics, suffix: str, shards: int = 1) -> DataFrame:
    """Add ``_topic``, the node's topic ``dls.node.N.<suffix>``, and its error to ``_err``.

    ``shards`` > 1: ``_topic`` is still the unsharded name (the caller names the shard's);
    the error is for a node whose topic of the last shard would be too long.
    """
    F = fns()
    df = with_column(df, "_topic", node_topic(F.col("node"), topics, suffix))
    return replace_err(df, _topic_err(F.col("_topic"), shards))


def _dead_letter(topics: Topics) -> tuple[Column, Column, Column]:
    """The topic, value and headers of a row's DeadLetter (from ``_err`` and the source)."""
    F = fns()
    # Every check builds its reason; should one come out null (a null operand of concat),
    # the dead letter still says something rather than carry a null header.
    reason = F.coalesce(F.col("_err.reason"), F.lit("unusable record"))
    hmap = F.map_from_entries(F.transform(F.col("_headers"), lambda h: F.struct(
        h["key"].alias("key"), F.coalesce(h["value"], F.lit(bytearray())).alias("value"))))
    body = F.to_avro(F.struct(
        non_null("_source").alias("source"), reason.alias("reason"),
        F.col("_err.field").alias("field"), F.col("_err.value").alias("value"),
        F.coalesce(F.col("_value"), F.lit(bytearray())).alias("raw"),
        F.coalesce(hmap, F.create_map().cast("map<string,binary>")).alias("headers")),
        schema_json("DeadLetter"))
    dead_headers = F.array(
        F.struct(F.lit(HEADER_DLQ_REASON).alias("key"),
                 F.encode(reason, "UTF-8").alias("value")),
        F.struct(F.lit(HEADER_DLQ_SOURCE).alias("key"),
                 F.encode(F.col("_source"), "UTF-8").alias("value")))
    return (F.lit(topics.deadletter), F.concat(header_bytes("DeadLetter"), body),
            dead_headers)


def finish(df: DataFrame, topics: Topics, topic: Column, value: Column,
           headers: Column) -> DataFrame:
    """One sink record per input row: the mapped record, or a DeadLetter when ``_err`` is set.

    A projection, not a filter and a union: a filter on ``_err`` would be pushed down
    through every stage by the optimizer, inlining each stage's expressions into the next.
    """
    F = fns()
    dead_topic, dead_value, dead_headers = _dead_letter(topics)
    ok = F.col("_err").isNull()
    return select(df,
        F.when(ok, topic).otherwise(dead_topic).alias("topic"),
        F.lit(None).cast("binary").alias("key"),
        F.when(ok, value).otherwise(dead_value).alias("value"),
        F.when(ok, headers.cast(HEADERS_TYPE)).otherwise(dead_headers).alias("headers"))


def record(topic: Column, value: Column, headers: Column | None = None) -> Column:
    """A sink record as a struct (:data:`RECORD_TYPE`): no key, no headers unless given."""
    F = fns()
    return F.struct(topic.alias("topic"), F.lit(None).cast("binary").alias("key"),
                    value.alias("value"),
                    (F.array() if headers is None else headers).cast(HEADERS_TYPE)
                    .alias("headers"))


def finish_records(df: DataFrame, topics: Topics, records: Column) -> DataFrame:
    """The sink records of each row as one array column ``_records`` (:func:`explode`).

    ``records``: the array of :func:`record` structs a row maps to (a sharded network's
    parts); a row with ``_err`` set gives one DeadLetter instead. A projection, as
    :func:`finish`: the caller (or the Java path, whose general mapping must be
    projections) explodes it.
    """
    F = fns()
    dead_topic, dead_value, dead_headers = _dead_letter(topics)
    dead = F.array(record(dead_topic, dead_value, dead_headers))
    return select(df, F.when(F.col("_err").isNull(), records.cast(f"array<{RECORD_TYPE}>"))
                      .otherwise(dead).alias(RECORDS))


def explode(df: DataFrame) -> DataFrame:
    """One row per element of :func:`finish_records`'s ``_records``: the sink columns."""
    return select(df, fns().inline(RECORDS))
