"""The DLS mapping in native Spark SQL: raw records in, Kafka-sink records out.

Three functions take a DataFrame shaped like Spark's Kafka source (``value``, ``topic``,
``partition``, ``offset`` and, when read with ``includeHeaders``, ``headers``) holding
records of one raw topic, and return a DataFrame ready for the Kafka sink (``topic``,
``key``, ``value``, ``headers``):

* :func:`map_events`: a raw event becomes the event on ``dls.node.N.publish``, with the
  ``dls-label``, ``dls-origin`` and ``dls-event-id`` headers and the value bytes the client
  SDK writes (a JSON event is encoded as the SDK's RawEvent; an Avro RawEvent is passed on
  byte for byte);
* :func:`map_subscriptions`: a raw subscription becomes a ``LabelSubscription`` on
  ``dls.node.N.subscribe`` with the labels of every cell it touches;
* :func:`map_unsubscriptions`: a raw unsubscription becomes a ``LabelUnsubscription`` on
  ``dls.node.N.unsubscribe``.

A record the Python core would refuse becomes a ``DeadLetter`` on ``dls.deadletter``: the
raw bytes and headers, a reason naming the field and value at fault, and its source as
``topic[partition]@offset``, exactly as the nodes write theirs.

Everything is Catalyst expressions: the JSON is read with ``try_parse_json`` (a variant,
which keeps the difference between ``1`` and ``1.0``) and ``from_json`` (which keeps the
order of the keys), Avro with ``from_avro``/``to_avro``, the subscription text with Java
regular expressions, and a subscription's label set is the cross product of per-attribute
cell ranges (``sequence``) built with ``transform``/``flatten``. There is no Python UDF
(the Java UDFs of the speed note below run these same expressions or the SDK's rules).
The cell arithmetic follows :mod:`dls.space` operation by operation in float64, so labels
agree bit for bit with :mod:`dls.mapping` (``tests/spark/test_mapping_parity.py``). The
``nextafter`` a strict bound needs is computed exactly from powers of two.

The text of a ``where`` is written to the ``LabelSubscription`` as it came (the SDK writes
its normalised form); nodes route on the labels only.

Speed. Spark 4.2 evaluates a higher-order function (``transform``, ``filter``,
``aggregate``...) interpreted, building a ``SQLConf`` for every array element it reads, and
the whole mapping is a plan of a few thousand expressions: building it from Python takes
tens of thousands of py4j calls (3 to 8 s), and Catalyst optimises, plans and generates
code for it again in every batch (0.5 to 1 s). So, when the session has the project's jar
(:mod:`spark.jvm`), :func:`map_events` and :func:`map_subscriptions` run a small plan
(:func:`_hybrid`): ``dlsroute.spark.FastMap``, a Java UDF, maps the common JSON records
(plain ASCII strings, each key once, numbers in the domain, a text ``where`` comparing
numeric attributes with finite numbers) and returns null for anything else;
``dlsroute.spark.General`` runs the Catalyst mapping below, built once per space, topics
and source schema, on the rows FastMap declines, inside a CASE WHEN that evaluates it for
those rows only. Both give the SDK's bytes (``tests/spark/test_mapping_fast.py`` runs the
records on each edge of FastMap through both paths); ``fast=False`` runs the Catalyst
mapping alone, in the plan, as before. Inside the Catalyst mapping, the common records take
shortcuts of generated code (an event's attribute members built position by position, a
text subscription's intervals read straight from the predicate pattern's groups, which runs
once as a ``regexp_replace``).
"""

from __future__ import annotations

import json
import math
import struct
from typing import TYPE_CHECKING, Any

from connectors.serde import SERDE
from connectors.topics import (
    HEADER_DLQ_REASON,
    HEADER_DLQ_SOURCE,
    HEADER_EVENT_ID,
    HEADER_LABEL,
    HEADER_ORIGIN,
    MAX_TOPIC_LENGTH,
    Topics,
)
from dls.space import (
    BreakpointAttribute,
    ContentSpace,
    DiscreteAttribute,
    UniformAttribute,
)
from spark.session import SESSION_CONF

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = [
    "HEADERS_TYPE",
    "SINK_COLUMNS",
    "map_events",
    "map_subscriptions",
    "map_unsubscriptions",
]

SINK_COLUMNS = ("topic", "key", "value", "headers")
"""The columns of every DataFrame this module returns, in this order."""
HEADERS_TYPE = "array<struct<key:string,value:binary>>"
"""The Kafka source's and sink's type of the ``headers`` column."""

_NAME_RE = "^[A-Za-z0-9_-]+$"
_WORDCHAR = r"[A-Za-z0-9_.\-]"
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![A-Za-z_])"
_STR = r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'"
_WORD = r"[A-Za-z_][A-Za-z0-9_.\-]*+"
_VAL = f"(?:{_NUM}|{_STR}|{_WORD})"


def _kw(word: str) -> str:
    return f"(?i:{word})(?!{_WORDCHAR})"


# One predicate: 1 attr, 2-3 between low/high, 4 the list of an 'in', 5-6 comparison op/value.
_PRED = (rf"({_WORD})\s*(?:{_kw('between')}\s*({_VAL})\s*{_kw('and')}\s*({_VAL})"
         rf"|{_kw('in')}\s*\(\s*({_VAL}(?:\s*,\s*{_VAL})*)\s*\)"
         rf"|(<=|>=|<|>|=)\s*({_VAL}))")
_WHERE_FULL = rf"^\s*(?:{_PRED}(?:\s*{_kw('and')}\s*{_PRED})*)?\s*$"
_WHERE_EACH = rf"(?:^\s*|\s*{_kw('and')}\s*){_PRED}"
_VAL_EACH = f"({_VAL})"
_OPS = ("between", "=", "<", "<=", ">", ">=", "in")
_RAW_FIELDS = {
    "event": ("node", "client", "id", "attrs"),
    "subscription": ("node", "client", "id", "where"),
    "unsubscription": ("node", "client", "id"),
}
_RAW_OPS = {"event": "publish", "subscription": "subscribe", "unsubscription": "unsubscribe"}
_RAW_SCHEMAS = {"event": "RawEvent", "subscription": "RawSubscription",
                "unsubscription": "RawUnsubscription"}
_ATTR_TYPE = "struct<member0:bigint,member1:double,member2:string>"
_TYPED = {
    "event": {"node": "string", "client": "string", "id": "string",
              "attrs": "map<string,string>", "payload": "string"},
    "subscription": {"node": "string", "client": "string", "id": "string", "where": "string"},
    "unsubscription": {"node": "string", "client": "string", "id": "string"},
}
"""Fields of the typed reading of a raw JSON record (a non-string value comes as its text)."""
_VAL_TYPE = "struct<k:string,n:double,s:string>"
_PRED_TYPE = f"struct<attr:string,op:string,vals:array<{_VAL_TYPE}>>"
_ERR_TYPE = "struct<reason:string,field:string,value:string>"


# -- small column helpers ---------------------------------------------------------------------
def _F() -> Any:  # noqa: N802 - the usual name of the functions module
    from pyspark.sql import functions

    return functions


def _lit(v: Any) -> Column:
    return _F().lit(v)


def _q(c: Column) -> Column:
    """``'text'``, as Python's ``!r`` shows a string."""
    F = _F()
    return F.concat(F.lit("'"), c, F.lit("'"))


def _err(reason: Column | str, field: Column | str | None, value: Column | str | None) -> Column:
    F = _F()

    def col(x: Column | str | None) -> Column:
        if x is None:
            return F.lit(None).cast("string")
        return F.lit(x) if isinstance(x, str) else x.cast("string")

    return F.struct(col(reason).alias("reason"), col(field).alias("field"),
                    col(value).alias("value"))


def _first(*checks: tuple[Column, Column]) -> Column:
    """The error of the first check whose condition is true (null when none is)."""
    F = _F()
    return F.coalesce(*[F.when(cond, err) for cond, err in checks],
                      F.lit(None).cast(_ERR_TYPE))


def _str_array(values: tuple[str, ...] | list[str]) -> Column:
    F = _F()
    return F.array(*[F.lit(v) for v in values]).cast("array<string>")


def _vtype(v: Column) -> Column:
    return _F().schema_of_variant(v)


def _is_num_type(t: Column) -> Column:
    return t.isin("BIGINT", "DOUBLE", "FLOAT") | t.startswith("DECIMAL")


