"""A subscription's ``where`` -> predicate structs (``array<PRED_TYPE>``) and their error.

Two forms, as :class:`dls.predicates.Subscription` takes them: the text form
(``a between 1 and 2 and b in ('x', 'y') and c >= 3``), read with Java regular expressions,
and the JSON list of predicate objects (``[{"attr": "a", "op": ">=", "value": 3}]``), read
from a variant. A text ``where`` that compares numeric attributes with finite numbers also
gets its intervals straight from the pattern's groups (:func:`_with_fast_path`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dls.space import ContentSpace, DiscreteAttribute
from spark.catalyst.cells import domain, interval, merge
from spark.catalyst.columns import (
    PRED_TYPE,
    VAL_TYPE,
    error,
    first_error,
    fns,
    is_num_type,
    quoted,
    variant_type,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["with_json_predicates", "with_text_predicates"]

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


# -- the text form ----------------------------------------------------------------------------
def _text_value(tok: Column) -> Column:
    """A value token of the text form -> ``struct<k, n, s>`` (k: num, str, nan, inf, kw)."""
    F = fns()
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
    F = fns()
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
        F.when(F.col(f"_fp{i}") >= 0, interval(F.col(f"_fo{i}"), F.col(f"_f0{i}"),
                                               F.col(f"_f1{i}"),
                                               F.lit(None).cast("array<double>")))
        .alias(f"_fq{i}") for i in idx])
    df = df.select("*", *[
        F.when(F.col("_fast"), F.when(F.col(f"_fq{i}").isNull(), domain(num[i]))
               .otherwise(merge(domain(num[i]), F.col(f"_fq{i}"))))
        .alias(f"_fk{i}") for i in idx])
    return df.drop(*[f"_f{x}{i}" for i in idx for x in ("p", "o", "0", "1", "q")],
                   *[f"_f{x}{j}" for j in range(n_max) for x in ("x", "y")])


def with_text_predicates(space: ContentSpace, df: DataFrame) -> DataFrame:
    """Add ``_tpreds`` (predicate structs) and ``_terr`` from ``wtext`` (the text form).

    Also ``_fast`` and ``_fk{i}`` (:func:`_with_fast_path`); ``_tpreds`` is empty when
    ``_fast`` is set.
    """
    F = fns()
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
    df = df.select("*", F.coalesce(preds, F.array().cast(f"array<{PRED_TYPE}>"))
                   .alias("_tpreds"))
    kw = F.try_element_at(F.filter(F.flatten(F.transform(F.col("_tpreds"), lambda p: p["vals"])),
                                   lambda v: v["k"] == "kw"), F.lit(1))
    err = first_error(
        (~F.col("_t_ok"), error(F.concat(F.lit("cannot read subscription text "), quoted(wtext)),
                                "where", wtext)),
        (kw.isNotNull(), error(F.concat(F.lit("expected a value, got keyword "), quoted(kw["s"]),
                                        F.lit(" in subscription text "), quoted(wtext)),
                               "where", wtext)),
    )
    return df.select("*", err.alias("_terr")).drop(*groups, "_t_ok")


# -- the JSON list form -----------------------------------------------------------------------
def _json_value(x: Column) -> Column:
    F = fns()
    t = variant_type(x)
    k = F.when(is_num_type(t), "num").when(t == "STRING", "str").otherwise("other")
    n = F.when(is_num_type(t), x.cast("string").try_cast("double"))
    s = F.when(t == "STRING", F.try_variant_get(x, "$", "string")).otherwise(F.to_json(x))
    return F.struct(k.alias("k"), n.alias("n"), s.alias("s"))


def with_json_predicates(df: DataFrame) -> DataFrame:
    """Add ``_jpreds`` and ``_jerr`` from ``wjson`` (the JSON list form)."""
    F = fns()
    items = F.try_variant_get(F.col("wjson"), "$", "array<variant>")

    def fields(p: Column) -> Column:
        pm = F.try_variant_get(p, "$", "map<string,variant>")

        def get(name: str) -> Column:
            return F.try_element_at(pm, F.lit(name))

        def text(name: str) -> Column:
            return F.when(variant_type(get(name)) == "STRING",
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
                                   F.array().cast(f"array<{VAL_TYPE}>")).alias("vals"))

    def err(x: Column) -> Column:
        attr, op = x["attr"], x["op"]
        want = (F.when(op == "between", F.array(F.lit("high"), F.lit("low")))
                .when(op == "in", F.array(F.lit("values"))).otherwise(F.array(F.lit("value"))))
        return first_error(
            (x["not_obj"], error(F.concat(F.lit("a predicate must be an object, got "),
                                          x["shown"]), "where", x["shown"])),
            (F.coalesce(F.length(attr) == 0, F.lit(True)),
             error(F.concat(F.lit("predicate attr must be a non-empty string, got "),
                            F.coalesce(x["attr_j"], F.lit("None"))), "attr", x["attr_j"])),
            (~F.coalesce(op.isin(*_OPS), F.lit(False)),
             error(F.concat(F.lit("attribute "), quoted(attr), F.lit(": unknown op "),
                            F.coalesce(x["op_j"], F.lit("None")),
                            F.lit(f" (one of {list(_OPS)})")), attr, x["op_j"])),
            (x["keys"] != want,
             error(F.concat(F.lit("attribute "), quoted(attr), F.lit(": op "), quoted(op),
                            F.lit(" takes keys "), F.to_json(want), F.lit(", got "),
                            F.to_json(x["keys"])), attr, x["shown"])),
            ((op == "in") & F.coalesce(F.size(x["values"]) <= 0, F.lit(True)),
             error(F.concat(F.lit("attribute "), quoted(attr),
                            F.lit(": 'in' needs a non-empty list of values, got "),
                            x["values_j"]), attr, x["values_j"])),
        )

    jerr = F.try_element_at(F.filter(F.transform(F.col("_jf"), err), lambda e: e.isNotNull()),
                            F.lit(1))
    df = df.select("*", jerr.alias("_jerr"))
    preds = F.when(F.col("_jerr").isNull(), F.transform(F.col("_jf"), pred))
    return df.select("*", preds.alias("_jpreds")).drop("_jf")
