"""A subscription's predicates -> the cells it touches per attribute -> its labels.

Per numeric attribute the predicates are intersected into one interval (as
``dls.predicates._intersect``); a strict bound moves to the exact float64 neighbour; the
cells are the range between the bounds' cells, or the cells of an ``in`` list's values.
Per discrete attribute the allowed values are intersected. The labels are the cross
product of the per-attribute cells, each shifted into its bits, under the space's
application prefix: the order and values of :meth:`dls.predicates.Subscription.labels`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from dls.space import BreakpointAttribute, ContentSpace, DiscreteAttribute, UniformAttribute
from spark.catalyst.columns import (
    cell,
    discrete_index,
    error,
    first_error,
    fmt_num,
    fns,
    long_lit,
    next_down,
    next_up,
    quoted,
    replace_err,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["domain", "interval", "labels_bytes", "merge", "with_labels"]


# -- intervals --------------------------------------------------------------------------------
def _piece(p: Column) -> Column:
    """One numeric predicate as an interval ``struct<lo, loc, hi, hic, vs>`` (vs: 'in')."""
    F = fns()
    op = p["op"]
    return interval(op, F.get(p["vals"], 0)["n"], F.get(p["vals"], 1)["n"],
                    F.when(op == "in", F.transform(p["vals"], lambda v: v["n"])))


def interval(op: Column, v0: Column, v1: Column, vs: Column) -> Column:
    """The interval of an operator and its first two values (``vs``: the 'in' list)."""
    F = fns()
    inf = math.inf
    lo = F.when(op.isin("between", "=", ">", ">="), v0).otherwise(F.lit(-inf))
    hi = F.when(op == "between", v1).when(op.isin("=", "<", "<="), v0).otherwise(F.lit(inf))
    return F.struct(lo.alias("lo"), (op != ">").alias("loc"), hi.alias("hi"),
                    (op != "<").alias("hic"), vs.alias("vs"))


def domain(a: UniformAttribute | BreakpointAttribute) -> Column:
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




# -- cells ------------------------------------------------------------------------------------
def _discrete(i: int, a: DiscreteAttribute) -> tuple[Column, Column, Column]:
    """The three stages of discrete attribute ``i``.

    ``_d{i}`` (the allowed values), ``_e{i}`` (its error) and ``_cells{i}``.
    """
    F = fns()
    mine = F.col(f"_m{i}")
    name = repr(a.name)
    vals = F.flatten(F.transform(mine, lambda p: p["vals"]))
    bad_op = F.try_element_at(F.filter(mine, lambda p: ~p["op"].isin("=", "in")), F.lit(1))
    not_str = F.try_element_at(F.filter(vals, lambda v: v["k"] != "str"), F.lit(1))
    unknown = F.try_element_at(F.filter(vals, _value_not_in(a.values)), F.lit(1))
    allowed = F.aggregate(mine, F.array(*[F.lit(v) for v in a.values]),
                          lambda acc, p: F.array_intersect(
                              acc, F.transform(p["vals"], lambda x: x["s"])))
    shown = F.coalesce(not_str["s"], fmt_num(not_str["n"]))
    err = first_error(
        (bad_op.isNotNull(),
         error(F.concat(F.lit(f"attribute {name} is discrete: only '=' and 'in' apply, got "),
                        quoted(bad_op["op"])), a.name, bad_op["op"])),
        (not_str.isNotNull(),
         error(F.concat(F.lit(f"attribute {name} is discrete: values must be strings, got "),
                        shown), a.name, shown)),
        (unknown.isNotNull(),
         error(F.concat(F.lit(f"attribute {name}: unknown value "), quoted(unknown["s"])),
               a.name, unknown["s"])),
        (F.size(F.col(f"_d{i}")) == 0,
         error(f"attribute {name}: the predicates can match nothing inside the domain",
               a.name, None)),
    )
    cells = F.array_sort(F.transform(F.col(f"_d{i}"), _lookup(discrete_index(a))))
    return allowed.alias(f"_d{i}"), err.alias(f"_e{i}"), cells.alias(f"_cells{i}")


def _numeric(i: int, a: UniformAttribute | BreakpointAttribute
             ) -> tuple[Column, list[Column], Column]:
    """The three stages of numeric attribute ``i``.

    ``_k{i}`` (its interval); ``_v{i}`` (the 'in' values inside it), ``_lo{i}`` and
    ``_hi{i}`` (the closed bounds); ``_e{i}`` (its error).
    """
    F = fns()
    mine = F.col(f"_m{i}")
    name = repr(a.name)
    vals = F.flatten(F.transform(mine, lambda p: p["vals"]))
    slow = F.aggregate(F.transform(mine, _piece), domain(a), merge)
    k = F.when(F.col("_fast"), F.col(f"_fk{i}")).otherwise(slow).alias(f"_k{i}")
    c = F.col(f"_k{i}")
    bad = F.try_element_at(F.filter(vals, lambda v: v["k"].isin("str", "other", "kw")),
                           F.lit(1))
    nan = F.exists(vals, lambda v: (v["k"] == "nan") | F.isnan(v["n"]))
    infinite = F.try_element_at(F.filter(vals, lambda v: (v["k"] == "inf") | (
        (v["k"] == "num") & v["n"].isin(math.inf, -math.inf))), F.lit(1))
    inverted = F.try_element_at(F.filter(mine, lambda p: (p["op"] == "between") & (
        F.get(p["vals"], 0)["n"] > F.get(p["vals"], 1)["n"])), F.lit(1))
    kept = F.filter(c["vs"], _inside(c))
    eff_lo = F.when(c["loc"], c["lo"]).otherwise(next_up(c["lo"]))
    eff_hi = F.when(c["hic"], c["hi"]).otherwise(next_down(c["hi"]))
    bounds = [kept.alias(f"_v{i}"), eff_lo.alias(f"_lo{i}"), eff_hi.alias(f"_hi{i}")]
    shown_inf = F.coalesce(infinite["s"], fmt_num(infinite["n"]))
    empty = ((F.col(f"_lo{i}") > F.col(f"_hi{i}"))
             | (c["vs"].isNotNull() & (F.size(F.col(f"_v{i}")) == 0)))
    err = first_error(
        (bad.isNotNull(),
         error(F.concat(F.lit(f"attribute {name}: values must be numbers, got "),
                        F.coalesce(quoted(bad["s"]), F.lit("?"))), a.name, bad["s"])),
        (nan, error(f"attribute {name}: a value is NaN", a.name, "NaN")),
        (infinite.isNotNull(),
         error(F.concat(F.lit(f"attribute {name}: values must be finite, got "), shown_inf),
               a.name, shown_inf)),
        (inverted.isNotNull(),
         error(F.concat(F.lit(f"attribute {name}: inverted range, low "),
                        fmt_num(F.get(inverted["vals"], 0)["n"]), F.lit(" > high "),
                        fmt_num(F.get(inverted["vals"], 1)["n"])), a.name, None)),
        (empty, error(f"attribute {name}: the predicates can match nothing inside the domain",
                      a.name, None)),
    )
    return k, bounds, err.alias(f"_e{i}")


def _numeric_cells(i: int, a: UniformAttribute | BreakpointAttribute) -> Column:
    """``_cells{i}`` of numeric attribute ``i`` (null when ``_e{i}`` is set)."""
    F = fns()
    ok = F.col(f"_e{i}").isNull()
    in_set = F.array_sort(F.array_distinct(F.transform(F.col(f"_v{i}"), _cell_of(a))))
    rng = F.sequence(cell(a, F.col(f"_lo{i}")), cell(a, F.col(f"_hi{i}")))
    return F.when(ok, F.when(F.col(f"_k{i}")["vs"].isNotNull(), in_set)
                  .otherwise(rng)).alias(f"_cells{i}")


def _with_cells(space: ContentSpace, df: DataFrame) -> DataFrame:
    """Add ``_cells{i}`` (sorted cell indexes per attribute) and ``_e{i}`` (errors)."""
    F = fns()
    preds = F.col("_preds")
    df = df.select("*", *[F.filter(preds, _attr_is(a.name)).alias(f"_m{i}")
                          for i, a in enumerate(space.attributes)])
    stage2: list[Column] = []
    stage3: list[Column] = []
    stage4: list[Column] = []
    for i, a in enumerate(space.attributes):
        if isinstance(a, DiscreteAttribute):
            allowed, err, cells = _discrete(i, a)
            stage2.append(allowed)
            stage3.append(err)
            stage4.append(cells)
        else:
            k, bounds, err = _numeric(i, a)
            stage2.append(k)
            stage3 += bounds
            stage4.append(err)
    df = df.select("*", *stage2)
    df = df.select("*", *stage3)
    df = df.select("*", *stage4)
    return df.select("*", *[_numeric_cells(i, a) for i, a in enumerate(space.attributes)
                            if not isinstance(a, DiscreteAttribute)])


def _attr_is(name: str) -> Any:
    return lambda p: p["attr"] == name


def _value_not_in(values: tuple[str, ...]) -> Any:
    return lambda v: ~v["s"].isin(*values)


def _lookup(index: Column) -> Any:
    return lambda v: fns().try_element_at(index, v)


def _cell_of(a: UniformAttribute | BreakpointAttribute) -> Any:
    return lambda v: cell(a, v)


def _inside(c: Column) -> Any:
    F = fns()
    return lambda v: (F.when(c["loc"], v >= c["lo"]).otherwise(v > c["lo"])
                      & F.when(c["hic"], v <= c["hi"]).otherwise(v < c["hi"]))


def _extend(cells: Column, shift: int) -> Any:
    F = fns()
    return lambda lab: F.transform(
        cells, lambda c: lab.bitwiseOR(F.shiftleft(c.cast("bigint"), shift)))


# -- labels -----------------------------------------------------------------------------------
def with_labels(space: ContentSpace, df: DataFrame) -> DataFrame:
    """Add ``_labels`` (sorted bigint labels) of ``_preds`` and its error to ``_err``."""
    F = fns()
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
    err = first_error(
        (unknown.isNotNull(),
         error(F.concat(F.lit("unknown attribute "), quoted(unknown["attr"]),
                        F.lit(f" (the space has {names})")), unknown["attr"], unknown["attr"])),
        *[(F.col(f"_e{i}").isNotNull(), F.col(f"_e{i}")) for i in range(len(names))],
        (F.col("_total") > budget,
         error(F.concat(F.lit("subscription expands to "), _count(F.col("_total")),
                        F.lit(f" labels, over the budget of {budget}")), "labels",
               _count(F.col("_total")))),
    )
    df = replace_err(df, err)
    labels = F.array(long_lit(space.app_prefix))
    for i, shift in enumerate(space.shifts):
        labels = F.flatten(F.transform(labels, _extend(F.col(f"_cells{i}"), shift)))
    df = df.select("*", F.when(F.col("_err").isNull(), labels).alias("_labels"))
    scratch = [c for c in df.columns if c.startswith(("_m", "_d", "_k", "_v", "_lo", "_hi",
                                                      "_e", "_cells")) and c[-1].isdigit()]
    return df.drop(*scratch, "_total")


def _count(total: Column) -> Column:
    """A whole-number decimal as digits."""
    return total.cast("decimal(38,0)").cast("string")


def labels_bytes(labels: Column) -> Column:
    """Concatenated 8-byte big-endian labels (``connectors.topics.encode_labels``)."""
    F = fns()
    return F.unhex(F.array_join(F.transform(labels, lambda lab: F.lpad(F.hex(lab), 16, "0")),
                                ""))
