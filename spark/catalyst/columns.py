"""Small column helpers, types and wire tables shared by the Catalyst mapping's modules.

Error columns are ``struct<reason, field, value>`` (:data:`ERR_TYPE`): :func:`error` builds
one, :func:`first_error` picks the first whose check holds, :func:`replace_err` folds more
into a DataFrame's ``_err``. The exact float64 neighbours (:func:`next_up`,
:func:`next_down`) and the cell arithmetic (:func:`cell`) follow :mod:`dls.space` operation
by operation, so labels agree bit for bit with :mod:`dls.mapping`.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import TYPE_CHECKING, Any

from connectors.serde import SERDE
from dls.space import BreakpointAttribute, DiscreteAttribute, UniformAttribute
from spark.catalyst.sqlfns import with_column
from spark.session import SESSION_CONF

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "ATTR_TYPE",
    "ERR_TYPE",
    "HEADERS_TYPE",
    "PRED_TYPE",
    "VAL_TYPE",
    "be8",
    "cell",
    "discrete_index",
    "error",
    "hash_cell",
    "is_optional",
    "kind_of",
    "first_error",
    "fmt_num",
    "fns",
    "header_bytes",
    "is_num_type",
    "json_rules",
    "long_lit",
    "next_down",
    "next_up",
    "non_null",
    "quoted",
    "replace_err",
    "schema_json",
    "str_array",
    "string_cell",
    "value_cells",
    "variant_type",
]


HEADERS_TYPE = "array<struct<key:string,value:binary>>"
"""The Kafka source's and sink's type of the ``headers`` column."""
ATTR_TYPE = "struct<member0:bigint,member1:double,member2:string>"
"""An Avro RawEvent attribute value: the union long | double | string as Spark reads it."""
VAL_TYPE = "struct<k:string,n:double,s:string,r:string,f:string>"
"""A predicate value: its kind (num, str, nan, inf, kw, other), number and text, and how
Python shows it (``r``, its ``repr``; ``f``, its spelling in the text form)."""
PRED_TYPE = f"struct<attr:string,op:string,vals:array<{VAL_TYPE}>>"
"""A predicate of a subscription."""
ERR_TYPE = "struct<reason:string,field:string,value:string>"
"""Why a record is refused: the reason and the field and value at fault."""


def fns() -> ModuleType:
    """The functions that build the mapping's columns as Spark SQL text.

    :mod:`spark.catalyst.sqlfns`: ``pyspark.sql.functions``' names and rules, and a plan
    built without a py4j call per literal, operator and lambda.
    """
    from spark.catalyst import sqlfns

    return sqlfns


def json_rules(spark: SparkSession) -> None:
    """Set the JSON rules of Python's json module: a repeated key keeps its last value."""
    for key in ("spark.sql.mapKeyDedupPolicy", "spark.sql.variant.allowDuplicateKeys"):
        spark.conf.set(key, SESSION_CONF[key])


def quoted(c: Column) -> Column:
    """``'text'``, as Python's ``!r`` shows a string."""
    F = fns()
    return F.concat(F.lit("'"), c, F.lit("'"))


def error(reason: Column | str, field: Column | str | None,
          value: Column | str | None) -> Column:
    """An error struct (:data:`ERR_TYPE`) of a reason and the field and value at fault."""
    F = fns()

    def col(x: Column | str | None) -> Column:
        if x is None:
            return F.lit(None).cast("string")
        return F.lit(x) if isinstance(x, str) else x.cast("string")

    return F.struct(col(reason).alias("reason"), col(field).alias("field"),
                    col(value).alias("value"))


def first_error(*checks: tuple[Column, Column]) -> Column:
    """The error of the first check whose condition is true (null when none is)."""
    F = fns()
    return F.coalesce(*[F.when(cond, err) for cond, err in checks],
                      F.lit(None).cast(ERR_TYPE))


def replace_err(df: DataFrame, *more: Column) -> DataFrame:
    """``_err`` := the first non-null of ``_err`` and ``more`` (evaluated in one stage)."""
    F = fns()
    return with_column(df, "_err", F.coalesce(F.col("_err"), *more))


def str_array(values: tuple[str, ...] | list[str]) -> Column:
    """An ``array<string>`` literal."""
    F = fns()
    return F.array(*[F.lit(v) for v in values]).cast("array<string>")


def variant_type(v: Column) -> Column:
    """The type name of a variant (``BIGINT``, ``STRING``, ``ARRAY<...>``...)."""
    return fns().schema_of_variant(v)


def is_num_type(t: Column) -> Column:
    """True for the variant type name of a number."""
    return t.isin("BIGINT", "DOUBLE", "FLOAT") | t.startswith("DECIMAL")


def long_lit(value: int) -> Column:
    """A bigint literal holding the unsigned 64-bit ``value`` in two's complement."""
    return fns().lit(value - (1 << 64) if value >= 1 << 63 else value).cast("bigint")


