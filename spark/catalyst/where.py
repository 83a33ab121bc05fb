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

from dls.space import ContentSpace
from spark.catalyst.cells import domain, interval, merge
from spark.catalyst.columns import (
    PRED_TYPE,
    VAL_TYPE,
    error,
    first_error,
    fns,
    is_num_type,
    is_optional,
    kind_of,
    quoted,
    variant_type,
)
from spark.catalyst.preds import KEYWORDS, py_str, with_texts
from spark.catalyst.sqlfns import select

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["text_conjunction", "with_json_predicates", "with_text_predicates"]

_WORDCHAR = r"[A-Za-z0-9_.\-]"
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![A-Za-z_])"
_STR = r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'"
_WORD = r"[A-Za-z_][A-Za-z0-9_.\-]*+"
_VAL = f"(?:{_NUM}|{_STR}|{_WORD})"


def _kw(word: str) -> str:
    return f"(?i:{word})(?!{_WORDCHAR})"


def _pred(capture: bool) -> str:
    """The pattern of one predicate.

    With ``capture``, its groups: 1 attr, 2-3 between low/high, 4 'in' or 'not in', 5 its
    list, 6-7 comparison op/value, 8 the value of a 'prefix', 9 'exists' or 'missing'.
    """
    g = "(" if capture else "(?:"
    return (rf"{g}{_WORD})\s*(?:{_kw('between')}\s*{g}{_VAL})\s*{_kw('and')}\s*{g}{_VAL})"
            rf"|{g}{_kw('not')}\s*{_kw('in')}|{_kw('in')})\s*\(\s*{g}{_VAL}(?:\s*,\s*{_VAL})*)"
            rf"\s*\)|{g}<=|>=|!=|<|>|=)\s*{g}{_VAL})"
            rf"|{_kw('prefix')}\s*{g}{_VAL})"
            rf"|{g}{_kw('exists')}|{_kw('missing')}))")


_PRED = _pred(True)
_CONJ = rf"{_pred(False)}(?:\s*{_kw('and')}\s*{_pred(False)})*"
_ALT = rf"(?:\(\s*{_CONJ}\s*\)|{_CONJ})"
_WHERE_FULL = rf"^\s*(?:{_ALT}(?:\s*{_kw('or')}\s*{_ALT})*)?\s*$"
# Each alternative: 1 a conjunction in parentheses, or 2 one without.
_ALT_EACH = rf"(?:^\s*|\s*{_kw('or')}\s*)(?:\(\s*({_CONJ})\s*\)|({_CONJ}))"
_WHERE_EACH = rf"(?:^\s*|\s*{_kw('and')}\s*){_PRED}"
_VAL_EACH = f"({_VAL})"
_GROUPS = ("attr", "lo", "hi", "inop", "list", "op", "val", "pre", "exm")
OPS = ("between", "=", "!=", "<", "<=", ">", ">=", "in", "not in", "prefix", "exists",
       "missing")
"""The operators, in the order :data:`dls.predicates.OPS` lists them."""


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
         .when(low.isin(*KEYWORDS), "kw").otherwise("str"))
    n = F.when(is_num, tok.try_cast("double"))
    s = F.when(is_str, inner).otherwise(tok)
    return with_texts(F.struct(k.alias("k"), n.alias("n"), s.alias("s")))