def _long_lit(value: int) -> Column:
    """A bigint literal holding the unsigned 64-bit ``value`` in two's complement."""
    return _lit(value - (1 << 64) if value >= 1 << 63 else value).cast("bigint")


def _be8(label: Column) -> Column:
    """8 bytes, big-endian, of a bigint (two's complement: the unsigned label's bytes)."""
    F = _F()
    return F.unhex(F.lpad(F.hex(label), 16, "0"))


def _nn(name: str, empty: Any = "") -> Column:
    """Column ``name`` made non-null for a non-nullable Avro field.

    Rows that would hold a null there are dead letters, whose mapped value is never used.
    """
    F = _F()
    return F.coalesce(F.col(name), F.lit(empty)).alias(name)


def _header(name: str) -> Column:
    return _lit(bytearray(SERDE.header(name)))


def _schema_json(name: str) -> str:
    return json.dumps(SERDE.schema(name))


# -- exact float64 neighbours -----------------------------------------------------------------
def _exponent(a: Column) -> Column:
    """floor(log2(a)) for a finite a > 0, exact (log2 is only a first guess)."""
    F = _F()
    e0 = F.floor(F.log2(a))
    e1 = F.when(F.pow(F.lit(2.0), e0) > a, e0 - 1).otherwise(e0)
    return F.when(F.pow(F.lit(2.0), e1 + 1) <= a, e1 + 1).otherwise(e1)


def _next_up(x: Column) -> Column:
    """``math.nextafter(x, inf)`` of a finite double, bit for bit."""
    F = _F()
    a = F.abs(x)
    e = _exponent(a)
    ulp = F.pow(F.lit(2.0), F.greatest(e, F.lit(-1022)) - 52)
    below = F.when((a == F.pow(F.lit(2.0), e)) & (e > -1022), ulp / 2.0).otherwise(ulp)
    return (F.when(x == 0.0, F.lit(5e-324))
            .when(x > 0.0, x + ulp)
            .otherwise(x + below))


def _next_down(x: Column) -> Column:
    """``math.nextafter(x, -inf)`` of a finite double, bit for bit."""
    return -_next_up(-x)


# -- cells ------------------------------------------------------------------------------------
def _cell(a: UniformAttribute | BreakpointAttribute, v: Column) -> Column:
    """Cell index (bigint) of an in-domain double, as :meth:`UniformAttribute.cell` etc."""
    F = _F()
    if isinstance(a, UniformAttribute):
        g = a.granules
        span = a.high - a.low
        raw = F.floor(((v - F.lit(a.low)) * F.lit(float(g))) / F.lit(span))
        return F.least(F.lit(g - 1).cast("bigint"), raw.cast("bigint"))
    bps = F.array(*[F.lit(float(b)) for b in a.breakpoints])
    return F.size(F.filter(bps, lambda b: b <= v)).cast("bigint")


def _discrete_index(a: DiscreteAttribute) -> Column:
    F = _F()
    return F.map_from_arrays(F.array(*[F.lit(v) for v in a.values]),
                             F.array(*[F.lit(i).cast("bigint") for i in range(len(a.values))]))


def _fmt_num(v: Column) -> Column:
    return v.cast("string")


# -- the Java path ----------------------------------------------------------------------------
FAST_TYPE = "struct<topic:binary,value:binary,label:binary,origin:binary,eid:binary>"
"""What ``dlsroute.spark.FastMap`` gives for a record it maps: the topic's name as UTF-8
(binary: no Java string to encode per row) and the three event headers' values (null for
subscriptions)."""
_FAST_FN = "dlsroute_fast_map"
_FAST_SCHEMAS = {"event": "RawEvent", "subscription": "LabelSubscription"}


def _hex(text: str) -> str:
    return text.encode().hex() or "-"


def _bits(x: float) -> str:
    return struct.pack(">d", float(x)).hex()


def fast_config(space: ContentSpace, topics: Topics, kind: str) -> bytes:
    """The first argument of ``dlsroute.spark.FastMap``: what it needs of space and topics.

    Lines of space-separated fields: strings as hex of their UTF-8 bytes (``-`` when
    empty), doubles as hex of their IEEE bits, so that Java sees exactly Python's values.
    ``kind``: "event" or "subscription".
    """
    app = space.app_prefix
    lines = [f"kind {kind}", f"prefix {_hex(topics.prefix)}",
             f"header {SERDE.header(_FAST_SCHEMAS[kind]).hex()}",
             f"app {app - (1 << 64) if app >= 1 << 63 else app}",
             f"budget {space.filters.label_budget}", f"maxtopic {MAX_TOPIC_LENGTH}"]
    for a, shift in zip(space.attributes, space.shifts, strict=True):
        head = f"attr {_hex(a.name)} {shift}"
        if isinstance(a, DiscreteAttribute):
            lines.append(f"{head} d " + " ".join(_hex(v) for v in a.values))
        elif isinstance(a, UniformAttribute):
            lines.append(f"{head} u {_bits(a.low)} {_bits(a.high)} {a.granules}")
        else:
            lines.append(f"{head} b {_bits(a.low)} {_bits(a.high)} "
                         + " ".join(_bits(b) for b in a.breakpoints))
    return ("\n".join(lines) + "\n").encode()


_GENERAL: dict[tuple[Any, ...], tuple[Any, str]] = {}


def _general_udf(kind: str, build: Any, space: ContentSpace, raw: DataFrame,
                 topics: Topics) -> str | None:
    """The name of the general mapping of ``kind`` as a Java UDF (``dlsroute.spark.General``).

    Built once per session, space, topics and source schema: the Catalyst mapping over an
    empty source of ``raw``'s schema, whose optimised projections the UDF runs on a struct
    of one row's columns. None when the session lacks the jar.
    """
    from py4j.protocol import Py4JError

    spark = raw.sparkSession
    schema = raw.schema
    key = (kind, id(spark), json.dumps(space.to_spec(), sort_keys=True), topics.prefix,
           schema.json())
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
        jvm.dlsroute.spark.General.register(name, build(space, empty, topics)._jdf)  # noqa: SLF001
    except (Py4JError, TypeError):  # the jar is not on this session's classpath
        return None
    _GENERAL[key] = (spark, name)
    return name


def _hybrid(kind: str, build: Any, space: ContentSpace, raw: DataFrame, topics: Topics,
            fast: bool | None) -> DataFrame:
    """``build(space, raw, topics)``, or the same records through the Java UDFs.

    ``dlsroute.spark.FastMap`` maps the common JSON records (:data:`FAST_TYPE`, null for the
    rest); the rows it declines go to ``dlsroute.spark.General``, the Catalyst mapping
    ``build`` makes, inside a CASE WHEN (which evaluates only the branch it takes). The plan
    Spark optimises and compiles for each batch is then a few expressions, not the whole
    mapping, and the common rows pay for FastMap alone. Same bytes either way
    (``tests/spark/test_mapping_parity.py`` runs both).
    """
    from pyspark.sql.utils import AnalysisException

    from spark.jvm import FAST_CLASS

    F = _F()
    spark = raw.sparkSession
    # The JSON rules of Python's json module: a repeated key keeps its last value.
    for key in ("spark.sql.mapKeyDedupPolicy", "spark.sql.variant.allowDuplicateKeys"):
        spark.conf.set(key, SESSION_CONF[key])
    if fast is False:
        return build(space, raw, topics)
    general = _general_udf(kind, build, space, raw, topics)
    try:
        if general is None:
            raise AnalysisException(f"no {FAST_CLASS} on this session's classpath")
        spark.udf.registerJavaFunction(_FAST_FN, FAST_CLASS, FAST_TYPE)
    except AnalysisException:
        if fast:
            raise
        return build(space, raw, topics)
    mapped = F.call_function(_FAST_FN, F.lit(bytearray(fast_config(space, topics, kind))),
                             F.col("value"))
    df = raw.select("*", mapped.alias("_jvm"))
    # In a column of its own, read three times below (the optimiser keeps it apart).
    rest = F.call_function(general, F.struct(*[F.col(c) for c in raw.columns]))
    df = df.select("_jvm", F.when(F.col("_jvm").isNull(), rest).alias("_gen"))
    f, g = F.col("_jvm"), F.col("_gen")
    took = f.isNotNull()
    headers = (F.array(*[F.struct(F.lit(k).alias("key"), f[n].alias("value"))
                         for k, n in ((HEADER_LABEL, "label"), (HEADER_ORIGIN, "origin"),
                                      (HEADER_EVENT_ID, "eid"))])
               if kind == "event" else F.array().cast(HEADERS_TYPE))
    return df.select(F.when(took, f["topic"].cast("string")).otherwise(g["topic"]).alias("topic"),
                     F.lit(None).cast("binary").alias("key"),
                     F.when(took, f["value"]).otherwise(g["value"]).alias("value"),
                     F.when(took, headers).otherwise(g["headers"]).alias("headers"))


