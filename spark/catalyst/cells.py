"""A subscription's alternatives -> the cells each touches per attribute -> its labels.

``_alts`` holds a subscription's alternatives (one for a conjunction, several for
``{"any": ...}`` or a text ``or``), each a list of predicate structs. Per attribute, every
stage is an array over the alternatives (a ``transform``): the predicates naming it
(``_m{i}``), what they add up to (``_k{i}``: a numeric interval as
``dls.predicates._intersect`` with its value set and exclusions, a string range with
``prefix p`` as ``[p, p+)``, a discrete or hashed value set), the first error
(``_e{i}``) and the cells (``_cells{i}``). An optional attribute adds its absent cell
when no predicate names it, and has only that cell under ``missing``. The labels of an
alternative are the cross product of its cells under the application prefix; those of
the subscription the sorted union over its alternatives, each checked against the budget
and then the union: the order and values of :meth:`dls.predicates.Subscription.labels`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from connectors.topics import MAX_MESSAGE_LABELS
from dls.space import ContentSpace
from spark.catalyst.columns import (
    cell,
    discrete_index,
    error,
    first_error,
    fns,
    hash_cell,
    is_optional,
    kind_of,
    long_lit,
    next_down,
    next_up,
    quoted,
    replace_err,
    string_cell,
    value_cells,
)
from spark.catalyst.preds import op_error, pred_text, prefix_end, value_error
from spark.catalyst.sqlfns import select, with_column

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["domain", "interval", "labels_bytes", "merge", "rendered", "with_labels"]

_LISTS = ("in", "not in")
_EXCL = ("!=", "not in")
_PRESENCE = ("exists", "missing")
_SIGN = -(1 << 63)
DEFERRED = "\x00"
"""Starts a reason that names predicates as text, put in at the end (:func:`_rendered`)."""
ATTR_TEXT = "\x01"
"""In a deferred reason: the text of the named attribute's predicates in its alternative."""
SUB_TEXT = "\x02"
"""In a deferred reason: the subscription's text."""


# -- numeric intervals ------------------------------------------------------------------------
def _piece(p: Column) -> Column:
    """One numeric predicate as an interval ``struct<lo, loc, hi, hic, vs>`` (vs: 'in')."""
    F = fns()
    op = p["op"]
    return interval(op, F.get(p["vals"], 0)["n"], F.get(p["vals"], 1)["n"],
                    F.when(op == "in", F.transform(p["vals"], lambda v: v["n"])))


def interval(op: Column, v0: Column, v1: Column, vs: Column) -> Column:
    """The interval of an operator and its first two values (``vs``: its value set).

    ``!=``, ``not in``, ``exists`` and ``missing`` leave the whole line.
    """
    F = fns()
    inf = math.inf
    lo = F.when(op.isin("between", "=", ">", ">="), v0).otherwise(F.lit(-inf))
    hi = F.when(op == "between", v1).when(op.isin("=", "<", "<="), v0).otherwise(F.lit(inf))
    return F.struct(lo.alias("lo"), (op != ">").alias("loc"), hi.alias("hi"),
                    (op != "<").alias("hic"), vs.alias("vs"))


def domain(a: Any) -> Column:
    """The whole domain of a numeric attribute as an interval (no predicate yet)."""
    F = fns()
    return F.struct(F.lit(a.low).alias("lo"), F.lit(True).alias("loc"),
                    F.lit(a.high).alias("hi"), F.lit(True).alias("hic"),
                    F.lit(None).cast("array<double>").alias("vs"))


def merge(acc: Column, b: Column) -> Column:
    """Intersection of two intervals, as ``dls.predicates._intersect``."""
    F = fns()
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


def _inside(c: Column, ex: Column) -> Any:
    F = fns()
    return lambda v: (F.when(c["loc"], v >= c["lo"]).otherwise(v > c["lo"])
                      & F.when(c["hic"], v <= c["hi"]).otherwise(v < c["hi"])
                      & ~F.array_contains(ex, v))


