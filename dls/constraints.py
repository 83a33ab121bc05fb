"""What a conjunction of predicates asks of each attribute, its cells and its interior.

Predicates on one attribute compile into one constraint (they intersect):

* :class:`NumericConstraint`: an interval (clipped to the domain), optionally a finite set of
  values, and values excluded by ``!=`` / ``not in``;
* :class:`DiscreteConstraint`: the set of allowed values;
* :class:`StringConstraint`: a lexicographic interval (``prefix p`` is ``[p, p⁺)``), a finite
  set, excluded values;
* :class:`HashedConstraint`: a finite set and/or excluded values;
* :class:`Absent`: ``missing``, the attribute must be left out.

Any constraint but :class:`Absent` requires the attribute to be present; an attribute
without predicates allows anything, absent included. An operator on the wrong type, a value
of the wrong type and a conjunction that can match nothing are refused with a
:class:`~dls.exceptions.PredicateError` naming the attribute and the value.

:func:`cells` gives the cells a constraint touches (its labels are the cross product over
the attributes), :func:`interior` which of them hold only matching values (an event there
matches whatever its value: the node's edge check skips it).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dls.exceptions import PredicateError
from dls.space import (
    Attribute,
    DiscreteAttribute,
    HashedAttribute,
    StringAttribute,
    is_number,
)
from dls.where import Predicate

__all__ = ["TYPE_OPS", "Absent", "Constraint", "DiscreteConstraint", "HashedConstraint",
           "NumericConstraint", "StringConstraint", "cells", "compile_attribute", "interior",
           "prefix_end"]

TYPE_OPS: dict[str, tuple[str, ...]] = {
    "numeric": ("=", "!=", "<", "<=", ">", ">=", "between", "in", "not in"),
    "discrete": ("=", "!=", "in", "not in"),
    "string": ("=", "!=", "<", "<=", ">", ">=", "between", "in", "not in", "prefix"),
    "hashed": ("=", "!=", "in", "not in"),
}
_MAX_CHAR = chr(sys.maxunicode)


@dataclass(frozen=True)
class NumericConstraint:
    """Closed/open interval, optionally restricted to a finite set, minus excluded values."""

    lo: float
    lo_closed: bool
    hi: float
    hi_closed: bool
    values: frozenset[float] | None = None
    excluded: frozenset[float] = frozenset()

    def contains(self, v: Any) -> bool:
        """Exact membership of one value (None: absent)."""
        if not is_number(v):
            return False
        v = float(v)
        if self.values is not None and v not in self.values:
            return False
        if v < self.lo or (v == self.lo and not self.lo_closed):
            return False
        if v > self.hi or (v == self.hi and not self.hi_closed):
            return False
        return v not in self.excluded

    def contains_many(self, v: np.ndarray) -> np.ndarray:
        """Exact membership of an array of values."""
        ok = (v > self.lo) if not self.lo_closed else (v >= self.lo)
        ok &= (v < self.hi) if not self.hi_closed else (v <= self.hi)
        if self.values is not None:
            ok &= np.isin(v, np.fromiter(self.values, dtype=np.float64))
        if self.excluded:
            ok &= ~np.isin(v, np.fromiter(self.excluded, dtype=np.float64))
        return ok

    def effective_bounds(self) -> tuple[float, float]:
        """Smallest and largest float64 inside the interval (may cross if empty)."""
        lo = self.lo if self.lo_closed else math.nextafter(self.lo, math.inf)
        hi = self.hi if self.hi_closed else math.nextafter(self.hi, -math.inf)
        return lo, hi

    def is_empty(self) -> bool:
        """True when no value can satisfy the constraint."""
        lo, hi = self.effective_bounds()
        if lo > hi or (lo == hi and lo in self.excluded):
            return True
        return self.values is not None and not any(self.contains(v) for v in self.values)


@dataclass(frozen=True)
class DiscreteConstraint:
    """A set of allowed values of a discrete attribute."""

    values: frozenset[str]

    def contains(self, v: Any) -> bool:
        """Exact membership of one value."""
        return v in self.values


@dataclass(frozen=True)
class StringConstraint:
    """A lexicographic interval (None: unbounded), a finite set, excluded values."""

    lo: str | None = None
    lo_closed: bool = True
    hi: str | None = None
    hi_closed: bool = True
    values: frozenset[str] | None = None
    excluded: frozenset[str] = frozenset()

    def in_range(self, v: str) -> bool:
        """True when ``v`` lies in the interval."""
        if self.lo is not None and (v < self.lo or (v == self.lo and not self.lo_closed)):
            return False
        return self.hi is None or not (v > self.hi or (v == self.hi and not self.hi_closed))

    def contains(self, v: Any) -> bool:
        """Exact membership of one value."""
        if not isinstance(v, str) or v in self.excluded:
            return False
        if self.values is not None and v not in self.values:
            return False
        return self.in_range(v)

    def is_empty(self) -> bool:
        """True when no string can satisfy the constraint."""
        if self.values is not None:
            return not any(self.contains(v) for v in self.values)
        lo, hi = self.lo, self.hi
        if hi == "" and not self.hi_closed:
            return True
        if lo is None or hi is None:
            return False
        return lo > hi or (lo == hi and (not (self.lo_closed and self.hi_closed)
                                         or lo in self.excluded))


@dataclass(frozen=True)
class HashedConstraint:
    """A finite set of allowed strings (None: any) minus excluded ones."""

    values: frozenset[str] | None = None
    excluded: frozenset[str] = frozenset()

    def contains(self, v: Any) -> bool:
        """Exact membership of one value."""
        if not isinstance(v, str) or v in self.excluded:
            return False
        return self.values is None or v in self.values


@dataclass(frozen=True)
class Absent:
    """``missing``: the event must leave the attribute out."""

    def contains(self, v: Any) -> bool:
        """True for an absent value (None)."""
        return v is None


Constraint = NumericConstraint | DiscreteConstraint | StringConstraint | HashedConstraint | Absent


# -- compiling ------------------------------------------------------------------------------
def _kind_word(attr: Attribute) -> str:
    return "a string attribute" if attr.kind == "string" else (
        "a hashed attribute" if attr.kind == "hashed" else attr.kind)


def _check_op(attr: Attribute, p: Predicate) -> None:
    ops = TYPE_OPS[attr.kind] + (("exists", "missing") if attr.optional else ())
    if p.op not in ops:
        raise PredicateError(f"attribute {p.attr!r} is {attr.kind}: {p.op!r} does not apply "
                             f"(it takes {', '.join(ops)})", field=p.attr, value=p.op)


def _number(attr: str, v: Any, what: str) -> float:
    if not is_number(v):
        raise PredicateError(
            f"attribute {attr!r}: {what} must be a number, got {v!r}", field=attr, value=v)
    f = float(v)
    if math.isnan(f):
        raise PredicateError(f"attribute {attr!r}: {what} is NaN", field=attr, value=v)
    if math.isinf(f):
        raise PredicateError(f"attribute {attr!r}: {what} must be finite, got {v!r}",
                             field=attr, value=v)
    return f


def _string(attr: Attribute, v: Any) -> str:
    if not isinstance(v, str):
        raise PredicateError(f"attribute {attr.name!r} is {attr.kind}: values must be "
                             f"strings, got {v!r}", field=attr.name, value=v)
    if isinstance(attr, DiscreteAttribute) and v not in attr.index:
        raise PredicateError(f"attribute {attr.name!r}: unknown value {v!r}", field=attr.name,
                             value=v)
    return v


def _empty_error(attr: str, preds: Sequence[Predicate]) -> PredicateError:
    text = " and ".join(p.to_text() for p in preds)
    return PredicateError(
        f"attribute {attr!r}: '{text}' can match nothing inside the domain", field=attr,
        value=[p.to_json() for p in preds])


def prefix_end(p: str) -> str | None:
    """The least string above every string that starts with ``p`` (None: there is none)."""
    p = p.rstrip(_MAX_CHAR)
    return None if not p else p[:-1] + chr(ord(p[-1]) + 1)


def _numeric_piece(p: Predicate) -> NumericConstraint:
    inf = math.inf
    if p.op == "between":
        low = _number(p.attr, p.operands[0], "low")
        high = _number(p.attr, p.operands[1], "high")
        if low > high:
            raise PredicateError(
                f"attribute {p.attr!r}: inverted range, low {p.operands[0]!r} > high "
                f"{p.operands[1]!r}", field=p.attr, value=[p.operands[0], p.operands[1]])
        return NumericConstraint(low, True, high, True)
    if p.op == "in":
        vals = frozenset(_number(p.attr, v, "value") for v in p.operands)
        return NumericConstraint(-inf, True, inf, True, vals)
    v = _number(p.attr, p.operands[0], "value")
    return {
        "=": NumericConstraint(v, True, v, True),
        "<": NumericConstraint(-inf, True, v, False),
        "<=": NumericConstraint(-inf, True, v, True),
        ">": NumericConstraint(v, False, inf, True),
        ">=": NumericConstraint(v, True, inf, True),
    }[p.op]


def _bounds(a_lo: Any, a_lc: bool, a_hi: Any, a_hc: bool, b_lo: Any, b_lc: bool, b_hi: Any,
            b_hc: bool) -> tuple[Any, bool, Any, bool]:
    """The intersection of two intervals (None: unbounded)."""
    if a_lo is None or (b_lo is not None and b_lo > a_lo):
        lo, lc = b_lo, b_lc
    elif b_lo is None or a_lo > b_lo:
        lo, lc = a_lo, a_lc
    else:
        lo, lc = a_lo, a_lc and b_lc
    if a_hi is None or (b_hi is not None and b_hi < a_hi):
        hi, hc = b_hi, b_hc
    elif b_hi is None or a_hi < b_hi:
        hi, hc = a_hi, a_hc
    else:
        hi, hc = a_hi, a_hc and b_hc
    return lo, lc, hi, hc


def _meet(a: frozenset[Any] | None, b: frozenset[Any] | None) -> frozenset[Any] | None:
    return b if a is None else a if b is None else a & b


def _intersect(a: NumericConstraint, b: NumericConstraint) -> NumericConstraint:
    lo, lc, hi, hc = _bounds(a.lo, a.lo_closed, a.hi, a.hi_closed, b.lo, b.lo_closed, b.hi,
                             b.hi_closed)
    c = NumericConstraint(lo, lc, hi, hc)
    values = _meet(a.values, b.values)
    if values is not None:
        values = frozenset(v for v in values if c.contains(v))
    return NumericConstraint(lo, lc, hi, hc, values)


def _numeric(attr: Attribute, preds: Sequence[Predicate]) -> NumericConstraint:
    c = NumericConstraint(attr.low, True, attr.high, True)  # type: ignore[union-attr]
    excluded: set[float] = set()
    for p in preds:
        if p.op in ("!=", "not in"):
            excluded.update(_number(p.attr, v, "value") for v in p.operands)
        elif p.op != "exists":
            c = _intersect(c, _numeric_piece(p))
    excluded = {v for v in excluded if c.contains(v)}
    values = None if c.values is None else c.values - excluded
    return replace(c, values=values, excluded=frozenset() if values is not None
                   else frozenset(excluded))


def _string_piece(p: Predicate, v: Any) -> StringConstraint:
    if p.op == "prefix":
        return StringConstraint(v, True, prefix_end(v), False)
    return {
        "=": StringConstraint(v, True, v, True, frozenset((v,))),
        "<": StringConstraint(None, True, v, False),
        "<=": StringConstraint(None, True, v, True),
        ">": StringConstraint(v, False, None, True),
        ">=": StringConstraint(v, True, None, True),
    }[p.op]


def _strings(attr: Attribute, preds: Sequence[Predicate]) -> StringConstraint:
    c = StringConstraint()
    excluded: set[str] = set()
    for p in preds:
        vals = [_string(attr, v) for v in p.operands]
        if p.op in ("!=", "not in"):
            excluded.update(vals)
            continue
        if p.op == "exists":
            continue
        if p.op == "in":
            piece = StringConstraint(values=frozenset(vals))
        elif p.op == "between":
            if vals[0] > vals[1]:
                raise PredicateError(
                    f"attribute {p.attr!r}: inverted range, low {vals[0]!r} > high "
                    f"{vals[1]!r}", field=p.attr, value=vals)
            piece = StringConstraint(vals[0], True, vals[1], True)
        else:
            piece = _string_piece(p, vals[0])
        lo, lc, hi, hc = _bounds(c.lo, c.lo_closed, c.hi, c.hi_closed, piece.lo,
                                 piece.lo_closed, piece.hi, piece.hi_closed)
        c = StringConstraint(lo, lc, hi, hc, _meet(c.values, piece.values))
    c = replace(c, excluded=frozenset(excluded))
    if c.values is not None:
        return replace(c, values=frozenset(v for v in c.values if c.contains(v)),
                       excluded=frozenset())
    return c


def _sets(attr: Attribute, preds: Sequence[Predicate]) -> tuple[frozenset[str] | None,
                                                                  frozenset[str]]:
    allowed: frozenset[str] | None = None
    excluded: set[str] = set()
    for p in preds:
        vals = frozenset(_string(attr, v) for v in p.operands)
        if p.op in ("!=", "not in"):
            excluded |= vals
        elif p.op in ("=", "in"):
            allowed = _meet(allowed, vals)
    return allowed, frozenset(excluded)


def compile_attribute(attr: Attribute, preds: Sequence[Predicate]) -> Constraint:
    """The constraint that ``preds`` (all on ``attr``) put on it; raises if it is empty."""
    for p in preds:
        _check_op(attr, p)
    ops = {p.op for p in preds}
    if "missing" in ops:
        if ops != {"missing"}:
            raise _empty_error(attr.name, preds)
        return Absent()
    c: Constraint
    if isinstance(attr, DiscreteAttribute):
        allowed, excluded = _sets(attr, preds)
        values = (frozenset(attr.values) if allowed is None else allowed) - excluded
        if not values:
            raise _empty_error(attr.name, preds)
        return DiscreteConstraint(values)
    if isinstance(attr, HashedAttribute):
        allowed, excluded = _sets(attr, preds)
        if allowed is not None:
            allowed, excluded = allowed - excluded, frozenset()
            if not allowed:
                raise _empty_error(attr.name, preds)
        return HashedConstraint(allowed, excluded)
    c = _strings(attr, preds) if isinstance(attr, StringAttribute) else _numeric(attr, preds)
    if c.is_empty():
        raise _empty_error(attr.name, preds)
    return c


# -- cells and interior ---------------------------------------------------------------------
def _unique(values: Any) -> np.ndarray:
    return np.unique(np.fromiter(values, dtype=np.int64))


def _range_ends(attr: Attribute, c: NumericConstraint | StringConstraint) -> tuple[int, int]:
    """First and last cell the interval touches."""
    if isinstance(c, NumericConstraint):
        lo, hi = c.effective_bounds()
        return attr.cell(lo), attr.cell(hi)  # type: ignore[arg-type]
    assert isinstance(attr, StringAttribute)  # noqa: S101 - compile pairs them
    first = 0 if c.lo is None else attr.cell(c.lo)
    if c.hi is None:
        return first, attr.n_values - 1
    return first, attr.cell(c.hi) if c.hi_closed else attr.cell_below(c.hi)


def cells(attr: Attribute, c: Constraint | None) -> np.ndarray:
    """Sorted cell indexes (int64) of ``attr`` that a constraint touches (None: all)."""
    if c is None:
        return np.arange(attr.n_cells, dtype=np.int64)
    if isinstance(c, Absent):
        return np.array([attr.n_values], dtype=np.int64)
    if isinstance(c, DiscreteConstraint | HashedConstraint) or c.values is not None:
        if c.values is None:
            return np.arange(attr.n_values, dtype=np.int64)
        return _unique(attr.cell(v) for v in c.values)  # type: ignore[arg-type]
    first, last = _range_ends(attr, c)
    return np.arange(first, last + 1, dtype=np.int64)


def interior(attr: Attribute, c: Constraint | None) -> np.ndarray:
    """One flag per cell of :func:`cells`: True where every value in the cell satisfies ``c``.

    A cell function is monotone, so a cell strictly between the cells of an interval's ends
    lies inside the interval; no arithmetic on cell edges is needed, and no cell is called
    interior that is not.
    """
    touched = cells(attr, c)
    if c is None or isinstance(c, Absent | DiscreteConstraint):
        return np.ones(len(touched), dtype=bool)
    if c.values is not None:
        return np.zeros(len(touched), dtype=bool)
    if isinstance(c, HashedConstraint):
        inside = np.ones(len(touched), dtype=bool)
    else:
        inside = (touched > _open_low(attr, c)) & (touched < _open_high(attr, c))
    if c.excluded:
        inside &= ~np.isin(touched, _unique(attr.cell(v) for v in c.excluded))  # type: ignore[arg-type]
    return inside


def _open_low(attr: Attribute, c: NumericConstraint | StringConstraint) -> int:
    """Cells above this one lie above the interval's low end (-1: the range is open below)."""
    if isinstance(c, NumericConstraint):
        lo = c.effective_bounds()[0]
        return -1 if lo <= attr.low else attr.cell(lo)  # type: ignore[union-attr,arg-type]
    return -1 if c.lo is None else attr.cell(c.lo)  # type: ignore[arg-type]


def _open_high(attr: Attribute, c: NumericConstraint | StringConstraint) -> int:
    """Cells below this one lie below the interval's high end."""
    if isinstance(c, NumericConstraint):
        hi = c.effective_bounds()[1]
        return attr.n_values if hi >= attr.high else attr.cell(hi)  # type: ignore[union-attr,arg-type]
    return attr.n_values if c.hi is None else attr.cell(c.hi)  # type: ignore[arg-type]