def _with_fast_path(space: ContentSpace, df: DataFrame) -> DataFrame:
    """Add ``_fast`` and, per numeric attribute i, its interval ``_fk{i}``.

    ``_fast``: the subscription is in the text form and every predicate compares one
    numeric attribute of the space (at most once each) with finite numbers, a 'between' in
    order. Such a subscription's intervals are read from the regular expression's groups
    position by position in generated code, and the lambdas of the general path (which
    Spark runs interpreted, at a SQLConf per array element read) get empty arrays.
    """
    F = fns()
    numeric = [a for a in space.attributes if kind_of(a) == "numeric"]
    n_max = len(numeric)
    n = F.size(F.col("_t_attr"))

    def at(g: str, j: int) -> Column:
        return F.get(F.col(g), j)

    def number(tok: Column) -> Column:
        # A value token of the predicate pattern is a number exactly when it starts like one
        # (strings start with a quote, words with a letter or '_'): no regular expression.
        return F.when(F.substring(tok, 1, 1).isin(*"+-.0123456789"), tok.try_cast("double"))

    # Each value once, in a column of its own (a CASE WHEN's branches are not shared).
    df = select(df, "*", *[
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
              & (at("_t_pre", j) == "") & (at("_t_exm", j) == "") & (at("_t_op", j) != "!=")
              & finite(v0) & F.when(between, finite(v1) & (v0 <= v1)).otherwise(F.lit(True)))
        for k in range(j):
            ok = ok & (at("_t_attr", j) != at("_t_attr", k))
        checks.append((n <= j) | F.coalesce(ok, F.lit(False)))
    # One alternative, no parentheses; no optional attribute (whose absent cell depends on
    # whether a predicate names it).
    fast = (F.col("_t_ok") & F.col("_t_one") & F.col("wjson").isNull() & (n <= n_max)
            & F.lit(not any(is_optional(a) for a in space.attributes)))
    for c in checks:
        fast = fast & c
    df = select(df, "*", F.coalesce(fast, F.lit(False)).alias("_fast"))
    # Stage by stage (a column each), so that no expression is copied into the next.
    num = {i: a for i, a in enumerate(space.attributes) if kind_of(a) == "numeric"}
    idx = list(num)
    df = select(df, "*", *[
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
    df = select(df, "*", *stage)
    df = select(df, "*", *[
        F.when(F.col(f"_fp{i}") >= 0, interval(F.col(f"_fo{i}"), F.col(f"_f0{i}"),
                                                F.col(f"_f1{i}"),
                                                F.lit(None).cast("array<double>")))
        .alias(f"_fq{i}") for i in idx])
    df = select(df, "*", *[
        F.when(F.col("_fast"), F.when(F.col(f"_fq{i}").isNull(), domain(num[i]))
                .otherwise(merge(domain(num[i]), F.col(f"_fq{i}"))))
        .alias(f"_fk{i}") for i in idx])
    return df.drop(*[f"_f{x}{i}" for i in idx for x in ("p", "o", "0", "1", "q")],
                   *[f"_f{x}{j}" for j in range(n_max) for x in ("x", "y")])


def _groups(text: Column, plain: Column) -> list[Column]:
    r"""The predicate pattern's groups (:data:`_GROUPS`) of each predicate of ``text``.

    The pattern is long: it runs once (a regexp_replace that writes each match's groups as
    a record "\x02g1\x01...\x01g9\x03"), and short patterns pick the records' fields, unless
    the text holds those control characters itself (``plain`` false).
    """
    F = fns()
    record = "\x02" + "\x01".join(f"${i + 1}" for i in range(len(_GROUPS))) + "\x03"
    rec = F.regexp_replace(text, _WHERE_EACH, record)

    def group(i: int) -> Column:
        field = "\\x02" + "[^\\x01\\x03]*\\x01" * i + "([^\\x01\\x03]*)"
        return (F.when(plain, F.regexp_extract_all(rec, F.lit(field), F.lit(1)))
                .otherwise(F.regexp_extract_all(text, F.lit(_WHERE_EACH), F.lit(i + 1))))

    return [group(i) for i in range(len(_GROUPS))]


def _text_pred(g: Column, i: Column) -> Column:
    """Predicate ``i`` of an alternative's groups ``g`` (a struct of :data:`_GROUPS`)."""
    F = fns()

    def at(name: str) -> Column:
        return F.get(g[name], i)

    lo, inop, lst, pre, exm = at("lo"), at("inop"), at("list"), at("pre"), at("exm")
    toks = (F.when(lo != "", F.array(lo, at("hi")))
            .when(lst != "", F.regexp_extract_all(lst, F.lit(_VAL_EACH), F.lit(1)))
            .when(pre != "", F.array(pre))
            .when(exm != "", F.array().cast("array<string>"))
            .otherwise(F.array(at("val"))))
    opname = (F.when(lo != "", "between")
              .when(inop != "", F.when(F.lower(inop) == "in", "in").otherwise("not in"))
              .when(pre != "", "prefix").when(exm != "", F.lower(exm))
              .otherwise(at("op")))
    return F.struct(at("attr").alias("attr"), opname.alias("op"),
                    F.transform(toks, _text_value).alias("vals"))


def text_conjunction(text: Column) -> Column:
    """The predicates of a text ``where`` of one alternative without parentheses.

    As one alternative (``array<array<PRED_TYPE>>``): for the rows whose predicates the
    fast path did not build, when a refusal must name them.
    """
    F = fns()
    g = F.struct(*[c.alias(n) for c, n in zip(_groups(text, ~text.rlike("[\\x01-\\x03]")),
                                               _GROUPS, strict=True)])
    # The groups bound once to a lambda variable, which each predicate's fields read.
    return F.transform(F.array(g), lambda gs: F.transform(
        F.sequence(F.lit(0), F.size(gs["attr"]) - 1), lambda i: _text_pred(gs, i)))


def with_text_predicates(space: ContentSpace, df: DataFrame) -> DataFrame:
    """Add ``_talts`` (per alternative, its predicate structs) and ``_terr`` from ``wtext``.

    Also ``_fast`` and ``_fk{i}`` (:func:`_with_fast_path`); ``_talts`` is one empty
    alternative when ``_fast`` is set.
    """
    F = fns()
    wtext = F.col("wtext")
    names = tuple(f"_t_{g}" for g in _GROUPS)
    plain = ~wtext.rlike("[\\x01-\\x03]")
    df = select(df, "*", wtext.rlike(_WHERE_FULL).alias("_t_ok"), plain.alias("_t_plain"))
    paren = F.regexp_extract_all(wtext, F.lit(_ALT_EACH), F.lit(1))
    bare = F.regexp_extract_all(wtext, F.lit(_ALT_EACH), F.lit(2))
    df = select(df, "*", F.when(F.col("_t_ok"),
                                F.zip_with(paren, bare, lambda x, y: F.concat(x, y)))
                         .alias("_t_alts"), F.get(paren, 0).alias("_t_p0"))
    df = select(df, "*", (F.coalesce(F.size(F.col("_t_alts")) <= 1, F.lit(False))
                          & F.coalesce(F.col("_t_p0") == "", F.lit(True))).alias("_t_one"))
    whole = _groups(wtext, F.col("_t_plain"))
    df = select(df, "*", *[F.when(F.col("_t_one"), c).alias(n) for c, n in zip(whole, names,
                                                                            strict=True)])
    df = _with_fast_path(space, df)

    def alt_groups(alt: Column) -> Column:
        return F.struct(*[c.alias(n) for c, n in zip(_groups(alt, F.col("_t_plain")), _GROUPS,
                                                     strict=True)])

    none = F.array(F.array().cast(f"array<{PRED_TYPE}>"))
    alts = F.coalesce(F.col("_t_alts"), F.array())
    df = select(df, "*", F.when(F.col("_t_ok") & ~F.col("_fast") & (F.size(alts) > 0),
                                F.transform(alts, alt_groups)).alias("_t_g"))
    preds = F.transform(F.col("_t_g"), lambda g: F.transform(
        F.sequence(F.lit(0), F.size(g["attr"]) - 1), lambda i: _text_pred(g, i)))
    df = select(df, "*", F.coalesce(preds, none).alias("_talts"))
    kw = F.try_element_at(F.filter(F.flatten(F.transform(
        F.flatten(F.col("_talts")), lambda p: p["vals"])), lambda v: v["k"] == "kw"), F.lit(1))
    err = first_error(
        (~F.col("_t_ok"), error(F.concat(F.lit("cannot read subscription text "), quoted(wtext)),
                                "where", wtext)),
        (kw.isNotNull(), error(F.concat(F.lit("expected a value, got keyword "), quoted(kw["s"]),
                                        F.lit(" in subscription text "), quoted(wtext)),
                               "where", wtext)),
    )
    return select(df, "*", err.alias("_terr")).drop(*names, "_t_ok", "_t_plain", "_t_alts",
                                                   "_t_p0", "_t_one", "_t_g")


# -- the JSON list form -----------------------------------------------------------------------
def _json_value(x: Column) -> Column:
    """A JSON value -> ``struct<k, n, s>``; ``s`` of a number as Python's ``repr`` shows it.

    ``parse_json`` keeps ``45.0`` as a decimal ``45`` (Python reads a float, ``45.0``).
    """
    F = fns()
    t = variant_type(x)
    k = F.when(is_num_type(t), "num").when(t == "STRING", "str").otherwise("other")
    n = F.when(is_num_type(t), x.cast("string").try_cast("double"))
    text = F.to_json(x)
    whole = t.startswith("DECIMAL") & ~text.rlike("[.eE]")
    s = (F.when(t == "STRING", F.try_variant_get(x, "$", "string"))
         .when(whole, F.concat(text, F.lit(".0"))).otherwise(text))
    return with_texts(F.struct(k.alias("k"), n.alias("n"), s.alias("s")))


def _py_json(x: Column) -> Column:
    """A JSON value as Python's ``repr`` shows what ``json.loads`` makes of it.

    Token by token of Spark's compact JSON: strings in Python's quotes, ``: `` and ``, ``
    between items, ``True``/``False``/``None``.
    """
    F = fns()
    toks = F.regexp_extract_all(F.to_json(x), F.lit(r'("(?:[^"\\]|\\.)*"|[^"]+)'),
                                F.lit(1))

    def one(t: Column) -> Column:
        inner = F.regexp_replace(F.substring(t, F.lit(2), F.length(t) - 2), r"\\(.)", "$1")
        plain = F.regexp_replace(F.regexp_replace(t, ":", ": "), ",", ", ")
        for a, b in (("true", "True"), ("false", "False"), ("null", "None")):
            plain = F.regexp_replace(plain, rf"\b{a}\b", b)
        return F.when(t.startswith('"'), py_str(inner)).otherwise(plain)

    return F.when(variant_type(x).startswith("DECIMAL") | variant_type(x).isin("DOUBLE"),
                  _json_value(x)["r"]).otherwise(F.array_join(F.transform(toks, one), ""))


def _json_alternatives(shape_ok: Column | None = None) -> tuple[Column, Column]:
    """``wjson``'s alternatives (``array<array<variant>>``) and the error of their shape.

    A JSON list is one alternative; ``{"any": [[...], ...]}`` a list of them.
    ``shape_ok``: the error is null (a column of an earlier stage), else it is built here.
    """
    F = fns()
    w = F.col("wjson")
    obj = F.try_variant_get(w, "$", "map<string,variant>")
    anyv = F.try_element_at(obj, F.lit("any"))
    alts = F.try_variant_get(anyv, "$", "array<variant>")
    lists = F.transform(alts, lambda x: F.try_variant_get(x, "$", "array<variant>"))
    bad = F.try_element_at(F.filter(F.sequence(F.lit(1), F.greatest(F.size(alts), F.lit(1))),
                                    lambda j: F.coalesce(F.size(F.get(lists, j - 1)) <= 0,
                                                         F.lit(True))), F.lit(1))
    bad_x = F.get(alts, bad - 1)
    shown = _py_json(w)
    err = F.when(obj.isNotNull(), first_error(
        (F.map_keys(obj) != F.array(F.lit("any")),
         error(F.concat(F.lit("'where' must be a list of predicates, {\"any\": [...]} or a "
                              "text expression, got "), shown), "where", shown)),
        (F.coalesce(F.size(alts) <= 0, F.lit(True)),
         error(F.concat(F.lit("'any' needs a non-empty list of alternatives, got "),
                        _py_json(anyv)), "where", F.to_json(anyv))),
        (bad.isNotNull() & F.get(lists, bad - 1).isNull(),
         error(F.concat(F.lit("alternative "), bad.cast("string"),
                        F.lit(" of 'any' must be a list of predicates, got "), _py_json(bad_x)),
               "where", F.to_json(bad_x))),
        (bad.isNotNull(),
         error(F.concat(F.lit("alternative "), bad.cast("string"), F.lit(" of 'any' is empty")),
               "where", F.to_json(bad_x))),
    ))
    items = F.when(obj.isNull(), F.array(F.try_variant_get(w, "$", "array<variant>")))
    ok = err.isNull() if shape_ok is None else shape_ok
    return F.coalesce(items, F.when(ok, lists)), err


def with_json_predicates(df: DataFrame) -> DataFrame:
    """Add ``_jalts`` (per alternative, its predicate structs) and ``_jerr`` from ``wjson``.

    ``wjson``: a JSON list, or ``{"any": [list, ...]}``.
    """
    F = fns()
    # The shape's error first, in a stage of its own, which the alternatives then read.
    df = select(df, "*", _json_alternatives()[1].alias("_jshape"))
    alts = _json_alternatives(F.col("_jshape").isNull())[0]

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

    df = select(df, "*", F.transform(alts, lambda alt: F.transform(alt, fields)).alias("_jf"))
    lists = ("in", "not in")

    def pred(x: Column) -> Column:
        op = x["op"]
        raw_vals = (F.when(op == "between", F.array(x["low"], x["high"]))
                    .when(op.isin(*lists), x["values"])
                    .when(op.isin("exists", "missing"), F.array().cast("array<variant>"))
                    .otherwise(F.array(x["value"])))
        return F.struct(x["attr"].alias("attr"), op.alias("op"),
                        F.coalesce(F.transform(raw_vals, _json_value),
                                   F.array().cast(f"array<{VAL_TYPE}>")).alias("vals"))

    def err(x: Column) -> Column:
        attr, op = x["attr"], x["op"]
        want = (F.when(op == "between", F.array(F.lit("high"), F.lit("low")))
                .when(op.isin(*lists), F.array(F.lit("values")))
                .when(op.isin("exists", "missing"), F.array().cast("array<string>"))
                .otherwise(F.array(F.lit("value"))))
        op_shown = F.coalesce(F.when(op.isNotNull(), quoted(op)), x["op_j"], F.lit("None"))
        return first_error(
            (x["not_obj"], error(F.concat(F.lit("a predicate must be an object, got "),
                                          x["shown"]), "where", x["shown"])),
            (F.coalesce(F.length(attr) == 0, F.lit(True)),
             error(F.concat(F.lit("predicate attr must be a non-empty string, got "),
                            F.coalesce(x["attr_j"], F.lit("None"))), "attr", x["attr_j"])),
            (~F.coalesce(op.isin(*OPS), F.lit(False)),
             error(F.concat(F.lit("attribute "), quoted(attr), F.lit(": unknown op "),
                            op_shown, F.lit(f" (one of {list(OPS)})")), attr,
                   F.coalesce(op, x["op_j"]))),
            (x["keys"] != want,
             error(F.concat(F.lit("attribute "), quoted(attr), F.lit(": op "), quoted(op),
                            F.lit(" takes keys "), _py_list(want), F.lit(", got "),
                            _py_list(x["keys"])), attr, x["shown"])),
            (op.isin(*lists) & F.coalesce(F.size(x["values"]) <= 0, F.lit(True)),
             error(F.concat(F.lit("attribute "), quoted(attr), F.lit(": "), quoted(op),
                            F.lit(" needs a non-empty list of values, got "),
                            x["values_j"]), attr, x["values_j"])),
        )

    errs = F.transform(F.flatten(F.coalesce(F.col("_jf"), F.array())), err)
    jerr = F.coalesce(F.col("_jshape"),
                      F.try_element_at(F.filter(errs, lambda e: e.isNotNull()), F.lit(1)))
    df = select(df, "*", jerr.alias("_jerr"))
    preds = F.when(F.col("_jerr").isNull(),
                   F.transform(F.col("_jf"), lambda alt: F.transform(alt, pred)))
    return select(df, "*", preds.alias("_jalts")).drop("_jf", "_jshape")


def _py_list(strings: Column) -> Column:
    """A list of strings as Python's ``repr`` shows it: ``['a', 'b']``."""
    F = fns()
    return F.concat(F.lit("["), F.array_join(F.transform(strings, quoted), ", "), F.lit("]"))