# -- raw decoding -----------------------------------------------------------------------------
def _with_source(raw: DataFrame) -> DataFrame:
    F = _F()
    cols = set(raw.columns)
    headers = F.col("headers") if "headers" in cols else F.lit(None)
    return raw.select(
        F.col("value").alias("_value"),
        F.coalesce(headers.cast(HEADERS_TYPE), F.array().cast(HEADERS_TYPE)).alias("_headers"),
        F.format_string("%s[%s]@%s", F.col("topic"), F.col("partition").cast("string"),
                        F.col("offset").cast("string")).alias("_source"),
    )


def _replace_err(df: DataFrame, *more: Column) -> DataFrame:
    """``_err`` := the first non-null of ``_err`` and ``more`` (evaluated in one stage)."""
    F = _F()
    return df.withColumn("_err", F.coalesce(F.col("_err"), *more))


def _decode(raw: DataFrame, kind: str, n_attrs: int = 0) -> DataFrame:
    """Raw records of one kind -> common columns, kind-specific ones and ``_err``.

    Common: ``_value``, ``_headers``, ``_source``, ``_avro`` (bool), ``node``, ``client``,
    ``id``. Event: ``attrs`` (map of Avro union structs, keys in the record's order),
    ``payload``. Subscription: ``wtext`` (text form), ``wjson`` (variant array) and ``where``
    (as written). Each stage is its own ``select`` so that no expression is copied into
    another.
    """
    from pyspark.sql.avro.functions import from_avro

    F = _F()
    # The JSON rules of Python's json module: a repeated key keeps its last value.
    for key in ("spark.sql.mapKeyDedupPolicy", "spark.sql.variant.allowDuplicateKeys"):
        raw.sparkSession.conf.set(key, SESSION_CONF[key])
    schema_name = _RAW_SCHEMAS[kind]
    what = f"raw {kind}"
    df = _with_source(raw)
    value = F.col("_value")
    is_avro = F.coalesce(F.substring(value, 1, 2) == F.lit(bytearray(b"\xc3\x01")),
                         F.lit(False))
    header_ok = F.coalesce(F.substring(value, 1, 10) == _header(schema_name), F.lit(False))
    rec = from_avro(F.expr("substring(_value, 11)"), _schema_json(schema_name),
                    {"mode": "PERMISSIVE"})
    as_text = value.cast("string")
    text = F.when(as_text.startswith("\ufeff"), F.expr("substring(cast(_value as string), 2)"))\
        .otherwise(as_text)
    df = df.select("*", is_avro.alias("_avro"), header_ok.alias("_hdr_ok"))
    df = df.select("*", F.when(F.col("_avro") & F.col("_hdr_ok"), rec).alias("_rec"),
                   F.when(~F.col("_avro"), text).alias("_text"))
    typed_schema = "struct<" + ",".join(f"{k}:{t}" for k, t in _TYPED[kind].items()) + ">"
    # A second, typed reading of the same text: the keys of ``attrs`` in their order and
    # the values' text, and the string fields without a variant cast each.
    df = df.select("*", F.try_parse_json(F.col("_text")).alias("_v"),
                   F.from_json(F.col("_text"), typed_schema).alias("_j"))
    df = df.select("*", F.try_variant_get(F.col("_v"), "$", "map<string,variant>").alias("_top"))
    top = F.col("_top")

    def jfield(name: str) -> Column:
        return F.try_element_at(top, F.lit(name))

    def jtype(name: str) -> Column:
        return _vtype(jfield(name))

    def jstr(name: str) -> Column:
        typed = F.col("_j")[name] if name in _TYPED[kind] else F.lit(None).cast("string")
        return F.when(jtype(name) == "STRING",
                      F.coalesce(typed, F.try_variant_get(jfield(name), "$", "string")))

    fields = _RAW_FIELDS[kind]
    allowed = (*fields, "payload") if kind == "event" else fields
    # The first key not allowed / the first field absent, in order (array_except keeps the
    # order of its first argument): no lambda, which Spark would evaluate interpreted.
    unknown = F.try_element_at(
        F.array_except(F.map_keys(top), _str_array((*allowed, "op"))), F.lit(1))
    missing = F.try_element_at(F.array_except(_str_array(fields), F.map_keys(top)), F.lit(1))
    empty = F.coalesce(F.length(value) == 0, F.lit(True))
    json_err = _first(
        (empty, _err(f"{what}: empty message", "value", None)),
        (~F.is_valid_utf8(value.cast("string")),
         _err(f"{what}: neither Avro single-object (no C3 01 marker) nor UTF-8 JSON", "value",
              F.hex(F.substring(value, 1, 64)))),
        (F.col("_v").isNull(),
         _err(f"{what}: neither Avro single-object (no C3 01 marker) nor JSON", "value",
              F.substring(F.col("_text"), 1, 120))),
        # Spark's JSON readers stop after the first value; Python's json refuses text after
        # it. Wrapped in brackets, such a text is no longer one valid JSON array.
        (F.json_array_length(F.concat(F.lit("["), F.col("_text"), F.lit("]"))).isNull(),
         _err(f"{what}: more text after the JSON value (not one JSON document)", "value",
              F.substring(F.col("_text"), 1, 120))),
        (top.isNull(),
         _err(F.concat(F.lit(f"{what}: a JSON object is expected, got "),
                       F.lower(_vtype(F.col("_v")))), "value",
              F.substring(F.col("_text"), 1, 120))),
        (jfield("op").isNotNull() & ~F.coalesce(jstr("op") == _RAW_OPS[kind], F.lit(False)),
         _err(F.concat(F.lit(f"{what}: op must be '{_RAW_OPS[kind]}' (or absent), got "),
                       F.to_json(jfield("op"))), "op", F.to_json(jfield("op")))),
        (unknown.isNotNull(),
         _err(F.concat(F.lit(f"{what}: unknown field "), _q(unknown),
                       F.lit(f" (fields: {', '.join(allowed)})")), unknown,
              F.to_json(F.try_element_at(top, unknown)))),
        (missing.isNotNull(),
         _err(F.concat(F.lit(f"{what}: missing field "), _q(missing)), missing, None)),
    )
    rec_c = F.col("_rec")
    fp = F.lower(F.hex(F.substring(value, 3, 8)))
    avro_err = _first(
        (F.length(value) < 10,
         _err(F.concat(F.lit(f"{what}: "), F.length(value).cast("string"),
                       F.lit(" bytes are too short for Avro single-object")),
              "value", F.hex(value))),
        (~F.col("_hdr_ok"),
         _err(F.concat(F.lit(f"{what}: an Avro message of another schema than {schema_name} "
                             "(fingerprint "), fp, F.lit(")")), "fingerprint", fp)),
        (rec_c.isNull() | rec_c["node"].isNull(),
         _err(f"{what}: the {schema_name} body does not decode", "value",
              F.hex(F.substring(value, 1, 64)))),
    )
    avro = F.col("_avro")
    node = F.when(avro, rec_c["node"]).otherwise(jstr("node"))
    client = F.when(avro, rec_c["client"]).otherwise(jstr("client"))
    ident = F.when(avro, rec_c["id"]).otherwise(jstr("id"))
    cols = [node.alias("node"), client.alias("client"), ident.alias("id"),
            F.when(avro, avro_err).otherwise(json_err).alias("_err")]
    if kind == "event":
        cols += [F.try_variant_get(jfield("attrs"), "$", "map<string,variant>").alias("_am"),
                 F.col("_j")["attrs"].alias("_tm"),
                 jtype("payload").alias("_pt"),
                 jstr("payload").alias("_ps")]
    elif kind == "subscription":
        cols += [jtype("where").alias("_wt"), jstr("where").alias("_ws"),
                 F.when(jstr("where").isNull(), F.to_json(jfield("where"))).alias("_wj"),
                 jfield("where").alias("_wv")]
    df = df.select("*", *cols)

    if kind == "event":
        df = df.select("*", F.coalesce(F.array_distinct(F.map_keys(F.col("_tm"))),
                                       F.map_keys(F.col("_am"))).alias("_keys"))
        am, tm = F.col("_am"), F.col("_tm")

        # A repeated key: its last text (a lambda, so only then).
        dups = F.size(F.col("_keys")) != F.size(tm)

        def member(k: Column) -> Column:
            vk = F.try_element_at(am, k)
            t = _vtype(vk)
            last_text = F.when(dups, F.try_element_at(
                F.map_values(F.map_filter(tm, lambda kk, _v: kk == k)), F.lit(-1))
            ).otherwise(F.try_element_at(tm, k))
            text_v = F.coalesce(last_text, vk.cast("string"))
            # The text of an integer or a string token is exactly its value; casting the
            # variant instead would build a Cast (and a SQLConf) per value.
            return F.struct(
                t.alias("t"),
                F.when(t == "BIGINT", F.coalesce(last_text.try_cast("bigint"),
                                                 F.try_variant_get(vk, "$", "bigint")))
                .alias("member0"),
                F.when(_is_num_type(t) & (t != "BIGINT"), text_v.try_cast("double"))
                .alias("member1"),
                F.when(t == "STRING", F.coalesce(last_text,
                                                 F.try_variant_get(vk, "$", "string")))
                .alias("member2"))

        def strip(m: Column) -> Column:
            return F.struct(m["member0"].alias("member0"), m["member1"].alias("member1"),
                            m["member2"].alias("member2"))

        def is_bad(m: Column) -> Column:
            return ~_is_num_type(m["t"]) & (m["t"] != "STRING")

        # Up to n_attrs keys (every valid event: one per attribute of the space), the members
        # are built position by position in generated code; a lambda over an array of
        # structs runs interpreted, at a SQLConf per element read (Spark 4.2), so it is
        # only the fallback for more keys than that.
        keys = F.col("_keys")
        n_keys = F.size(keys)
        n_attrs = max(n_attrs, 1)
        unrolled = [member(F.get(keys, i)) for i in range(n_attrs)]
        few = (n_keys <= n_attrs) & (n_keys >= 0)
        df = df.select("*", F.when(few, F.slice(F.array(*unrolled), 1, n_keys))
                       .otherwise(F.transform(keys, member)).alias("_members"))
        members = F.col("_members")
        any_bad = F.when(few, F.coalesce(*[
            F.when(F.get(members, i).isNotNull() & is_bad(F.get(members, i)), F.lit(True))
            for i in range(n_attrs)], F.lit(False))).otherwise(F.exists(members, is_bad))
        bad = F.when(any_bad, F.try_element_at(F.filter(members, is_bad), F.lit(1)))
        bad_k = F.get(keys, F.array_position(members, bad) - 1)
        bad_j = F.to_json(F.try_element_at(am, bad_k))
        json_attrs = F.map_from_arrays(keys, F.when(few, F.slice(F.array(*[
            strip(F.get(members, i)) for i in range(n_attrs)]), 1, n_keys))
            .otherwise(F.transform(members, strip)))
        kind_err = _first(
            (~avro & am.isNull(),
             _err(F.concat(F.lit("raw event: attrs must be an object, got "),
                           F.to_json(jfield("attrs"))), "attrs", F.to_json(jfield("attrs")))),
            (~avro & bad.isNotNull(),
             _err(F.concat(F.lit("raw event: attrs["), _q(bad_k),
                           F.lit("] must be a number or a string, got "), bad_j),
                  F.concat(F.lit("attrs."), bad_k), bad_j)),
            (~avro & F.col("_pt").isNotNull() & (F.col("_pt") != "STRING"),
             _err(F.concat(F.lit("raw event: payload must be a string, got "),
                           F.to_json(jfield("payload"))), "payload",
                  F.to_json(jfield("payload")))),
        )
        df = df.select(
            "*",
            F.when(avro, rec_c["attrs"]).otherwise(json_attrs).alias("attrs"),
            F.when(avro, rec_c["payload"])
            .otherwise(F.coalesce(F.encode(F.col("_ps"), "UTF-8"), F.lit(bytearray())))
            .alias("payload"),
            kind_err.alias("_kerr"))
    elif kind == "subscription":
        wt = F.col("_wt")
        avro_where = rec_c["where"]
        df = df.select("*", F.coalesce(F.ltrim(avro_where).startswith("["), F.lit(False))
                       .alias("_aj"), F.try_parse_json(avro_where).alias("_awv"))
        aj = F.col("_aj")
        kind_err = _first(
            (~avro & (wt != "STRING") & ~wt.startswith("ARRAY"),
             _err(F.concat(F.lit("raw subscription: where must be a string or a list of "
                                 "predicates, got "), F.col("_wj")), "where", F.col("_wj"))),
            (avro & aj & ~F.coalesce(_vtype(F.col("_awv")).startswith("ARRAY"), F.lit(False)),
             _err("raw subscription: where starts with '[' but is not a JSON list", "where",
                  avro_where)),
        )
        df = df.select(
            "*",
            F.when(avro, F.when(~aj, avro_where)).otherwise(F.col("_ws")).alias("wtext"),
            F.when(avro, F.when(aj, F.col("_awv")))
            .otherwise(F.when(wt.startswith("ARRAY"), F.col("_wv"))).alias("wjson"),
            F.when(avro, avro_where).otherwise(F.coalesce(F.col("_ws"), F.col("_wj")))
            .alias("where"),
            kind_err.alias("_kerr"))
    else:
        df = df.select("*", F.lit(None).cast(_ERR_TYPE).alias("_kerr"))
    names_err = _first(
        *[(~F.coalesce(F.col(n).rlike(_NAME_RE), F.lit(False)),
           _err(F.concat(F.lit(f"{what}: {n} must be a non-empty name of letters, digits, "
                               "'_' and '-' (it is part of a topic name), got "),
                         F.coalesce(_q(F.col(n)), F.lit("None"))), n, F.col(n)))
          for n in ("node", "client")],
        (F.coalesce(F.length(F.col("id")) == 0, F.lit(True)),
         _err(F.concat(F.lit(f"{what}: id must be a non-empty string, got "),
                       F.coalesce(_q(F.col("id")), F.lit("None"))), "id", F.col("id"))),
    )
    df = _replace_err(df, F.col("_kerr"), names_err)
    keep = [c for c in df.columns if c in ("_value", "_headers", "_source", "_avro", "_err",
                                           "node", "client", "id", "attrs", "payload",
                                           "wtext", "wjson", "where")]
    return df.select(*keep)