# -- string ranges ----------------------------------------------------------------------------
def _str_piece(p: Column) -> Column:
    """One string predicate as ``struct<lo, loc, hi, hic, vs>`` (null ends: unbounded)."""
    F = fns()
    op = p["op"]
    v0, v1 = F.get(p["vals"], 0)["s"], F.get(p["vals"], 1)["s"]
    lo = F.when(op.isin("between", "=", ">", ">=", "prefix"), v0)
    hi = (F.when(op == "between", v1).when(op.isin("=", "<", "<="), v0)
          .when(op == "prefix", prefix_end(v0)))
    vs = F.when(op.isin("in", "="), F.transform(p["vals"], lambda v: v["s"]))
    return F.struct(lo.alias("lo"), (op != ">").alias("loc"), hi.alias("hi"),
                    (~op.isin("<", "prefix")).alias("hic"), vs.alias("vs"))


def _str_merge(acc: Column, b: Column) -> Column:
    """Intersection of two string ranges (null ends are unbounded)."""
    F = fns()
    a_lo = acc["lo"].isNull() | (b["lo"].isNotNull() & (b["lo"] > acc["lo"]))
    same_lo = acc["lo"] == b["lo"]
    lo = F.when(a_lo, b["lo"]).otherwise(acc["lo"])
    loc = (F.when(F.coalesce(same_lo, F.lit(False)), acc["loc"] & b["loc"])
           .when(a_lo, b["loc"]).otherwise(acc["loc"]))
    a_hi = acc["hi"].isNull() | (b["hi"].isNotNull() & (b["hi"] < acc["hi"]))
    same_hi = acc["hi"] == b["hi"]
    hi = F.when(a_hi, b["hi"]).otherwise(acc["hi"])
    hic = (F.when(F.coalesce(same_hi, F.lit(False)), acc["hic"] & b["hic"])
           .when(a_hi, b["hic"]).otherwise(acc["hic"]))
    vs = (F.when(acc["vs"].isNull(), b["vs"]).when(b["vs"].isNull(), acc["vs"])
          .otherwise(F.array_intersect(acc["vs"], b["vs"])))
    return F.struct(lo.alias("lo"), loc.alias("loc"), hi.alias("hi"), hic.alias("hic"),
                    vs.alias("vs"))


def _str_inside(c: Column, ex: Column) -> Any:
    F = fns()
    return lambda v: (F.coalesce(F.when(c["loc"], v >= c["lo"]).otherwise(v > c["lo"]),
                                 F.lit(True))
                      & F.coalesce(F.when(c["hic"], v <= c["hi"]).otherwise(v < c["hi"]),
                                   F.lit(True))
                      & ~F.array_contains(ex, v))


def _str_empty(c: Column, ex: Column) -> Column:
    """True when no string lies in range ``c`` (none is below ``""``), ``ex`` excluded."""
    F = fns()
    point = (c["lo"] == c["hi"]) & (~(c["loc"] & c["hic"]) | F.array_contains(ex, c["lo"]))
    return (F.coalesce((c["hi"] == "") & ~c["hic"], F.lit(False))
            | F.coalesce((c["lo"] > c["hi"]) | point, F.lit(False)))


# -- per attribute, per alternative -----------------------------------------------------------
def _values(m: Column, ops: tuple[str, ...], field: str) -> Column:
    """Field ``field`` (n or s) of the values of the predicates of ``m`` with op in ``ops``."""
    F = fns()
    return F.flatten(F.transform(F.filter(m, lambda p: p["op"].isin(*ops)),
                                 lambda p: F.transform(p["vals"], lambda v: v[field])))


def _count(m: Column, *ops: str) -> Column:
    F = fns()
    return F.size(F.filter(m, lambda p: p["op"].isin(*ops)))


