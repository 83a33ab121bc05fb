"""Predicates, subscriptions and exact matching.

A subscription is a conjunction of predicates. JSON form, one object per predicate::

    {"attr": "price", "op": "between", "low": 10, "high": 20}
    {"attr": "vol", "op": ">=", "value": 100}          # ops =, <, <=, >, >=
    {"attr": "sym", "op": "in", "values": ["AAPL", "IBM"]}

Text form for people: ``price between 10 and 20 and vol >= 100 and sym in (AAPL, IBM)``.

``between`` is inclusive, ``<`` and ``>`` are strict, an attribute left out matches its
whole domain, and predicates are clipped to the domain. Several predicates on one attribute
intersect. A subscription that can match nothing, names an unknown attribute, has
``low > high``, a NaN, or a value of the wrong type is refused with a
:class:`~dls.exceptions.PredicateError` naming the attribute and the value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dls.exceptions import PredicateError
from dls.mapping import subscription_labels
from dls.space import (
    Attribute,
    ContentSpace,
    DiscreteAttribute,
    is_number,
)

__all__ = [
    "OPS",
    "DiscreteConstraint",
    "NumericConstraint",
    "Predicate",
    "Subscription",
    "parse_text",
    "parse_where",
]

OPS = ("between", "=", "<", "<=", ">", ">=", "in")
_COMPARISONS = ("=", "<", "<=", ">", ">=")


def _fmt(v: Any) -> str:
    if isinstance(v, str):
        return v if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", v) and v.lower() not in (
            "and", "between", "in") else '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


@dataclass(frozen=True)
class Predicate:
    """One predicate: ``attr op operands``; operands are (low, high), (value,) or values."""

    attr: str
    op: str
    operands: tuple[Any, ...]

    @classmethod
    def from_json(cls, obj: Any) -> Predicate:
        """Validate the shape of one JSON predicate (not yet against a space)."""
        if not isinstance(obj, Mapping):
            raise PredicateError(f"a predicate must be an object, got {obj!r}",
                                 field="where", value=obj)
        attr, op = obj.get("attr"), obj.get("op")
        if not isinstance(attr, str) or not attr:
            raise PredicateError(f"predicate attr must be a non-empty string, got {attr!r}",
                                 field="attr", value=attr)
        if op not in OPS:
            raise PredicateError(f"attribute {attr!r}: unknown op {op!r} (one of {list(OPS)})",
                                 field=attr, value=op)
        want = {"between": {"low", "high"}, "in": {"values"}}.get(op, {"value"})
        keys = set(obj) - {"attr", "op"}
        if keys != want:
            raise PredicateError(
                f"attribute {attr!r}: op {op!r} takes keys {sorted(want)}, got {sorted(keys)}",
                field=attr, value=dict(obj))
        if op == "between":
            return cls(attr, op, (obj["low"], obj["high"]))
        if op == "in":
            values = obj["values"]
            if not isinstance(values, list) or not values:
                raise PredicateError(
                    f"attribute {attr!r}: 'in' needs a non-empty list of values, got {values!r}",
                    field=attr, value=values)
            return cls(attr, op, tuple(values))
        return cls(attr, op, (obj["value"],))

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        if self.op == "between":
            return {"attr": self.attr, "op": "between", "low": self.operands[0],
                    "high": self.operands[1]}
        if self.op == "in":
            return {"attr": self.attr, "op": "in", "values": list(self.operands)}
        return {"attr": self.attr, "op": self.op, "value": self.operands[0]}

    def to_text(self) -> str:
        """Text form."""
        if self.op == "between":
            return f"{self.attr} between {_fmt(self.operands[0])} and {_fmt(self.operands[1])}"
        if self.op == "in":
            return f"{self.attr} in ({', '.join(_fmt(v) for v in self.operands)})"
        return f"{self.attr} {self.op} {_fmt(self.operands[0])}"


# --- text form -----------------------------------------------------------------------------
_TOKEN_RE = re.compile(
    r"""\s*(?:
        (?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![A-Za-z_]))
      | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<op><=|>=|<|>|=|\(|\)|,)
      | (?P<word>[A-Za-z_][A-Za-z0-9_.\-]*)
    )""",
    re.VERBOSE,
)


def _tokenize(text: str) -> list[tuple[str, Any]]:
    tokens: list[tuple[str, Any]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m or m.end() == pos:
            raise PredicateError(f"cannot read subscription text at {text[pos:pos + 20]!r}",
                                 field="where", value=text)
        pos = m.end()
        if m.group("num") is not None:
            s = m.group("num")
            tokens.append(("val", int(s) if re.fullmatch(r"[-+]?\d+", s) else float(s)))
        elif m.group("str") is not None:
            s = m.group("str")[1:-1]
            tokens.append(("val", re.sub(r"\\(.)", r"\1", s)))
        elif m.group("op") is not None:
            tokens.append(("op", m.group("op")))
        else:
            tokens.append(("word", m.group("word")))
    return tokens


def parse_text(text: str) -> list[Predicate]:
    """Parse ``a between 1 and 2 and b >= 3 and c in (x, y)`` into predicates."""
    if not isinstance(text, str):
        raise PredicateError(f"subscription text must be a string, got {text!r}", field="where",
                             value=text)
    toks = _tokenize(text)
    i = 0

    def err(msg: str) -> PredicateError:
        return PredicateError(f"{msg} in subscription text {text!r}", field="where", value=text)

    def value() -> Any:
        nonlocal i
        if i >= len(toks) or toks[i][0] not in ("val", "word"):
            raise err("expected a value")
        kind, v = toks[i]
        i += 1
        if kind == "word" and v.lower() in ("and", "between", "in"):
            raise err(f"expected a value, got keyword {v!r}")
        if kind == "word" and v.lower() in ("nan", "inf", "infinity", "-inf"):
            return float(v)
        return v

    def keyword(word: str) -> bool:
        return i < len(toks) and toks[i][0] == "word" and toks[i][1].lower() == word

    preds: list[Predicate] = []
    if not toks:
        return preds
    while True:
        if i >= len(toks) or toks[i][0] != "word":
            raise err("expected an attribute name")
        attr = toks[i][1]
        i += 1
        if keyword("between"):
            i += 1
            low = value()
            if not keyword("and"):
                raise err("expected 'and' inside between")
            i += 1
            preds.append(Predicate(attr, "between", (low, value())))
        elif keyword("in"):
            i += 1
            if i >= len(toks) or toks[i] != ("op", "("):
                raise err("expected '(' after in")
            i += 1
            vals = [value()]
            while i < len(toks) and toks[i] == ("op", ","):
                i += 1
                vals.append(value())
            if i >= len(toks) or toks[i] != ("op", ")"):
                raise err("expected ')'")
            i += 1
            preds.append(Predicate(attr, "in", tuple(vals)))
        elif i < len(toks) and toks[i][0] == "op" and toks[i][1] in _COMPARISONS:
            op = toks[i][1]
            i += 1
            preds.append(Predicate(attr, op, (value(),)))
        else:
            raise err(f"expected an operator after {attr!r}")
        if i == len(toks):
            return preds
        if not keyword("and"):
            raise err("expected 'and' between predicates")
        i += 1


def parse_where(where: Any) -> list[Predicate]:
    """Accept the JSON list form, the text form, or a list of :class:`Predicate`."""
    if isinstance(where, str):
        return parse_text(where)
    if isinstance(where, list | tuple):
        return [p if isinstance(p, Predicate) else Predicate.from_json(p) for p in where]
    raise PredicateError(
        f"'where' must be a list of predicates or a text expression, got {where!r}",
        field="where", value=where)


# --- compiled constraints ------------------------------------------------------------------
@dataclass(frozen=True)
class NumericConstraint:
    """Closed/open interval, optionally restricted to a finite set of values."""

    lo: float
    lo_closed: bool
    hi: float
    hi_closed: bool
    values: frozenset[float] | None = None

    def contains(self, v: float) -> bool:
        """Exact membership of one value."""
        if self.values is not None and v not in self.values:
            return False
        if v < self.lo or (v == self.lo and not self.lo_closed):
            return False
        return not (v > self.hi or (v == self.hi and not self.hi_closed))

    def contains_many(self, v: np.ndarray) -> np.ndarray:
        """Exact membership of an array of values."""
        ok = (v > self.lo) if not self.lo_closed else (v >= self.lo)
        ok &= (v < self.hi) if not self.hi_closed else (v <= self.hi)
        if self.values is not None:
            ok &= np.isin(v, np.fromiter(self.values, dtype=np.float64))
        return ok

    def effective_bounds(self) -> tuple[float, float]:
        """Smallest and largest float64 inside the interval (may cross if empty)."""
        lo = self.lo if self.lo_closed else math.nextafter(self.lo, math.inf)
        hi = self.hi if self.hi_closed else math.nextafter(self.hi, -math.inf)
        return lo, hi

    def is_empty(self) -> bool:
        """True when no value can satisfy the constraint."""
        lo, hi = self.effective_bounds()
        if lo > hi:
            return True
        return self.values is not None and not any(self.contains(v) for v in self.values)


@dataclass(frozen=True)
class DiscreteConstraint:
    """A set of allowed values of a discrete attribute."""

    values: frozenset[str]

    def contains(self, v: Any) -> bool:
        """Exact membership of one value."""
        return v in self.values


Constraint = NumericConstraint | DiscreteConstraint


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


def _intersect(a: NumericConstraint, b: NumericConstraint) -> NumericConstraint:
    if a.lo > b.lo:
        lo, lo_closed = a.lo, a.lo_closed
    elif b.lo > a.lo:
        lo, lo_closed = b.lo, b.lo_closed
    else:
        lo, lo_closed = a.lo, a.lo_closed and b.lo_closed
    if a.hi < b.hi:
        hi, hi_closed = a.hi, a.hi_closed
    elif b.hi < a.hi:
        hi, hi_closed = b.hi, b.hi_closed
    else:
        hi, hi_closed = a.hi, a.hi_closed and b.hi_closed
    if a.values is None:
        values = b.values
    elif b.values is None:
        values = a.values
    else:
        values = a.values & b.values
    c = NumericConstraint(lo, lo_closed, hi, hi_closed, None)
    if values is not None:
        values = frozenset(v for v in values if c.contains(v))
    return NumericConstraint(lo, lo_closed, hi, hi_closed, values)


def _discrete_piece(attr: DiscreteAttribute, p: Predicate) -> DiscreteConstraint:
    if p.op not in ("=", "in"):
        raise PredicateError(
            f"attribute {p.attr!r} is discrete: only '=' and 'in' apply, got {p.op!r}",
            field=p.attr, value=p.op)
    idx = attr.index
    for v in p.operands:
        if not isinstance(v, str):
            raise PredicateError(
                f"attribute {p.attr!r} is discrete: values must be strings, got {v!r}",
                field=p.attr, value=v)
        if v not in idx:
            raise PredicateError(f"attribute {p.attr!r}: unknown value {v!r}", field=p.attr,
                                 value=v)
    return DiscreteConstraint(frozenset(p.operands))


def _empty_error(attr: str, preds: Sequence[Predicate]) -> PredicateError:
    text = " and ".join(p.to_text() for p in preds)
    return PredicateError(
        f"attribute {attr!r}: '{text}' can match nothing inside the domain", field=attr,
        value=[p.to_json() for p in preds])


class Subscription:
    """A compiled conjunction of predicates over one content space."""

    __slots__ = ("_constraints", "_labels", "predicates", "space")

    def __init__(self, space: ContentSpace, where: Any):
        """Compile ``where`` (JSON list, text, or predicates) against ``space``."""
        self.space = space
        self.predicates: tuple[Predicate, ...] = tuple(parse_where(where))
        by_name = space.by_name
        grouped: dict[str, list[Predicate]] = {}
        for p in self.predicates:
            if p.attr not in by_name:
                raise PredicateError(f"unknown attribute {p.attr!r} (the space has "
                                     f"{list(space.names)})", field=p.attr, value=p.attr)
            grouped.setdefault(p.attr, []).append(p)
        constraints: dict[str, Constraint] = {}
        for name, preds in grouped.items():
            attr: Attribute = by_name[name]
            if isinstance(attr, DiscreteAttribute):
                allowed = frozenset(attr.values)
                for p in preds:
                    allowed &= _discrete_piece(attr, p).values
                if not allowed:
                    raise _empty_error(name, preds)
                constraints[name] = DiscreteConstraint(allowed)
            else:
                c = NumericConstraint(attr.low, True, attr.high, True)
                for p in preds:
                    c = _intersect(c, _numeric_piece(p))
                if c.is_empty():
                    raise _empty_error(name, preds)
                constraints[name] = c
        self._constraints = constraints
        self._labels: np.ndarray | None = None

    @property
    def constraints(self) -> Mapping[str, Constraint]:
        """Compiled constraint per constrained attribute (left-out attributes are absent)."""
        return self._constraints

    def cells(self, attr: Attribute) -> np.ndarray:
        """Sorted cell indexes of ``attr`` that the subscription touches."""
        c = self._constraints.get(attr.name)
        if c is None:
            return np.arange(attr.n_cells, dtype=np.int64)
        if isinstance(c, DiscreteConstraint):
            assert isinstance(attr, DiscreteAttribute)  # noqa: S101 - guaranteed by compile
            return np.sort(np.fromiter((attr.cell(v) for v in c.values), dtype=np.int64))
        assert not isinstance(attr, DiscreteAttribute)  # noqa: S101 - guaranteed by compile
        if c.values is not None:
            vals = np.fromiter(c.values, dtype=np.float64)
            return np.unique(attr.cells(vals))
        lo, hi = c.effective_bounds()
        return np.arange(attr.cell(lo), attr.cell(hi) + 1, dtype=np.int64)

    def n_labels(self) -> int:
        """Number of labels (cells) the subscription expands to."""
        return math.prod(len(self.cells(a)) for a in self.space.attributes)

    def labels(self, budget: int | None = None) -> np.ndarray:
        """Sorted unique uint64 labels of every cell the subscription touches (paper §3.3)."""
        if self._labels is None:
            self._labels = subscription_labels(self, budget)
        elif budget is not None and len(self._labels) > budget:
            subscription_labels(self, budget)  # raises the budget error
        return self._labels

    def matches(self, event: Mapping[str, Any]) -> bool:
        """Exact test of a (valid) event against every predicate."""
        for name, c in self._constraints.items():
            v = event.get(name)
            if isinstance(c, DiscreteConstraint):
                if not c.contains(v):
                    return False
            elif not is_number(v) or not c.contains(float(v)):  # type: ignore[arg-type]
                return False
        return True

    def to_json(self) -> list[dict[str, Any]]:
        """JSON list form of the predicates."""
        return [p.to_json() for p in self.predicates]

    def __str__(self) -> str:
        return " and ".join(p.to_text() for p in self.predicates) or "(everything)"

    def __repr__(self) -> str:
        return f"Subscription({str(self)!r})"


def compile_many(space: ContentSpace, wheres: Iterable[Any]) -> list[Subscription]:
    """Compile several subscriptions (errors propagate)."""
    return [Subscription(space, w) for w in wheres]