def _node_topic(node: Column, topics: Topics, suffix: str) -> Column:
    F = _F()
    return F.concat(F.lit(f"{topics.prefix}.node."), node, F.lit(f".{suffix}"))


def _topic_err(topic: Column) -> Column:
    F = _F()
    return _first((F.length(topic) > MAX_TOPIC_LENGTH,
                   _err(F.concat(F.lit("node "), _q(F.col("node")),
                                 F.lit(f" makes a topic name longer than Kafka's "
                                       f"{MAX_TOPIC_LENGTH} characters")),
                        "node", F.col("node"))))


def _with_topic(df: DataFrame, topics: Topics, suffix: str) -> DataFrame:
    F = _F()
    df = df.withColumn("_topic", _node_topic(F.col("node"), topics, suffix))
    return _replace_err(df, _topic_err(F.col("_topic")))


def _finish(df: DataFrame, topics: Topics, topic: Column, value: Column,
            headers: Column) -> DataFrame:
    """One sink record per input row: the mapped record, or a DeadLetter when ``_err`` is set.

    A projection, not a filter and a union: a filter on ``_err`` would be pushed down
    through every stage by the optimizer, inlining each stage's expressions into the next.
    """
    from pyspark.sql.avro.functions import to_avro

    F = _F()
    # Every check builds its reason; should one come out null (a null operand of concat),
    # the dead letter still says something rather than carry a null header.
    reason = F.coalesce(F.col("_err.reason"), F.lit("unusable record"))
    hmap = F.map_from_entries(F.transform(F.col("_headers"), lambda h: F.struct(
        h["key"].alias("key"), F.coalesce(h["value"], F.lit(bytearray())).alias("value"))))
    body = to_avro(F.struct(
        _nn("_source").alias("source"), reason.alias("reason"),
        F.col("_err.field").alias("field"), F.col("_err.value").alias("value"),
        F.coalesce(F.col("_value"), F.lit(bytearray())).alias("raw"),
        F.coalesce(hmap, F.create_map().cast("map<string,binary>")).alias("headers")),
        _schema_json("DeadLetter"))
    dead_headers = F.array(
        F.struct(F.lit(HEADER_DLQ_REASON).alias("key"),
                 F.encode(reason, "UTF-8").alias("value")),
        F.struct(F.lit(HEADER_DLQ_SOURCE).alias("key"),
                 F.encode(F.col("_source"), "UTF-8").alias("value")))
    ok = F.col("_err").isNull()
    return df.select(
        F.when(ok, topic).otherwise(F.lit(topics.deadletter)).alias("topic"),
        F.lit(None).cast("binary").alias("key"),
        F.when(ok, value).otherwise(F.concat(_header("DeadLetter"), body)).alias("value"),
        F.when(ok, headers.cast(HEADERS_TYPE)).otherwise(dead_headers).alias("headers"))


