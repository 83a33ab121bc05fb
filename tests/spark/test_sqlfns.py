"""The SQL-text functions of the Catalyst mapping give what pyspark's Column API gives.

:mod:`spark.catalyst.sqlfns` writes each expression as Spark SQL text; here the same
expressions are built both ways and evaluated by Spark: literals of every type the mapping
uses (strings with quotes, backslashes, control and supplementary characters; doubles at
their extremes; ints at the int/bigint edges), operator precedence, lambdas, CASE and
struct fields.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from spark.catalyst import sqlfns as S
from spark.exceptions import MappingArgumentError

STRINGS = ["", "'", "\\", "\\'", "a'b\"c", "\x00\x01\x02\n\t", "\\x{10FFFF}+$", "\U0010ffff",
           "b\U0010ffff", "\U0001f600", "é߿ࠀ\uffff", "%_\\%", "--", "/*", "${x}", "\\u0041"]
FLOATS = [0.0, -0.0, 1.5, -1.5, 1e-05, 1e16, 5e-324, -5e-324, 1.7976931348623157e308,
          0.1, 45.0, math.inf, -math.inf]
INTS = [0, 1, -1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, -(2**63)]


def _one(spark: Any, *cols: Any) -> list[Any]:
    return list(spark.range(1).select(*cols).first())


def test_literals_round_trip(spark: Any) -> None:
    from pyspark.sql import functions as F

    values = [*STRINGS, *FLOATS, *INTS, True, False, None, bytearray(b"\xc3\x01"),
              bytearray()]
    got = list(S.select(spark.range(1), *[S.lit(v).alias(f"c{i}")
                                          for i, v in enumerate(values)]).first())
    want = _one(spark, *[F.lit(v) for v in values])
    assert got == want
    assert [type(x) for x in got] == [type(x) for x in want]
    assert math.copysign(1.0, got[STRINGS.__len__() + 1]) == -1.0  # -0.0 kept
    types = S.select(spark.range(1), *[S.lit(v).alias(f"c{i}")
                                       for i, v in enumerate(values)]).dtypes
    assert [t for _, t in types] == [t for _, t in spark.range(1).select(
        *[F.lit(v).alias(f"c{i}") for i, v in enumerate(values)]).dtypes]


def test_nan_literal(spark: Any) -> None:
    (x,) = S.select(spark.range(1), S.lit(math.nan).alias("x")).first()
    assert math.isnan(x)


def test_operators_bind_as_the_column_api_builds(spark: Any) -> None:
    from pyspark.sql import functions as F

    def exprs(M: Any) -> list[Any]:
        a, b, c = M.lit(7), M.lit(3), M.lit(-2)
        minus_c = -c
        t, f = M.lit(True), M.lit(False)
        return [
            a - (b - c), (a - b) - c, a - b * c, (a - b) * c, a / (b * c), a % b + c,
            -(a - b), -minus_c, ~(t & f), ~t | t, t & (f | t), (t & f) | t, t | (f & f),
            (a > b) == (b > c), ~(a == b), (a + b).isin(10, 11), ~(a > b).isNull(),
            ((a - b) > c).isNotNull(), a.bitwiseOR(b).bitwiseAND(c),
            a.bitwiseXOR(b.bitwiseOR(1)),
            a.bitwiseOR(b.bitwiseAND(c)), (a * 2 - b) % 4, 2 - a, 10 / a, M.lit("ab") == "ab",
            M.when(a > b, "x").when(a < b, "y").otherwise("z"), M.when(a < b, 1),
            M.lit("x'y").rlike("^x'"), M.lit("abc").startswith("ab"),
            M.struct(a.alias("p"), b.alias("q"))["q"] * 2,
            M.transform(M.array(a, b, c), lambda x, i: x * i - 1),
            M.aggregate(M.array(a, b), M.lit(0), lambda acc, x: acc + x),
            M.filter(M.array(a, b, c), lambda x: (x > 0) & ~(x == 3)),
            M.get(M.array(a, b), 1), M.concat_ws("-", M.lit("a"), M.lit("b")),
            M.regexp_replace(M.lit("a\\b"), "\\\\", "/"), M.array_join(M.array(
                M.lit("a"), M.lit("b")), ", "),
            M.lit(5).cast("bigint").bitwiseOR(M.shiftleft(M.lit(1).cast("bigint"), 40)),
            M.lit(1.5).try_cast("int"), M.lpad(M.hex(M.lit(255)), 4, "0"),
        ]

    assert list(S.select(spark.range(1), *[e.alias(f"c{i}") for i, e in enumerate(
        exprs(S))]).first()) == _one(spark, *exprs(F))


def test_struct_and_column_names(spark: Any) -> None:
    df = spark.createDataFrame([((1, "x"), 2)], "s struct<a:int,b:string>, `n` int")
    out = S.select(df, "*", S.struct(S.col("n"), S.col("s.b"), S.col("s")["a"].alias("z"))
                   .alias("t"))
    assert out.columns == ["s", "n", "t"]
    assert out.schema["t"].dataType.simpleString() == "struct<n:int,b:string,z:int>"
    assert S.with_column(out, "n", S.col("n") + 1).first()["n"] == 3
    assert S.with_column(out, "m", S.col("n") + 1).columns == ["s", "n", "t", "m"]


def test_misuse_is_refused() -> None:
    with pytest.raises(MappingArgumentError, match="truth value"):
        bool(S.lit(1) > 0)
    with pytest.raises(MappingArgumentError, match="isin"):
        S.col("a").isin()
    with pytest.raises(MappingArgumentError, match="bigint"):
        S.lit(1 << 64)
    with pytest.raises(MappingArgumentError, match="otherwise"):
        S.col("a").otherwise(1)


def test_a_session_with_raw_string_literals_is_refused(spark: Any) -> None:
    from connectors.topics import Topics
    from dls.space import ContentSpace
    from spark.mapping import map_unsubscriptions

    space = ContentSpace.from_spec({"attributes": [
        {"name": "x", "type": "numeric", "low": 0, "high": 1, "granules": 2}]})
    raw = spark.createDataFrame([], "value binary, topic string, partition int, offset long")
    key = "spark.sql.parser.escapedStringLiterals"
    spark.conf.set(key, "true")
    try:
        with pytest.raises(MappingArgumentError, match=key) as info:
            map_unsubscriptions(space, raw, Topics("p"))
        assert info.value.field == key
    finally:
        spark.conf.set(key, "false")