def be8(label: Column) -> Column:
    """8 bytes, big-endian, of a bigint (two's complement: the unsigned label's bytes)."""
    F = fns()
    return F.unhex(F.lpad(F.hex(label), 16, "0"))


def non_null(name: str, empty: Any = "") -> Column:
    """Column ``name`` made non-null for a non-nullable Avro field.

    Rows that would hold a null there are dead letters, whose mapped value is never used.
    """
    F = fns()
    return F.coalesce(F.col(name), F.lit(empty)).alias(name)


def header_bytes(name: str) -> Column:
    """The 10-byte Avro single-object header of schema ``name``, as a binary literal."""
    return fns().lit(bytearray(SERDE.header(name)))


def schema_json(name: str) -> str:
    """The Avro schema ``name`` as JSON text (for ``from_avro``/``to_avro``)."""
    return json.dumps(SERDE.schema(name))


def fmt_num(v: Column) -> Column:
    """A number as text."""
    return v.cast("string")


# -- exact float64 neighbours -----------------------------------------------------------------
def _exponent(a: Column) -> Column:
    """floor(log2(a)) for a finite a > 0, exact (log2 is only a first guess)."""
    F = fns()
    e0 = F.floor(F.log2(a))
    e1 = F.when(F.pow(F.lit(2.0), e0) > a, e0 - 1).otherwise(e0)
    return F.when(F.pow(F.lit(2.0), e1 + 1) <= a, e1 + 1).otherwise(e1)


def next_up(x: Column) -> Column:
    """``math.nextafter(x, inf)`` of a finite double, bit for bit."""
    F = fns()
    a = F.abs(x)
    e = _exponent(a)
    ulp = F.pow(F.lit(2.0), F.greatest(e, F.lit(-1022)) - 52)
    below = F.when((a == F.pow(F.lit(2.0), e)) & (e > -1022), ulp / 2.0).otherwise(ulp)
    return (F.when(x == 0.0, F.lit(5e-324))
            .when(x > 0.0, x + ulp)
            .otherwise(x + below))


def next_down(x: Column) -> Column:
    """``math.nextafter(x, -inf)`` of a finite double, bit for bit."""
    return -next_up(-x)


# -- cells ------------------------------------------------------------------------------------
def cell(a: UniformAttribute | BreakpointAttribute, v: Column) -> Column:
    """Cell index (bigint) of an in-domain double, as :meth:`UniformAttribute.cell` etc."""
    F = fns()
    if isinstance(a, UniformAttribute):
        g = a.granules
        span = a.high - a.low
        raw = F.floor(((v - F.lit(a.low)) * F.lit(float(g))) / F.lit(span))
        return F.least(F.lit(g - 1).cast("bigint"), raw.cast("bigint"))
    bps = F.array(*[F.lit(float(b)) for b in a.breakpoints])
    return F.size(F.filter(bps, lambda b: b <= v)).cast("bigint")


def kind_of(a: Any) -> str:
    """The attribute's type word: ``numeric``, ``discrete``, ``string`` or ``hashed``."""
    if isinstance(a, UniformAttribute | BreakpointAttribute):
        return "numeric"
    if isinstance(a, DiscreteAttribute):
        return "discrete"
    if hasattr(a, "buckets"):
        return "hashed"
    return "string"


def is_optional(a: Any) -> bool:
    """True when the attribute is ``optional`` (an event may leave it out)."""
    return bool(getattr(a, "optional", False))


def value_cells(a: Any) -> int:
    """The number of value cells of an attribute (its absent cell, if optional, is this)."""
    k = kind_of(a)
    if isinstance(a, UniformAttribute):
        return a.granules
    if k == "discrete":
        return len(a.values)
    if k == "hashed":
        return int(a.buckets)
    return len(a.breakpoints) + 1


def string_cell(a: Any, v: Column) -> Column:
    """Cell (bigint) of a string value: the number of breakpoints ``<= v`` (binary order)."""
    F = fns()
    bps = F.array(*[F.lit(b) for b in a.breakpoints]).cast("array<string>")
    return F.size(F.filter(bps, lambda b: b <= v)).cast("bigint")


def hash_cell(a: Any, v: Column) -> Column:
    """Bucket (bigint) of a hashed attribute's string: ``crc32(utf8(v)) mod buckets``."""
    F = fns()
    return F.pmod(F.crc32(v.cast("binary")), F.lit(int(a.buckets)).cast("bigint"))


def discrete_index(a: DiscreteAttribute) -> Column:
    """A map from each value of a discrete attribute to its cell (bigint)."""
    F = fns()
    return F.map_from_arrays(F.array(*[F.lit(v) for v in a.values]),
                             F.array(*[F.lit(i).cast("bigint") for i in range(len(a.values))]))