# -- events -----------------------------------------------------------------------------------
def _with_event_label(space: ContentSpace, df: DataFrame) -> DataFrame:
    """Add ``_label`` (bigint) of ``attrs`` and its error to ``_err``, as ``event_label``."""
    F = _F()
    names = [a.name for a in space.attributes]
    attrs = F.col("attrs")
    df = df.select("*", F.try_element_at(F.array_except(F.map_keys(attrs), _str_array(names)),
                                         F.lit(1)).alias("_extra"),
                   *[F.try_element_at(attrs, F.lit(a.name)).alias(f"_a{i}")
                     for i, a in enumerate(space.attributes)])
    vals = []
    for i, a in enumerate(space.attributes):
        e = F.col(f"_a{i}")
        if isinstance(a, DiscreteAttribute):
            vals.append(e["member2"].alias(f"_x{i}"))
        else:
            vals.append(F.coalesce(e["member0"].cast("double"), e["member1"]).alias(f"_x{i}"))
    df = df.select("*", *vals)
    extra = F.col("_extra")
    checks: list[tuple[Column, Column]] = [
        (extra.isNotNull(),
         _err(F.concat(F.lit("unknown attribute "), _q(extra),
                       F.lit(f" (the space has {names})")), extra, None)),
    ]
    cells = []
    for i, a in enumerate(space.attributes):
        e, x = F.col(f"_a{i}"), F.col(f"_x{i}")
        name = repr(a.name)
        checks.append((e.isNull(), _err(f"event lacks attribute {name}", a.name, None)))
        shown = F.coalesce(e["member0"].cast("string"), e["member1"].cast("string"))
        if isinstance(a, DiscreteAttribute):
            cell = F.try_element_at(_discrete_index(a), x)
            checks += [
                (x.isNull(), _err(F.concat(F.lit(f"attribute {name} is discrete: value must be "
                                                 "a string, got "), shown), a.name, shown)),
                (cell.isNull(), _err(F.concat(F.lit(f"attribute {name}: unknown value "),
                                              _q(x)), a.name, x)),
            ]
        else:
            checks += [
                # A number beyond float64 (1e400; Python reads it as inf) fills no member.
                (x.isNull() & e["member2"].isNull(),
                 _err(f"attribute {name}: value is beyond the float64 range (infinite)",
                      a.name, "inf")),
                (x.isNull(), _err(F.concat(F.lit(f"attribute {name}: value must be a number, "
                                                 "got "), _q(e["member2"])),
                                  a.name, e["member2"])),
                (F.isnan(x), _err(f"attribute {name}: value is NaN", a.name, "NaN")),
                ((x < a.low) | (x > a.high),
                 _err(F.concat(F.lit(f"attribute {name}: value "), shown,
                               F.lit(f" is outside the domain [{a.low}, {a.high}]")),
                      a.name, shown)),
            ]
            cell = _cell(a, x)
        cells.append(cell.alias(f"_c{i}"))
    df = df.select("*", *cells)
    label = _long_lit(space.app_prefix)
    for i, shift in enumerate(space.shifts):
        label = label.bitwiseOR(F.shiftleft(F.coalesce(F.col(f"_c{i}"), F.lit(0).cast("bigint")),
                                            shift))
    df = df.select("*", label.alias("_label"))
    return _replace_err(df, _first(*checks))


def _raw_event_wire_schema() -> str:
    """The RawEvent schema with ``attrs`` as an array of ``{key, value}`` records.

    Avro writes a map as blocks of ``key value`` pairs and an array of such records as
    blocks of the same bytes, so both encode alike; an array keeps the keys' order, which
    ``to_avro`` of a map (a Java ``HashMap`` inside) does not.
    """
    schema = json.loads(_schema_json("RawEvent"))
    for f in schema["fields"]:
        if f["name"] == "attrs":
            f["type"] = {"type": "array", "items": {
                "type": "record", "name": "AttrEntry", "fields": [
                    {"name": "key", "type": "string"},
                    {"name": "value", "type": f["type"]["values"]}]}}
    return json.dumps(schema)


def map_events(space: ContentSpace, raw: DataFrame, topics: Topics, *,
               fast: bool | None = None) -> DataFrame:
    """Raw events -> events on ``dls.node.N.publish`` (and dead letters).

    The value is the SDK's RawEvent (``encode_raw_event``) of the input; the headers are
    ``dls-label`` (8 bytes big-endian), ``dls-origin`` (``NODE/CLIENT``) and
    ``dls-event-id``, as :meth:`connectors.client.Client.publish` writes them.

    ``fast``: run through the project's Java UDFs (:func:`_hybrid`); None does when the
    session has their jar, False never (the Catalyst expressions alone, in the plan).
    """
    return _hybrid("event", _map_events, space, raw, topics, fast)


def _map_events(space: ContentSpace, raw: DataFrame, topics: Topics) -> DataFrame:
    from pyspark.sql.avro.functions import to_avro

    F = _F()
    decoded = _decode(raw, "event", len(space.attributes))
    df = _with_topic(_with_event_label(space, decoded), topics, "publish")
    entries = F.coalesce(F.map_entries(F.col("attrs")),
                         F.array().cast(f"array<struct<key:string,value:{_ATTR_TYPE}>>"))
    body = to_avro(F.struct(_nn("node"), _nn("client"), _nn("id"), entries.alias("attrs"),
                            _nn("payload", bytearray())), _raw_event_wire_schema())
    value = F.when(F.col("_avro"), F.col("_value")).otherwise(
        F.concat(_header("RawEvent"), body))
    return _finish(
        df, topics, F.col("_topic"), value,
        F.array(
            F.struct(F.lit(HEADER_LABEL).alias("key"), _be8(F.col("_label")).alias("value")),
            F.struct(F.lit(HEADER_ORIGIN).alias("key"),
                     F.encode(F.concat_ws("/", F.col("node"), F.col("client")), "UTF-8")
                     .alias("value")),
            F.struct(F.lit(HEADER_EVENT_ID).alias("key"),
                     F.encode(F.col("id"), "UTF-8").alias("value"))))


# -- subscriptions: predicates ----------------------------------------------------------------
def _text_value(tok: Column) -> Column:
    """A value token of the text form -> ``struct<k, n, s>`` (k: num, str, nan, inf, kw)."""
    F = _F()
    low = F.lower(tok)
    is_num = tok.rlike(f"^{_NUM}$")
    is_str = tok.startswith('"') | tok.startswith("'")
    inner = F.regexp_replace(F.substring(tok, F.lit(2), F.length(tok) - 2), r"\\(.)", "$1")
    k = (F.when(is_num, "num").when(is_str, "str")
         .when(low.isin("nan"), "nan").when(low.isin("inf", "infinity"), "inf")
         .when(low.isin("and", "between", "in"), "kw").otherwise("str"))
    n = F.when(is_num, tok.try_cast("double"))
    s = F.when(is_str, inner).otherwise(tok)
    return F.struct(k.alias("k"), n.alias("n"), s.alias("s"))


