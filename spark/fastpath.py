"""The mapping through the project's Java UDFs: ``FastMap`` first, ``General`` for the rest.

``dlsroute.spark.FastMap`` (``spark/jvm/src``, built by :mod:`spark.jvm`) maps the common
JSON records from the :func:`fast_config` of a space and topics, and returns null for the
rest; ``dlsroute.spark.General`` runs the Catalyst mapping (:mod:`spark.catalyst`), built
once per session, space, topics and source schema, on the rows FastMap declines. The plan
Spark optimises and compiles for each batch is then a few expressions, not the whole
mapping (the why, with its measurements: ``docs/architecture.md``, the Spark mapping).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from connectors.serde import SERDE
from connectors.topics import (
    HEADER_EVENT_ID,
    HEADER_LABEL,
    HEADER_ORIGIN,
    HEADER_PUBLISHED,
    MAX_MESSAGE_LABELS,
    MAX_TOPIC_LENGTH,
    Topics,
)
from dls.space import BreakpointAttribute, ContentSpace, DiscreteAttribute, UniformAttribute
from spark.catalyst.columns import HEADERS_TYPE, be8, fns, json_rules
from spark.catalyst.sink import RECORDS, explode, published_ms, record
from spark.catalyst.sqlfns import select
from spark.exceptions import FastPathError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["FAST_PARTS_TYPE", "FAST_TYPE", "Build", "fast_config", "fast_space", "hybrid"]

Build = Callable[[ContentSpace, "DataFrame", Topics, int], "DataFrame"]
"""A Catalyst mapping: ``build(space, raw, topics, shards)`` -> sink records (or, for a
sharded network's subscriptions and unsubscriptions, ``_records`` arrays of them)."""

FAST_TYPE = "struct<topic:binary,value:binary,label:binary,origin:binary,eid:binary>"
"""What ``dlsroute.spark.FastMap`` gives for a record it maps: the topic's name as UTF-8
(binary: no Java string to encode per row) and the three event headers' values (null for
subscriptions)."""
FAST_PARTS_TYPE = ("struct<topic:binary,value:binary,label:binary,origin:binary,eid:binary,"
                   "parts:array<struct<topic:binary,value:binary>>>")
"""What ``dlsroute.spark.FastMap`` gives for a subscription of a sharded network: ``parts``,
the topic and value of each shard's part (the other fields null)."""
_FAST_FN = "dlsroute_fast_map"
_FAST_PARTS_FN = "dlsroute_fast_map_parts"
_FAST_SCHEMAS = {"event": "RawEvent", "subscription": "LabelSubscription"}


def _hex(text: str) -> str:
    return text.encode().hex() or "-"


def _bits(x: float) -> str:
    return struct.pack(">d", float(x)).hex()


def fast_config(space: ContentSpace, topics: Topics, kind: str, shards: int = 1) -> bytes:
    """The first argument of ``dlsroute.spark.FastMap``: what it needs of space and topics.

    Lines of space-separated fields: strings as hex of their UTF-8 bytes (``-`` when
    empty), doubles as hex of their IEEE bits, so that Java sees exactly Python's values.
    ``kind``: "event" or "subscription"; ``shards``: the network's label shards. A space
    FastMap does not know (:func:`fast_space`) gets the line ``decline all`` and no
    attributes.
    """
    app = space.app_prefix
    lines = [f"kind {kind}", f"prefix {_hex(topics.prefix)}",
             f"header {SERDE.header(_FAST_SCHEMAS[kind]).hex()}",
             f"app {app - (1 << 64) if app >= 1 << 63 else app}",
             f"budget {min(space.filters.label_budget, MAX_MESSAGE_LABELS)}",
             f"maxtopic {MAX_TOPIC_LENGTH}",
             f"shards {shards}"]
    if not fast_space(space):
        # Optional, string and hashed attributes are the Catalyst mapping's alone: FastMap
        # declines every record of such a space.
        return ("\n".join([*lines, "decline all"]) + "\n").encode()
    for a, shift in zip(space.attributes, space.shifts, strict=True):
        head = f"attr {_hex(a.name)} {shift}"
        if isinstance(a, DiscreteAttribute):
            lines.append(f"{head} d " + " ".join(_hex(v) for v in a.values))
        elif isinstance(a, UniformAttribute):
            lines.append(f"{head} u {_bits(a.low)} {_bits(a.high)} {a.granules}")
        elif isinstance(a, BreakpointAttribute):
            lines.append(f"{head} b {_bits(a.low)} {_bits(a.high)} "
                         + " ".join(_bits(b) for b in a.breakpoints))
    return ("\n".join(lines) + "\n").encode()


def fast_space(space: ContentSpace) -> bool:
    """True when FastMap may map a space's records.

    Required numeric and discrete attributes only; it declines every record of any other
    space.
    """
    return all(isinstance(a, UniformAttribute | BreakpointAttribute | DiscreteAttribute)
               and not getattr(a, "optional", False) for a in space.attributes)


_GENERAL: dict[tuple[Any, ...], tuple[Any, str]] = {}


def _general_udf(kind: str, build: Build, space: ContentSpace, raw: DataFrame,
                 topics: Topics, shards: int) -> str | None:
    """The name of the general mapping of ``kind`` as a Java UDF (``dlsroute.spark.General``).

    Built once per session, space, topics, shards and source schema: the Catalyst mapping
    over an empty source of ``raw``'s schema, whose optimised projections the UDF runs on a
    struct of one row's columns. None when the session lacks the jar.
    """
    from py4j.protocol import Py4JError

    spark = raw.sparkSession
    schema = raw.schema
    key = (kind, id(spark), json.dumps(space.to_spec(), sort_keys=True), topics.prefix,
           shards, schema.json())
    hit = _GENERAL.get(key)
    if hit is not None and hit[0] is spark:
        return hit[1]
    name = f"dlsroute_general_{len(_GENERAL)}_{kind}"
    # An RDD, not a local relation: the optimiser would fold an empty local one away.
    empty = spark.createDataFrame(spark.sparkContext.emptyRDD(), schema)
    jvm = spark._jvm  # noqa: SLF001 - the py4j gateway
    if jvm is None:
        return None
    try:
        jvm.dlsroute.spark.General.register(name, build(space, empty, topics, shards)._jdf)  # noqa: SLF001
    except (Py4JError, TypeError):  # the jar is not on this session's classpath
        return None
    _GENERAL[key] = (spark, name)
    return name


def _register_fast_map(spark: SparkSession, name: str, returns: str) -> str | None:
    """Register ``dlsroute.spark.FastMap`` as function ``name``; None, or why it cannot be."""
    from pyspark.sql.utils import AnalysisException

    from spark.jvm import FAST_CLASS

    try:
        spark.udf.registerJavaFunction(name, FAST_CLASS, returns)
    except AnalysisException as exc:
        return str(exc)
    return None


def hybrid(kind: str, build: Build, space: ContentSpace, raw: DataFrame, topics: Topics,
           fast: bool | None, shards: int = 1) -> DataFrame:
    """``build(space, raw, topics, shards)``, or the same records through the Java UDFs.

    ``dlsroute.spark.FastMap`` maps the common JSON records (:data:`FAST_TYPE`, null for the
    rest); the rows it declines go to ``dlsroute.spark.General``, the Catalyst mapping
    ``build`` makes, inside a CASE WHEN (which evaluates only the branch it takes). Same
    bytes either way (``tests/spark/test_mapping_parity.py`` runs both). ``fast``: None
    takes the Java UDFs when the session has their jar, True insists, False never does.
    A sharded network's subscriptions come out of both as arrays of records, one per
    shard part (:data:`FAST_PARTS_TYPE`, ``_records``), exploded at the end.

    Raises:
        FastPathError: ``fast`` is True and the session cannot run the Java UDFs.
    """
    from spark.jvm import FAST_CLASS

    F = fns()
    spark = raw.sparkSession
    json_rules(spark)
    if fast is False:
        return _exploded(build(space, raw, topics, shards))
    parts = kind == "subscription" and shards > 1
    fn, returns = (_FAST_PARTS_FN, FAST_PARTS_TYPE) if parts else (_FAST_FN, FAST_TYPE)
    general = _general_udf(kind, build, space, raw, topics, shards)
    problem = (_register_fast_map(spark, fn, returns) if general is not None
               else f"no {FAST_CLASS} on this session's classpath")
    if general is None or problem is not None:
        if fast:
            raise FastPathError(f"fast=True, but the mapping's Java UDFs cannot run: {problem}",
                                field="fast", value=fast)
        return _exploded(build(space, raw, topics, shards))
    mapped = F.call_function(fn, F.lit(bytearray(fast_config(space, topics, kind, shards))),
                             F.col("value"))
    df = select(raw, "*", mapped.alias("_jvm"))
    # In a column of its own, read three times below (the optimiser keeps it apart).
    rest = F.call_function(general, F.struct(*[F.col(c) for c in raw.columns]))
    published = published_ms(raw)  # the Catalyst mapping adds it for the rows it maps
    df = select(df, "_jvm", F.when(F.col("_jvm").isNull(), rest).alias("_gen"),
                    *([] if published is None else [be8(published).alias("_published")]))
    f, g = F.col("_jvm"), F.col("_gen")
    took = f.isNotNull()
    if parts:
        mine = F.transform(f["parts"], lambda p: record(p["topic"].cast("string"), p["value"]))
        return explode(select(df, F.when(took, mine).otherwise(g[RECORDS]).alias(RECORDS)))
    headers = (F.array(*[F.struct(F.lit(k).alias("key"), f[n].alias("value"))
                         for k, n in ((HEADER_LABEL, "label"), (HEADER_ORIGIN, "origin"),
                                      (HEADER_EVENT_ID, "eid"))],
                       *([] if published is None else [
                           F.struct(F.lit(HEADER_PUBLISHED).alias("key"),
                                    F.col("_published").alias("value"))]))
               if kind == "event" else F.array().cast(HEADERS_TYPE))
    return select(df, F.when(took, f["topic"].cast("string")).otherwise(g["topic"])
                      .alias("topic"),
                      F.lit(None).cast("binary").alias("key"),
                      F.when(took, f["value"]).otherwise(g["value"]).alias("value"),
                      F.when(took, headers).otherwise(g["headers"]).alias("headers"))


def _exploded(df: DataFrame) -> DataFrame:
    """``df``'s sink records: as they are, or one row per record of its ``_records``."""
    return explode(df) if RECORDS in df.columns else df
