"""Raw (un)subscriptions -> ``LabelSubscription`` / ``LabelUnsubscription`` sink records.

A subscription's ``where`` is read in its text or JSON list form
(:mod:`spark.catalyst.where`), expanded into labels (:mod:`spark.catalyst.cells`) and
written as the SDK writes a ``LabelSubscription``; its ``where`` text goes as it came (the
SDK writes its normalised form; nodes route on the labels only). In a sharded network a
subscription is split by :mod:`spark.catalyst.shards` into a part per shard, as the SDK
splits it, and an unsubscription goes to every shard.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from connectors.topics import Topics
from dls.space import ContentSpace
from spark.catalyst.cells import labels_bytes, rendered, with_labels
from spark.catalyst.columns import (
    HEADERS_TYPE,
    PRED_TYPE,
    fns,
    header_bytes,
    non_null,
    replace_err,
    schema_json,
)
from spark.catalyst.decode import decode
from spark.catalyst.shards import with_label_shards
from spark.catalyst.sink import finish, finish_records, node_topic, record, with_topic
from spark.catalyst.sqlfns import select, with_column
from spark.catalyst.where import text_conjunction, with_json_predicates, with_text_predicates

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["build_subscriptions", "build_unsubscriptions"]


def build_subscriptions(space: ContentSpace, raw: DataFrame, topics: Topics,
                        shards: int = 1) -> DataFrame:
    """Raw subscriptions -> sink records (the Catalyst mapping of ``map_subscriptions``).

    ``shards`` > 1: one ``LabelSubscription`` per shard the labels fall in, holding that
    shard's labels (in order), on ``dls.node.N.s<k>.subscribe``, shards in increasing
    order, as the SDK sends them; the rows are then :func:`~spark.catalyst.sink.finish_records`
    arrays (``_records``), one per raw record, for the caller to explode.
    """
    F = fns()
    df = with_topic(decode(raw, "subscription"), topics, "subscribe", shards)
    df = with_json_predicates(with_text_predicates(space, df))
    use_json = F.col("wjson").isNotNull()
    df = select(df, "*", F.when(use_json, F.col("_jalts")).otherwise(F.col("_talts"))
                    .alias("_alts"))
    df = replace_err(df, F.when(use_json, F.col("_jerr")).otherwise(F.col("_terr")))
    df = with_labels(space, with_column(df,
        "_alts", F.when(F.col("_err").isNull(), F.col("_alts"))
        .otherwise(F.array(F.array().cast(f"array<{PRED_TYPE}>")))))
    # A refusal that names the predicates: those of the fast path's rows are read again.
    df = with_column(df, "_err", rendered(F.col("_err"), F.when(
        F.col("_fast"), text_conjunction(F.col("wtext"))).otherwise(F.col("_alts"))))

    def value(labels: Column) -> Column:
        body = F.to_avro(F.struct(non_null("client"), non_null("id"),
                                F.coalesce(labels_bytes(labels), F.lit(bytearray()))
                                .alias("labels"), F.col("where"),
                                F.lit(None).cast("binary").alias("row")),
                       schema_json("LabelSubscription"))
        return F.concat(header_bytes("LabelSubscription"), body)

    if shards == 1:
        return finish(df, topics, F.col("_topic"), value(F.col("_labels")),
                      F.array().cast(HEADERS_TYPE))
    df = with_label_shards(df, F.col("_labels"), "_lshards", shards)
    of = F.col("_lshards")

    def part(k: Column) -> Column:
        mine = F.filter(F.col("_labels"), lambda _x, i: F.get(of, i) == k)
        return record(node_topic(F.col("node"), topics, "subscribe", k), value(mine))

    return finish_records(df, topics, F.transform(F.array_sort(F.array_distinct(of)), part))


def build_unsubscriptions(space: ContentSpace, raw: DataFrame, topics: Topics,
                          shards: int = 1) -> DataFrame:
    """Raw unsubscriptions -> sink records (``space`` is not needed; a uniform signature).

    ``shards`` > 1: the same ``LabelUnsubscription`` on every shard's unsubscribe topic,
    in shard order (the job does not know the subscription's labels; a shard that has no
    part of it takes it as the cancellation of an unknown id), as ``_records`` arrays
    (:func:`~spark.catalyst.sink.finish_records`).
    """
    F = fns()
    del space
    df = with_topic(decode(raw, "unsubscription"), topics, "unsubscribe", shards)
    body = F.to_avro(F.struct(non_null("client"), non_null("id")),
                   schema_json("LabelUnsubscription"))
    value = F.concat(header_bytes("LabelUnsubscription"), body)
    if shards == 1:
        return finish(df, topics, F.col("_topic"), value, F.array().cast(HEADERS_TYPE))
    df = select(df, "*", value.alias("_unsub"))
    return finish_records(df, topics, F.transform(
        F.sequence(F.lit(0), F.lit(shards - 1)),
        lambda k: record(node_topic(F.col("node"), topics, "unsubscribe", k), F.col("_unsub"))))