def _with_fast_path(space: ContentSpace, df: DataFrame) -> DataFrame:
    """Add ``_fast`` and, per numeric attribute i, its interval ``_fk{i}``.

    ``_fast``: the subscription is in the text form and every predicate compares one
    numeric attribute of the space (at most once each) with finite numbers, a 'between' in
    order. Such a subscription's intervals are read from the regular expression's groups
    position by position in generated code, and the lambdas of the general path (which
    Spark runs interpreted, at a SQLConf per array element read) get empty arrays.
    """
    F = _F()
    numeric = [a for a in space.attributes if not isinstance(a, DiscreteAttribute)]
    n_max = len(numeric)
    n = F.size(F.col("_t_attr"))

    def at(g: str, j: int) -> Column:
        return F.get(F.col(g), j)

    def number(tok: Column) -> Column:
        # A value token of the predicate pattern is a number exactly when it starts like one
        # (strings start with a quote, words with a letter or '_'): no regular expression.
        return F.when(F.substring(tok, 1, 1).isin(*"+-.0123456789"), tok.try_cast("double"))

    # Each value once, in a column of its own (a CASE WHEN's branches are not shared).
    df = df.select("*", *[
        c for j in range(n_max) for c in (
            number(F.when(at("_t_lo", j) != "", at("_t_lo", j)).otherwise(at("_t_val", j)))
            .alias(f"_fx{j}"), number(at("_t_hi", j)).alias(f"_fy{j}"))])

    def finite(x: Column) -> Column:
        return x.isNotNull() & (F.abs(x) < F.lit(math.inf))

    checks = []
    for j in range(n_max):
        v0, v1 = F.col(f"_fx{j}"), F.col(f"_fy{j}")
        between = at("_t_lo", j) != ""
        ok = (at("_t_attr", j).isin(*[a.name for a in numeric]) & (at("_t_list", j) == "")
              & finite(v0) & F.when(between, finite(v1) & (v0 <= v1)).otherwise(F.lit(True)))
        for k in range(j):
            ok = ok & (at("_t_attr", j) != at("_t_attr", k))
        checks.append((n <= j) | F.coalesce(ok, F.lit(False)))
    fast = F.col("_t_ok") & F.col("wjson").isNull() & (n <= n_max)
    for c in checks:
        fast = fast & c
    df = df.select("*", F.coalesce(fast, F.lit(False)).alias("_fast"))
    # Stage by stage (a column each), so that no expression is copied into the next.
    num = {i: a for i, a in enumerate(space.attributes) if not isinstance(a, DiscreteAttribute)}
    idx = list(num)
    df = df.select("*", *[
        F.when(F.col("_fast"), F.array_position(F.col("_t_attr"), F.lit(num[i].name))
               .cast("int") - 1).alias(f"_fp{i}") for i in idx])
    stage = []
    for i in idx:
        pos = F.col(f"_fp{i}")
        between = F.get(F.col("_t_lo"), pos) != ""
        v0 = F.when(between, F.get(F.col("_t_lo"), pos)).otherwise(F.get(F.col("_t_val"), pos))
        stage += [F.when(between, F.lit("between")).otherwise(F.get(F.col("_t_op"), pos))
                  .alias(f"_fo{i}"), v0.try_cast("double").alias(f"_f0{i}"),
                  F.get(F.col("_t_hi"), pos).try_cast("double").alias(f"_f1{i}")]
    df = df.select("*", *stage)
    df = df.select("*", *[
        F.when(F.col(f"_fp{i}") >= 0, _interval(F.col(f"_fo{i}"), F.col(f"_f0{i}"),
                                                 F.col(f"_f1{i}"),
                                                 F.lit(None).cast("array<double>")))
        .alias(f"_fq{i}") for i in idx])
    df = df.select("*", *[
        F.when(F.col("_fast"), F.when(F.col(f"_fq{i}").isNull(), _domain(num[i]))
               .otherwise(_merge(_domain(num[i]), F.col(f"_fq{i}"))))
        .alias(f"_fk{i}") for i in idx])
    return df.drop(*[f"_f{x}{i}" for i in idx for x in ("p", "o", "0", "1", "q")],
                   *[f"_f{x}{j}" for j in range(n_max) for x in ("x", "y")])


def _with_text_predicates(space: ContentSpace, df: DataFrame) -> DataFrame:
    """Add ``_tpreds`` (predicate structs) and ``_terr`` from ``wtext`` (the text form).

    Also ``_fast`` and ``_fk{i}`` (:func:`_with_fast_path`); ``_tpreds`` is empty when
    ``_fast`` is set.
    """
    F = _F()
    wtext = F.col("wtext")
    groups = ("_t_attr", "_t_lo", "_t_hi", "_t_list", "_t_op", "_t_val")
    # The predicate pattern is long: it runs once (a regexp_replace that writes each match's
    # groups as a record "\x02g1\x01...\x01g6\x03"), and short patterns pick the records'
    # fields, unless the text holds those control characters itself.
    plain = ~wtext.rlike("[\\x01-\\x03]")
    record = "\x02" + "\x01".join(f"${i + 1}" for i in range(len(groups))) + "\x03"
    df = df.select("*", wtext.rlike(_WHERE_FULL).alias("_t_ok"), plain.alias("_t_plain"),
                   F.when(plain, F.regexp_replace(wtext, _WHERE_EACH, record)).alias("_t_rec"))

    def group(i: int) -> Column:
        field = "\\x02" + "[^\\x01\\x03]*\\x01" * i + "([^\\x01\\x03]*)"
        return (F.when(F.col("_t_plain"), F.regexp_extract_all(F.col("_t_rec"), F.lit(field),
                                                               F.lit(1)))
                .otherwise(F.regexp_extract_all(wtext, F.lit(_WHERE_EACH), F.lit(i + 1))))

    df = df.select("*", *[group(i).alias(g) for i, g in enumerate(groups)])
    df = _with_fast_path(space, df.drop("_t_plain", "_t_rec"))

    def pred(i: Column) -> Column:
        lo, hi = F.get(F.col("_t_lo"), i), F.get(F.col("_t_hi"), i)
        lst = F.get(F.col("_t_list"), i)
        toks = (F.when(lo != "", F.array(lo, hi))
                .when(lst != "", F.regexp_extract_all(lst, F.lit(_VAL_EACH), F.lit(1)))
                .otherwise(F.array(F.get(F.col("_t_val"), i))))
        opname = (F.when(lo != "", "between").when(lst != "", "in")
                  .otherwise(F.get(F.col("_t_op"), i)))
        return F.struct(F.get(F.col("_t_attr"), i).alias("attr"), opname.alias("op"),
                        F.transform(toks, _text_value).alias("vals"))

    n = F.size(F.col("_t_attr"))
    preds = F.when(F.col("_t_ok") & (n > 0) & ~F.col("_fast"),
                   F.transform(F.sequence(F.lit(0), n - 1), pred))
    df = df.select("*", F.coalesce(preds, F.array().cast(f"array<{_PRED_TYPE}>"))
                   .alias("_tpreds"))
    kw = F.try_element_at(F.filter(F.flatten(F.transform(F.col("_tpreds"), lambda p: p["vals"])),
                                   lambda v: v["k"] == "kw"), F.lit(1))
    err = _first(
        (~F.col("_t_ok"), _err(F.concat(F.lit("cannot read subscription text "), _q(wtext)),
                               "where", wtext)),
        (kw.isNotNull(), _err(F.concat(F.lit("expected a value, got keyword "), _q(kw["s"]),
                                       F.lit(" in subscription text "), _q(wtext)),
                              "where", wtext)),
    )
    return df.select("*", err.alias("_terr")).drop(*groups, "_t_ok")


def _json_value(x: Column) -> Column:
    F = _F()
    t = _vtype(x)
    k = F.when(_is_num_type(t), "num").when(t == "STRING", "str").otherwise("other")
    n = F.when(_is_num_type(t), x.cast("string").try_cast("double"))
    s = F.when(t == "STRING", F.try_variant_get(x, "$", "string")).otherwise(F.to_json(x))
    return F.struct(k.alias("k"), n.alias("n"), s.alias("s"))


