"""Raw (un)subscriptions -> ``LabelSubscription`` / ``LabelUnsubscription`` sink records.

A subscription's ``where`` is read in its text or JSON list form
(:mod:`spark.catalyst.where`), expanded into labels (:mod:`spark.catalyst.cells`) and
written as the SDK writes a ``LabelSubscription``; its ``where`` text goes as it came (the
SDK writes its normalised form; nodes route on the labels only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from connectors.topics import Topics
from dls.space import ContentSpace
from spark.catalyst.cells import labels_bytes, with_labels
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
from spark.catalyst.sink import finish, with_topic
from spark.catalyst.where import with_json_predicates, with_text_predicates

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["build_subscriptions", "build_unsubscriptions"]


def build_subscriptions(space: ContentSpace, raw: DataFrame, topics: Topics) -> DataFrame:
    """Raw subscriptions -> sink records (the Catalyst mapping of ``map_subscriptions``)."""
    from pyspark.sql.avro.functions import to_avro

    F = fns()
    df = with_topic(decode(raw, "subscription"), topics, "subscribe")
    df = with_json_predicates(with_text_predicates(space, df))
    use_json = F.col("wjson").isNotNull()
    df = df.select("*", F.when(use_json, F.col("_jpreds")).otherwise(F.col("_tpreds"))
                   .alias("_preds"))
    df = replace_err(df, F.when(use_json, F.col("_jerr")).otherwise(F.col("_terr")))
    df = with_labels(space, df.withColumn(
        "_preds", F.when(F.col("_err").isNull(), F.col("_preds"))
        .otherwise(F.array().cast(f"array<{PRED_TYPE}>"))))
    body = to_avro(F.struct(non_null("client"), non_null("id"),
                            F.coalesce(labels_bytes(F.col("_labels")), F.lit(bytearray()))
                            .alias("labels"), F.col("where")),
                   schema_json("LabelSubscription"))
    return finish(df, topics, F.col("_topic"),
                  F.concat(header_bytes("LabelSubscription"), body),
                  F.array().cast(HEADERS_TYPE))


def build_unsubscriptions(space: ContentSpace, raw: DataFrame, topics: Topics) -> DataFrame:
    """Raw unsubscriptions -> sink records (``space`` is not needed; a uniform signature)."""
    from pyspark.sql.avro.functions import to_avro

    F = fns()
    del space
    df = with_topic(decode(raw, "unsubscription"), topics, "unsubscribe")
    body = to_avro(F.struct(non_null("client"), non_null("id")),
                   schema_json("LabelUnsubscription"))
    return finish(df, topics, F.col("_topic"),
                  F.concat(header_bytes("LabelUnsubscription"), body),
                  F.array().cast(HEADERS_TYPE))