def _summary(a: Any, m: Column) -> Column:
    """What the predicates ``m`` on attribute ``a`` of one alternative add up to.

    ``struct<k (the range), ex (excluded values), nv (value predicates), ne (exists),
    nm (missing)>``; for a discrete or hashed attribute ``k`` is ``struct<vs>``.
    """
    F = fns()
    kind = kind_of(a)
    valued = F.filter(m, lambda p: ~p["op"].isin(*_PRESENCE, *_EXCL))
    if kind == "numeric":
        k = F.aggregate(F.transform(valued, _piece), domain(a), merge)
        ex = _values(m, _EXCL, "n")
    elif kind == "string":
        k = F.aggregate(F.transform(valued, _str_piece), _str_domain(), _str_merge)
        ex = _values(m, _EXCL, "s")
    else:
        sets = F.filter(m, lambda p: p["op"].isin("=", "in"))
        if kind == "discrete":
            start = F.array(*[F.lit(v) for v in a.values]).cast("array<string>")
        else:
            start = F.when(F.size(sets) > 0, F.transform(F.get(sets, 0)["vals"],
                                                         lambda v: v["s"]))
        vs = F.aggregate(sets, start, lambda acc, p: F.array_intersect(
            acc, F.transform(p["vals"], lambda v: v["s"])))
        k = F.struct(vs.alias("vs"))
        ex = _values(m, _EXCL, "s")
    return F.struct(k.alias("k"), F.coalesce(ex, F.array()).alias("ex"),
                    F.size(F.filter(m, lambda p: ~p["op"].isin(*_PRESENCE))).alias("nv"),
                    _count(m, "exists").alias("ne"), _count(m, "missing").alias("nm"))


def _str_domain() -> Column:
    F = fns()
    return F.struct(F.lit(None).cast("string").alias("lo"), F.lit(True).alias("loc"),
                    F.lit(None).cast("string").alias("hi"), F.lit(True).alias("hic"),
                    F.lit(None).cast("array<string>").alias("vs"))


def _kept(a: Any, s: Column) -> Column:
    """``struct<kept, lo, hi>`` of summary ``s``.

    Its value set filtered by every other predicate (null: no set) and, for a numeric
    attribute, the closed float bounds.
    """
    F = fns()
    kind = kind_of(a)
    k, ex = s["k"], s["ex"]
    lo = hi = F.lit(None).cast("double")
    if kind == "numeric":
        kept = F.filter(k["vs"], _inside(k, ex))
        lo, hi = _bounds(s)
    elif kind == "string":
        kept = F.filter(k["vs"], _str_inside(k, ex))
    else:
        kept = F.filter(k["vs"], lambda v: ~F.array_contains(ex, v))
    return F.struct(kept.alias("kept"), lo.alias("lo"), hi.alias("hi"))


def _bounds(s: Column) -> tuple[Column, Column]:
    """The effective closed float bounds of a numeric summary (nextafter of open ends)."""
    F = fns()
    k = s["k"]
    return (F.when(k["loc"], k["lo"]).otherwise(next_up(k["lo"])),
            F.when(k["hic"], k["hi"]).otherwise(next_down(k["hi"])))


def _empty(a: Any, s: Column, v: Column) -> Column:
    """True when the summary ``s`` (``v``: its :func:`_kept`) leaves no value."""
    F = fns()
    kind = kind_of(a)
    has_set = s["k"]["vs"].isNotNull()
    none_kept = has_set & (F.size(v["kept"]) == 0)
    if kind == "numeric":
        lo, hi = v["lo"], v["hi"]
        return none_kept | (lo > hi) | ((lo == hi) & F.array_contains(s["ex"], lo))
    if kind == "string":
        return F.when(has_set, none_kept).otherwise(_str_empty(s["k"], s["ex"]))
    return none_kept


def _error(a: Any, m: Column, s: Column, v: Column, j: Column) -> Column:
    """The first refusal of attribute ``a`` in one alternative (null when none).

    As ``dls.constraints.compile_attribute``: an operator that does not apply (any
    predicate), ``missing`` beside another predicate, a bad value (predicate by
    predicate), then a set of predicates that can match nothing.
    """
    F = fns()

    def first(errs: Column) -> Column:
        return F.try_element_at(F.filter(errs, lambda e: e.isNotNull()), F.lit(1))

    presence = (s["nm"] > 0) & ((s["nv"] > 0) | (s["ne"] > 0))
    return first_error(
        (F.lit(True), first(F.transform(m, lambda p: op_error(a, p)))),
        (presence, _nothing(a, j)),
        (F.lit(True), first(F.transform(m, lambda p: value_error(a, p)))),
        ((s["nm"] == 0) & _empty(a, s, v), _nothing(a, j)),
    )