def _with_json_predicates(df: DataFrame) -> DataFrame:
    """Add ``_jpreds`` and ``_jerr`` from ``wjson`` (the JSON list form)."""
    F = _F()
    items = F.try_variant_get(F.col("wjson"), "$", "array<variant>")

    def fields(p: Column) -> Column:
        pm = F.try_variant_get(p, "$", "map<string,variant>")

        def get(name: str) -> Column:
            return F.try_element_at(pm, F.lit(name))

        def text(name: str) -> Column:
            return F.when(_vtype(get(name)) == "STRING",
                          F.try_variant_get(get(name), "$", "string"))

        return F.struct(
            F.to_json(p).alias("shown"), pm.isNull().alias("not_obj"),
            text("attr").alias("attr"), text("op").alias("op"),
            F.to_json(get("attr")).alias("attr_j"), F.to_json(get("op")).alias("op_j"),
            F.array_sort(F.array_except(F.coalesce(F.map_keys(pm), F.array()),
                                        F.array(F.lit("attr"), F.lit("op")))).alias("keys"),
            get("low").alias("low"), get("high").alias("high"), get("value").alias("value"),
            F.try_variant_get(get("values"), "$", "array<variant>").alias("values"),
            F.to_json(get("values")).alias("values_j"))

    df = df.select("*", F.transform(items, fields).alias("_jf"))

    def pred(x: Column) -> Column:
        op = x["op"]
        raw_vals = (F.when(op == "between", F.array(x["low"], x["high"]))
                    .when(op == "in", x["values"]).otherwise(F.array(x["value"])))
        return F.struct(x["attr"].alias("attr"), op.alias("op"),
                        F.coalesce(F.transform(raw_vals, _json_value),
                                   F.array().cast(f"array<{_VAL_TYPE}>")).alias("vals"))

    def err(x: Column) -> Column:
        attr, op = x["attr"], x["op"]
        want = (F.when(op == "between", F.array(F.lit("high"), F.lit("low")))
                .when(op == "in", F.array(F.lit("values"))).otherwise(F.array(F.lit("value"))))
        return _first(
            (x["not_obj"], _err(F.concat(F.lit("a predicate must be an object, got "),
                                         x["shown"]), "where", x["shown"])),
            (F.coalesce(F.length(attr) == 0, F.lit(True)),
             _err(F.concat(F.lit("predicate attr must be a non-empty string, got "),
                           F.coalesce(x["attr_j"], F.lit("None"))), "attr", x["attr_j"])),
            (~F.coalesce(op.isin(*_OPS), F.lit(False)),
             _err(F.concat(F.lit("attribute "), _q(attr), F.lit(": unknown op "),
                           F.coalesce(x["op_j"], F.lit("None")),
                           F.lit(f" (one of {list(_OPS)})")), attr, x["op_j"])),
            (x["keys"] != want,
             _err(F.concat(F.lit("attribute "), _q(attr), F.lit(": op "), _q(op),
                           F.lit(" takes keys "), F.to_json(want), F.lit(", got "),
                           F.to_json(x["keys"])), attr, x["shown"])),
            ((op == "in") & F.coalesce(F.size(x["values"]) <= 0, F.lit(True)),
             _err(F.concat(F.lit("attribute "), _q(attr),
                           F.lit(": 'in' needs a non-empty list of values, got "),
                           x["values_j"]), attr, x["values_j"])),
        )

    jerr = F.try_element_at(F.filter(F.transform(F.col("_jf"), err), lambda e: e.isNotNull()),
                            F.lit(1))
    df = df.select("*", jerr.alias("_jerr"))
    preds = F.when(F.col("_jerr").isNull(), F.transform(F.col("_jf"), pred))
    return df.select("*", preds.alias("_jpreds")).drop("_jf")


# -- subscriptions: cells and labels ----------------------------------------------------------
def _piece(p: Column) -> Column:
    """One numeric predicate as an interval ``struct<lo, loc, hi, hic, vs>`` (vs: 'in')."""
    F = _F()
    op = p["op"]
    return _interval(op, F.get(p["vals"], 0)["n"], F.get(p["vals"], 1)["n"],
                     F.when(op == "in", F.transform(p["vals"], lambda v: v["n"])))


def _interval(op: Column, v0: Column, v1: Column, vs: Column) -> Column:
    """The interval of an operator and its first two values (``vs``: the 'in' list)."""
    F = _F()
    inf = math.inf
    lo = F.when(op.isin("between", "=", ">", ">="), v0).otherwise(F.lit(-inf))
    hi = F.when(op == "between", v1).when(op.isin("=", "<", "<="), v0).otherwise(F.lit(inf))
    return F.struct(lo.alias("lo"), (op != ">").alias("loc"), hi.alias("hi"),
                    (op != "<").alias("hic"), vs.alias("vs"))


def _domain(a: UniformAttribute | BreakpointAttribute) -> Column:
    """The whole domain of a numeric attribute as an interval (no predicate yet)."""
    F = _F()
    return F.struct(F.lit(a.low).alias("lo"), F.lit(True).alias("loc"),
                    F.lit(a.high).alias("hi"), F.lit(True).alias("hic"),
                    F.lit(None).cast("array<double>").alias("vs"))


def _merge(acc: Column, b: Column) -> Column:
    """Intersection of two intervals, as ``dls.predicates._intersect``."""
    F = _F()
    lo = (F.when(acc["lo"] > b["lo"], acc["lo"]).when(b["lo"] > acc["lo"], b["lo"])
          .otherwise(acc["lo"]))
    loc = (F.when(acc["lo"] > b["lo"], acc["loc"]).when(b["lo"] > acc["lo"], b["loc"])
           .otherwise(acc["loc"] & b["loc"]))
    hi = (F.when(acc["hi"] < b["hi"], acc["hi"]).when(b["hi"] < acc["hi"], b["hi"])
          .otherwise(acc["hi"]))
    hic = (F.when(acc["hi"] < b["hi"], acc["hic"]).when(b["hi"] < acc["hi"], b["hic"])
           .otherwise(acc["hic"] & b["hic"]))
    vs = (F.when(acc["vs"].isNull(), b["vs"]).when(b["vs"].isNull(), acc["vs"])
          .otherwise(F.array_intersect(acc["vs"], b["vs"])))
    return F.struct(lo.alias("lo"), loc.alias("loc"), hi.alias("hi"), hic.alias("hic"),
                    vs.alias("vs"))


def _with_cells(space: ContentSpace, df: DataFrame) -> DataFrame:
    """Add ``_cells{i}`` (sorted cell indexes per attribute) and ``_e{i}`` (errors)."""
    F = _F()
    preds = F.col("_preds")
    stage1 = []
    for i, a in enumerate(space.attributes):
        stage1.append(F.filter(preds, _attr_is(a.name)).alias(f"_m{i}"))
    df = df.select("*", *stage1)
    stage2, stage3, stage4 = [], [], []
    for i, a in enumerate(space.attributes):
        mine = F.col(f"_m{i}")
        name = repr(a.name)
        vals = F.flatten(F.transform(mine, lambda p: p["vals"]))
        if isinstance(a, DiscreteAttribute):
            bad_op = F.try_element_at(F.filter(mine, lambda p: ~p["op"].isin("=", "in")),
                                      F.lit(1))
            not_str = F.try_element_at(F.filter(vals, lambda v: v["k"] != "str"), F.lit(1))
            unknown = F.try_element_at(F.filter(vals, _value_not_in(a.values)), F.lit(1))
            allowed = F.aggregate(mine, F.array(*[F.lit(v) for v in a.values]),
                                  lambda acc, p: F.array_intersect(
                                      acc, F.transform(p["vals"], lambda x: x["s"])))
            stage2.append(allowed.alias(f"_d{i}"))
            shown = F.coalesce(not_str["s"], _fmt_num(not_str["n"]))
            stage3.append(_first(
                (bad_op.isNotNull(),
                 _err(F.concat(F.lit(f"attribute {name} is discrete: only '=' and 'in' apply, "
                                     "got "), _q(bad_op["op"])), a.name, bad_op["op"])),
                (not_str.isNotNull(),
                 _err(F.concat(F.lit(f"attribute {name} is discrete: values must be strings, "
                                     "got "), shown), a.name, shown)),
                (unknown.isNotNull(),
                 _err(F.concat(F.lit(f"attribute {name}: unknown value "), _q(unknown["s"])),
                      a.name, unknown["s"])),
                (F.size(F.col(f"_d{i}")) == 0,
                 _err(f"attribute {name}: the predicates can match nothing inside the domain",
                      a.name, None)),
            ).alias(f"_e{i}"))
            idx = _discrete_index(a)
            stage4.append(F.array_sort(F.transform(F.col(f"_d{i}"), _lookup(idx)))
                          .alias(f"_cells{i}"))
            continue
        slow = F.aggregate(F.transform(mine, _piece), _domain(a), _merge)
        stage2.append(F.when(F.col("_fast"), F.col(f"_fk{i}")).otherwise(slow).alias(f"_k{i}"))
        c = F.col(f"_k{i}")
        bad = F.try_element_at(F.filter(vals, lambda v: v["k"].isin("str", "other", "kw")),
                               F.lit(1))
        nan = F.exists(vals, lambda v: (v["k"] == "nan") | F.isnan(v["n"]))
        infinite = F.try_element_at(F.filter(vals, lambda v: (v["k"] == "inf") | (
            (v["k"] == "num") & v["n"].isin(math.inf, -math.inf))), F.lit(1))
        inverted = F.try_element_at(F.filter(mine, lambda p: (p["op"] == "between") & (
            F.get(p["vals"], 0)["n"] > F.get(p["vals"], 1)["n"])), F.lit(1))
        kept = F.filter(c["vs"], _inside(c))
        eff_lo = F.when(c["loc"], c["lo"]).otherwise(_next_up(c["lo"]))
        eff_hi = F.when(c["hic"], c["hi"]).otherwise(_next_down(c["hi"]))
        stage3 += [kept.alias(f"_v{i}"), eff_lo.alias(f"_lo{i}"), eff_hi.alias(f"_hi{i}")]
        shown_inf = F.coalesce(infinite["s"], _fmt_num(infinite["n"]))
        empty = ((F.col(f"_lo{i}") > F.col(f"_hi{i}"))
                 | (c["vs"].isNotNull() & (F.size(F.col(f"_v{i}")) == 0)))
        stage4.append(_first(
            (bad.isNotNull(),
             _err(F.concat(F.lit(f"attribute {name}: values must be numbers, got "),
                           F.coalesce(_q(bad["s"]), F.lit("?"))), a.name, bad["s"])),
            (nan, _err(f"attribute {name}: a value is NaN", a.name, "NaN")),
            (infinite.isNotNull(),
             _err(F.concat(F.lit(f"attribute {name}: values must be finite, got "), shown_inf),
                  a.name, shown_inf)),
            (inverted.isNotNull(),
             _err(F.concat(F.lit(f"attribute {name}: inverted range, low "),
                           _fmt_num(F.get(inverted["vals"], 0)["n"]), F.lit(" > high "),
                           _fmt_num(F.get(inverted["vals"], 1)["n"])), a.name, None)),
            (empty, _err(f"attribute {name}: the predicates can match nothing inside the domain",
                         a.name, None)),
        ).alias(f"_e{i}"))
    df = df.select("*", *stage2)
    df = df.select("*", *stage3)
    df = df.select("*", *stage4)
    last = []
    for i, a in enumerate(space.attributes):
        if isinstance(a, DiscreteAttribute):
            continue
        ok = F.col(f"_e{i}").isNull()
        in_set = F.array_sort(F.array_distinct(F.transform(F.col(f"_v{i}"), _cell_of(a))))
        rng = F.sequence(_cell(a, F.col(f"_lo{i}")), _cell(a, F.col(f"_hi{i}")))
        last.append(F.when(ok, F.when(F.col(f"_k{i}")["vs"].isNotNull(), in_set)
                           .otherwise(rng)).alias(f"_cells{i}"))
    return df.select("*", *last)


