"""Raw events -> events on ``dls.node.N.publish`` (or dead letters), in Catalyst.

An event's label is that of :func:`dls.mapping.event_label`: the cell of each attribute's
value shifted into its bits under the space's application prefix; the value is the SDK's
RawEvent (a JSON event encoded as the SDK encodes it, an Avro one passed on byte for byte);
the topic is the node's publish topic, in a sharded network that of the label's shard
(:mod:`spark.catalyst.shards`); the headers are those
:meth:`connectors.client.Client.publish` writes, and, when the source
has a ``timestamp`` column (Spark's Kafka source has), the raw record's timestamp as
:data:`connectors.topics.HEADER_PUBLISHED`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from connectors.topics import (
    HEADER_EVENT_ID,
    HEADER_LABEL,
    HEADER_ORIGIN,
    HEADER_PUBLISHED,
    Topics,
)
from dls.space import ContentSpace
from spark.catalyst.columns import (
    ATTR_TYPE,
    be8,
    cell,
    discrete_index,
    error,
    first_error,
    fns,
    hash_cell,
    header_bytes,
    is_optional,
    kind_of,
    long_lit,
    non_null,
    quoted,
    replace_err,
    schema_json,
    str_array,
    string_cell,
    value_cells,
)
from spark.catalyst.decode import decode
from spark.catalyst.shards import with_label_shards
from spark.catalyst.sink import finish, node_topic, with_topic
from spark.catalyst.sqlfns import select, with_column

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["build_events"]


def _with_event_label(space: ContentSpace, df: DataFrame) -> DataFrame:
    """Add ``_label`` (bigint) of ``attrs`` and its error to ``_err``, as ``event_label``.

    An optional attribute left out falls in its absent cell (one past its value cells);
    a string attribute's cell counts its breakpoints ``<= v`` (binary order, which is code
    point order), a hashed one's is ``pmod(crc32(utf8(v)), buckets)``.
    """
    F = fns()
    names = [a.name for a in space.attributes]
    attrs = F.col("attrs")
    df = select(df, "*", F.try_element_at(F.array_except(F.map_keys(attrs), str_array(names)),
                                          F.lit(1)).alias("_extra"),
                    *[F.try_element_at(attrs, F.lit(a.name)).alias(f"_a{i}")
                      for i, a in enumerate(space.attributes)])
    vals = []
    for i, a in enumerate(space.attributes):
        e = F.col(f"_a{i}")
        if kind_of(a) != "numeric":
            vals.append(e["member2"].alias(f"_x{i}"))
        else:
            vals.append(F.coalesce(e["member0"].cast("double"), e["member1"]).alias(f"_x{i}"))
    df = select(df, "*", *vals)
    extra = F.col("_extra")
    checks: list[tuple[Column, Column]] = [
        (extra.isNotNull(),
         error(F.concat(F.lit("unknown attribute "), quoted(extra),
                        F.lit(f" (the space has {names})")), extra, None)),
    ]
    cells = []
    for i, a in enumerate(space.attributes):
        checks_i, c = _attribute_cell(a, F.col(f"_a{i}"), F.col(f"_x{i}"))
        checks += checks_i
        cells.append(c.alias(f"_c{i}"))
    df = select(df, "*", *cells)
    label = long_lit(space.app_prefix)
    for i, shift in enumerate(space.shifts):
        label = label.bitwiseOR(F.shiftleft(F.coalesce(F.col(f"_c{i}"), F.lit(0).cast("bigint")),
                                            shift))
    df = select(df, "*", label.alias("_label"))
    return replace_err(df, first_error(*checks))


def _attribute_cell(a: Any, e: Column, x: Column) -> tuple[list[tuple[Column, Column]], Column]:
    """The refusals of one attribute's value, and its cell, as ``validate_event``.

    ``e``: the value's union struct (null when the key is absent); ``x``: the value.
    """
    F = fns()
    name = repr(a.name)
    kind = kind_of(a)
    absent = e.isNull()
    checks: list[tuple[Column, Column]] = []
    if not is_optional(a):
        checks.append((absent, error(f"event lacks attribute {name}", a.name, None)))
    shown = F.coalesce(e["member0"].cast("string"), e["member1"].cast("string"))
    if kind == "discrete":
        c = F.try_element_at(discrete_index(a), x)
        checks += [
            (~absent & x.isNull(),
             error(F.concat(F.lit(f"attribute {name} is discrete: value must be a string, "
                                  "got "), shown), a.name, shown)),
            (~absent & c.isNull(), error(F.concat(F.lit(f"attribute {name}: unknown value "),
                                                  quoted(x)), a.name, x)),
        ]
    elif kind in ("string", "hashed"):
        c = string_cell(a, x) if kind == "string" else hash_cell(a, x)
        checks.append(
            (~absent & x.isNull(),
             error(F.concat(F.lit(f"attribute {name} is a {kind} attribute: value must be a "
                                  "string, got "), shown), a.name, shown)))
    else:
        checks += [
            # A number beyond float64 (1e400; Python reads it as inf) fills no member.
            (~absent & x.isNull() & e["member2"].isNull(),
             error(f"attribute {name}: value is beyond the float64 range (infinite)",
                   a.name, "inf")),
            (~absent & x.isNull(),
             error(F.concat(F.lit(f"attribute {name}: value must be a number, got "),
                            quoted(e["member2"])), a.name, e["member2"])),
            (F.isnan(x), error(f"attribute {name}: value is NaN", a.name, "NaN")),
            ((x < a.low) | (x > a.high),
             error(F.concat(F.lit(f"attribute {name}: value "), shown,
                            F.lit(f" is outside the domain [{a.low}, {a.high}]")),
                   a.name, shown)),
        ]
        c = cell(a, x)
    if is_optional(a):
        c = F.when(absent, F.lit(value_cells(a)).cast("bigint")).otherwise(c)
    return checks, c


def _raw_event_wire_schema() -> str:
    """The RawEvent schema with ``attrs`` as an array of ``{key, value}`` records.

    Avro writes a map as blocks of ``key value`` pairs and an array of such records as
    blocks of the same bytes, so both encode alike; an array keeps the keys' order, which
    ``to_avro`` of a map (a Java ``HashMap`` inside) does not.
    """
    schema = json.loads(schema_json("RawEvent"))
    for f in schema["fields"]:
        if f["name"] == "attrs":
            f["type"] = {"type": "array", "items": {
                "type": "record", "name": "AttrEntry", "fields": [
                    {"name": "key", "type": "string"},
                    {"name": "value", "type": f["type"]["values"]}]}}
    return json.dumps(schema)


def build_events(space: ContentSpace, raw: DataFrame, topics: Topics,
                 shards: int = 1) -> DataFrame:
    """Raw events -> sink records, the Catalyst mapping of :func:`spark.mapping.map_events`.

    ``shards`` > 1: an event goes to its label's shard, ``dls.node.N.s<k>.publish``.
    """
    F = fns()
    decoded = decode(raw, "event", len(space.attributes))
    df = with_topic(_with_event_label(space, decoded), topics, "publish", shards)
    if shards > 1:
        df = with_label_shards(df, F.array(F.col("_label")), "_shards", shards)
        df = with_column(df, "_topic", node_topic(F.col("node"), topics, "publish",
                                                  F.col("_shards")[0]))
    entries = F.coalesce(F.map_entries(F.col("attrs")),
                         F.array().cast(f"array<struct<key:string,value:{ATTR_TYPE}>>"))
    body = F.to_avro(F.struct(non_null("node"), non_null("client"), non_null("id"),
                            entries.alias("attrs"), non_null("payload", bytearray())),
                   _raw_event_wire_schema())
    value = F.when(F.col("_avro"), F.col("_value")).otherwise(
        F.concat(header_bytes("RawEvent"), body))
    published = ([F.struct(F.lit(HEADER_PUBLISHED).alias("key"),
                           be8(F.col("_published")).alias("value"))]
                 if "timestamp" in raw.columns else [])
    return finish(
        df, topics, F.col("_topic"), value,
        F.array(
            F.struct(F.lit(HEADER_LABEL).alias("key"), be8(F.col("_label")).alias("value")),
            F.struct(F.lit(HEADER_ORIGIN).alias("key"),
                     F.encode(F.concat_ws("/", F.col("node"), F.col("client")), "UTF-8")
                     .alias("value")),
            F.struct(F.lit(HEADER_EVENT_ID).alias("key"),
                     F.encode(F.col("id"), "UTF-8").alias("value")),
            *published))