def _nothing(a: Any, j: Column) -> Column:
    """Attribute ``a`` can match nothing in alternative ``j``.

    Its predicates' text is put in by :func:`rendered`.
    """
    return error(f"{DEFERRED}attribute {a.name!r}: '{ATTR_TEXT}' can match nothing inside "
                 "the domain", a.name, j)


def _cells(a: Any, s: Column, v: Column) -> Column:
    """Sorted cells of attribute ``a`` in one alternative (``v``: :func:`_kept` of ``s``)."""
    F = fns()
    kept = v["kept"]
    kind = kind_of(a)
    n = value_cells(a)
    set_cells: Column
    if kind == "numeric":
        set_cells = F.transform(kept, lambda x: cell(a, x))
        rng = F.sequence(cell(a, v["lo"]), cell(a, v["hi"]))
    elif kind == "string":
        set_cells = F.transform(kept, lambda x: string_cell(a, x))
        k = s["k"]
        bps = F.array(*[F.lit(b) for b in a.breakpoints]).cast("array<string>")
        c_lo = F.coalesce(string_cell(a, k["lo"]), F.lit(0).cast("bigint"))
        below = F.size(F.filter(bps, lambda b: b < k["hi"])).cast("bigint")
        c_hi = F.when(k["hi"].isNull(), F.lit(n - 1).cast("bigint")).when(
            k["hic"], string_cell(a, k["hi"])).otherwise(below)
        rng = F.sequence(c_lo, c_hi)
    elif kind == "discrete":
        set_cells = F.transform(kept, lambda x: F.try_element_at(discrete_index(a), x))
        rng = set_cells
    else:
        set_cells = F.transform(kept, lambda x: hash_cell(a, x))
        rng = F.sequence(F.lit(0).cast("bigint"), F.lit(n - 1).cast("bigint"))
    values = F.when(s["k"]["vs"].isNotNull(), F.array_sort(F.array_distinct(set_cells)))\
        .otherwise(rng)
    if not is_optional(a):
        return values
    absent = F.array(F.lit(n).cast("bigint"))
    return (F.when(s["nm"] > 0, absent)
            .when((s["nv"] == 0) & (s["ne"] == 0), F.concat(values, absent))
            .otherwise(values))


def _with_cells(space: ContentSpace, df: DataFrame) -> DataFrame:
    """Add, per attribute i and alternative, ``_cells{i}`` (sorted cells) and ``_e{i}``."""
    F = fns()
    alts = F.col("_alts")
    attrs = list(enumerate(space.attributes))
    df = select(df, "*", *[F.transform(alts, _attr_is(a.name)).alias(f"_m{i}")
                           for i, a in attrs])
    stage2 = []
    for i, a in attrs:
        slow = F.transform(F.col(f"_m{i}"), _summary_of(a))
        if kind_of(a) == "numeric" and "_fast" in df.columns:
            fk = F.col(f"_fk{i}")
            fast = F.array(F.struct(fk.alias("k"), F.array().cast("array<double>").alias("ex"),
                                    F.lit(0).alias("nv"), F.lit(0).alias("ne"),
                                    F.lit(0).alias("nm")))
            slow = F.when(F.col("_fast"), fast).otherwise(slow)
        stage2.append(slow.alias(f"_k{i}"))
    df = select(df, "*", *stage2)
    df = select(df, "*", *[F.transform(F.col(f"_k{i}"), _kept_of(a)).alias(f"_v{i}")
                           for i, a in attrs])
    df = select(df, "*", *[
        F.transform(F.col(f"_k{i}"), _error_of(a, F.col(f"_m{i}"), F.col(f"_v{i}")))
        .alias(f"_e{i}") for i, a in attrs])
    return select(df, "*", *[
        F.transform(F.col(f"_k{i}"), _cells_of(a, F.col(f"_e{i}"), F.col(f"_v{i}")))
        .alias(f"_cells{i}") for i, a in attrs])