def _attr_is(name: str) -> Any:
    return lambda p: p["attr"] == name


def _value_not_in(values: tuple[str, ...]) -> Any:
    return lambda v: ~v["s"].isin(*values)


def _lookup(index: Column) -> Any:
    return lambda v: _F().try_element_at(index, v)


def _cell_of(a: UniformAttribute | BreakpointAttribute) -> Any:
    return lambda v: _cell(a, v)


def _inside(c: Column) -> Any:
    F = _F()
    return lambda v: (F.when(c["loc"], v >= c["lo"]).otherwise(v > c["lo"])
                      & F.when(c["hic"], v <= c["hi"]).otherwise(v < c["hi"]))


def _extend(cells: Column, shift: int) -> Any:
    F = _F()
    return lambda lab: F.transform(
        cells, lambda c: lab.bitwiseOR(F.shiftleft(c.cast("bigint"), shift)))


def _with_labels(space: ContentSpace, df: DataFrame) -> DataFrame:
    """Add ``_labels`` (sorted bigint labels) of ``_preds`` and its error to ``_err``."""
    F = _F()
    names = [a.name for a in space.attributes]
    df = _with_cells(space, df)
    unknown = F.try_element_at(F.filter(F.col("_preds"), lambda p: ~p["attr"].isin(*names)),
                               F.lit(1))
    # Decimal: a product of cell counts can pass 2**63 (a bigint would overflow), and it
    # never passes 2**64 (labels have 64 bits), well inside 38 digits.
    total = F.lit(1).cast("decimal(10,0)")
    for i in range(len(names)):
        total = total * F.size(F.col(f"_cells{i}")).cast("decimal(10,0)")
    df = df.select("*", total.alias("_total"))
    budget = space.filters.label_budget
    err = _first(
        (unknown.isNotNull(),
         _err(F.concat(F.lit("unknown attribute "), _q(unknown["attr"]),
                       F.lit(f" (the space has {names})")), unknown["attr"], unknown["attr"])),
        *[(F.col(f"_e{i}").isNotNull(), F.col(f"_e{i}")) for i in range(len(names))],
        (F.col("_total") > budget,
         _err(F.concat(F.lit("subscription expands to "), _count(F.col("_total")),
                       F.lit(f" labels, over the budget of {budget}")), "labels",
              _count(F.col("_total")))),
    )
    df = _replace_err(df, err)
    labels = F.array(_long_lit(space.app_prefix))
    for i, shift in enumerate(space.shifts):
        labels = F.flatten(F.transform(labels, _extend(F.col(f"_cells{i}"), shift)))
    df = df.select("*", F.when(F.col("_err").isNull(), labels).alias("_labels"))
    scratch = [c for c in df.columns if c.startswith(("_m", "_d", "_k", "_v", "_lo", "_hi",
                                                      "_e", "_cells")) and c[-1].isdigit()]
    return df.drop(*scratch, "_total")


def _count(total: Column) -> Column:
    """A whole-number decimal as digits."""
    return total.cast("decimal(38,0)").cast("string")


def _labels_bytes(labels: Column) -> Column:
    """Concatenated 8-byte big-endian labels (``connectors.topics.encode_labels``)."""
    F = _F()
    return F.unhex(F.array_join(F.transform(labels, lambda lab: F.lpad(F.hex(lab), 16, "0")),
                                ""))


def map_subscriptions(space: ContentSpace, raw: DataFrame, topics: Topics, *,
                      fast: bool | None = None) -> DataFrame:
    """Raw subscriptions -> ``LabelSubscription`` records on ``dls.node.N.subscribe``.

    The labels are those of :meth:`dls.predicates.Subscription.labels` (sorted, 8 bytes
    big-endian each); ``where`` is the subscription as it came. ``fast`` as
    :func:`map_events`.
    """
    return _hybrid("subscription", _map_subscriptions, space, raw, topics, fast)


def _map_subscriptions(space: ContentSpace, raw: DataFrame, topics: Topics) -> DataFrame:
    from pyspark.sql.avro.functions import to_avro

    F = _F()
    df = _with_topic(_decode(raw, "subscription"), topics, "subscribe")
    df = _with_json_predicates(_with_text_predicates(space, df))
    use_json = F.col("wjson").isNotNull()
    df = df.select("*", F.when(use_json, F.col("_jpreds")).otherwise(F.col("_tpreds"))
                   .alias("_preds"))
    df = _replace_err(df, F.when(use_json, F.col("_jerr")).otherwise(F.col("_terr")))
    df = _with_labels(space, df.withColumn(
        "_preds", F.when(F.col("_err").isNull(), F.col("_preds"))
        .otherwise(F.array().cast(f"array<{_PRED_TYPE}>"))))
    body = to_avro(F.struct(_nn("client"), _nn("id"),
                            F.coalesce(_labels_bytes(F.col("_labels")), F.lit(bytearray()))
                            .alias("labels"), F.col("where")),
                   _schema_json("LabelSubscription"))
    return _finish(df, topics, F.col("_topic"), F.concat(_header("LabelSubscription"), body),
                   F.array().cast(HEADERS_TYPE))


def map_unsubscriptions(space: ContentSpace, raw: DataFrame, topics: Topics) -> DataFrame:
    """Raw unsubscriptions -> ``LabelUnsubscription`` records on ``dls.node.N.unsubscribe``.

    ``space`` is not needed to map an unsubscription; it is taken for a uniform signature.
    """
    from pyspark.sql.avro.functions import to_avro

    F = _F()
    del space
    df = _with_topic(_decode(raw, "unsubscription"), topics, "unsubscribe")
    body = to_avro(F.struct(_nn("client"), _nn("id")), _schema_json("LabelUnsubscription"))
    return _finish(df, topics, F.col("_topic"), F.concat(_header("LabelUnsubscription"), body),
                   F.array().cast(HEADERS_TYPE))