def _attr_is(name: str) -> Any:
    F = fns()
    return lambda alt: F.filter(alt, lambda p: p["attr"] == name)


def _summary_of(a: Any) -> Any:
    return lambda m: _summary(a, m)


def _kept_of(a: Any) -> Any:
    return lambda s: _kept(a, s)


def _error_of(a: Any, m: Column, v: Column) -> Any:
    F = fns()
    return lambda s, j: _error(a, F.get(m, j), s, F.get(v, j), j)


def _cells_of(a: Any, e: Column, v: Column) -> Any:
    F = fns()
    return lambda s, j: F.when(F.get(e, j).isNull(), _cells(a, s, F.get(v, j)))


def _extend(cells: Column, shift: int) -> Any:
    F = fns()
    return lambda lab: F.transform(
        cells, lambda c: lab.bitwiseOR(F.shiftleft(c.cast("bigint"), shift)))


# -- labels -----------------------------------------------------------------------------------
def _alt_error(space: ContentSpace, j: Column) -> Column:
    """The first refusal of alternative ``j``.

    An unknown attribute, then the error of the attribute named first among those with one.
    """
    F = fns()
    names = [a.name for a in space.attributes]
    alt = F.get(F.col("_alts"), j)
    unknown = F.try_element_at(F.filter(alt, lambda p: ~p["attr"].isin(*names)), F.lit(1))
    attr_names = F.transform(alt, lambda p: p["attr"])
    ranked = F.array_sort(F.array(*[
        F.struct(F.array_position(attr_names, F.lit(a.name)).alias("pos"),
                 F.get(F.col(f"_e{i}"), j).alias("err"))
        for i, a in enumerate(space.attributes)]))
    first = F.try_element_at(F.filter(ranked, lambda r: r["err"].isNotNull()), F.lit(1))
    return first_error(
        (unknown.isNotNull(),
         error(F.concat(F.lit("unknown attribute "), quoted(unknown["attr"]),
                        F.lit(f" (the space has {names})")), unknown["attr"], unknown["attr"])),
        (first.isNotNull(), first["err"]),
    )


def with_labels(space: ContentSpace, df: DataFrame) -> DataFrame:
    """Add ``_labels`` (sorted bigint labels) of ``_alts`` and its error to ``_err``."""
    F = fns()
    n = len(space.attributes)
    df = _with_cells(space, df)
    js = F.sequence(F.lit(0), F.size(F.col("_alts")) - 1)
    alt_err = F.try_element_at(F.filter(F.transform(js, lambda j: _alt_error(space, j)),
                                        lambda e: e.isNotNull()), F.lit(1))
    df = replace_err(df, alt_err)

    # Decimal: a product of cell counts can pass 2**63 (a bigint would overflow), and it
    # never passes 2**64 (labels have 64 bits), well inside 38 digits.
    def total(j: Column) -> Column:
        t = F.lit(1).cast("decimal(10,0)")
        for i in range(n):
            t = t * F.size(F.get(F.col(f"_cells{i}"), j)).cast("decimal(10,0)")
        return t.cast("decimal(38,0)")

    ok = F.col("_err").isNull()
    df = select(df, "*", F.when(ok, F.transform(js, total)).alias("_totals"))
    budget = min(space.filters.label_budget, MAX_MESSAGE_LABELS)  # one Kafka message
    over = F.try_element_at(F.filter(js, lambda j: F.get(F.col("_totals"), j) > budget),
                            F.lit(1))
    detail = F.concat_ws(", ", *[
        F.concat(F.lit(f"{a.name}: "), F.size(F.get(F.col(f"_cells{i}"), over)).cast("string"))
        for i, a in enumerate(space.attributes)])
    df = replace_err(df, F.when(over.isNotNull(), _budget_error(
        F.get(F.col("_totals"), over), budget, detail)))

    def alt_labels(j: Column) -> Column:
        labels = F.array(long_lit(space.app_prefix))
        for i, shift in enumerate(space.shifts):
            labels = F.flatten(F.transform(labels, _extend(F.get(F.col(f"_cells{i}"), j),
                                                           shift)))
        return labels

    one = F.size(F.col("_alts")) == 1
    # Several alternatives: the union, sorted as unsigned (the sign bit flipped).
    union = F.transform(F.array_sort(F.array_distinct(F.transform(
        F.flatten(F.transform(js, alt_labels)), lambda x: x.bitwiseXOR(F.lit(_SIGN))))),
        lambda x: x.bitwiseXOR(F.lit(_SIGN)))
    df = select(df, "*", F.when(F.col("_err").isNull(), F.when(one, alt_labels(F.lit(0)))
                                .otherwise(union)).alias("_labels"))
    df = replace_err(df, F.when(F.size(F.col("_labels")) > budget, _budget_error(
        F.size(F.col("_labels")).cast("decimal(38,0)"), budget, None)))
    df = with_column(df, "_labels", F.when(F.col("_err").isNull(), F.col("_labels")))
    scratch = [c for c in df.columns if c.startswith(("_m", "_k", "_v", "_e", "_cells"))
               and c[-1].isdigit()]
    return df.drop(*scratch, "_totals")


def _budget_error(total: Column, budget: int, detail: Column | None) -> Column:
    """Over the budget.

    An alternative's product (``detail``: its cells per attribute), or the union of the
    alternatives' labels (``detail`` None).
    """
    F = fns()
    shown = total.cast("string")
    cells = [] if detail is None else [F.lit(" ("), detail, F.lit(" cells)")]
    held = "" if budget < MAX_MESSAGE_LABELS else ", what one Kafka message holds"
    return error(F.concat(F.lit(f"{DEFERRED}subscription '{SUB_TEXT}' expands to "), shown,
                          F.lit(" labels"), *cells,
                          F.lit(f", over the budget of {budget}{held}")),
                 "labels", shown)


def rendered(err: Column, alts: Column) -> Column:
    """``err`` with the text of the predicates put into a deferred reason.

    ``alts``: the subscription's alternatives (evaluated only for such a reason).
    """
    F = fns()
    # ``alts`` bound once to a lambda variable (it is read three times).
    return F.when(F.coalesce(err["reason"].startswith(DEFERRED), F.lit(False)), F.get(
        F.transform(F.array(alts), lambda a: _rendered(err, a)), 0)).otherwise(err)


def _rendered(err: Column, alts: Column) -> Column:
    """The deferred reason of ``err`` with the predicates' text put in."""
    F = fns()
    reason = err["reason"]
    j = err["value"].try_cast("int")
    mine = F.filter(F.get(alts, j), lambda p: p["attr"] == err["field"])
    attr_text = F.array_join(F.transform(mine, pred_text), " and ")
    texts = F.transform(alts, lambda alt: F.array_join(F.transform(alt, pred_text), " and "))
    sub_text = F.when(F.size(alts) == 1, F.when(F.get(texts, 0) == "", F.lit("(everything)"))
                      .otherwise(F.get(texts, 0)))\
        .otherwise(F.array_join(F.transform(texts, lambda t: F.concat(F.lit("("), t,
                                                                        F.lit(")"))), " or "))
    is_attr = reason.contains(ATTR_TEXT)
    text = F.substring(reason, F.lit(2), F.length(reason))
    text = F.when(is_attr, F.replace(text, F.lit(ATTR_TEXT), F.coalesce(attr_text, F.lit(""))))\
        .otherwise(F.replace(text, F.lit(SUB_TEXT), F.coalesce(sub_text, F.lit(""))))
    return F.struct(text.alias("reason"), err["field"].alias("field"),
                    F.when(~is_attr, err["value"]).alias("value"))


def labels_bytes(labels: Column) -> Column:
    """Concatenated 8-byte big-endian labels (``connectors.topics.encode_labels``)."""
    F = fns()
    return F.unhex(F.array_join(F.transform(labels, lambda lab: F.lpad(F.hex(lab), 16, "0")),
                                ""))
