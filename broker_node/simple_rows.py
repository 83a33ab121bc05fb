"""A simple row of the exact check read straight from a ``where`` text, without compiling it.

A node takes subscriptions as fast as it can read them, and compiling each ``where``
(tokens, predicates, constraints, labels: :class:`dls.predicates.Subscription`) costs far
more than the rest of taking one. Most subscriptions are *simple* (one conjunction of
numeric ranges and discrete sets, ``!=`` and ``not in`` included, on required attributes)
and arrive in the text the SDK writes
(``sym in (IBM, TSLA) and price between 412.5 and 419 and change >= -3.1``). For those,
:func:`simple_row` reads the text with one regular expression and builds the row
(:data:`broker_node.edge.SimpleParts`: float bounds per numeric attribute, a cell mask per
discrete one) by the same rules as :mod:`dls.constraints`: every predicate on an attribute
intersected with its domain, open ends moved to the next float inwards.

It answers only when it is sure: anything else (OR, quotes, a numeric ``!=`` or ``in`` set,
an optional or string attribute, an unknown attribute or value, a range that can match
nothing, any spelling but the SDK's) returns None and the caller compiles the text as
before. ``tests/broker_node/test_simple_rows.py`` holds its rows equal to those of the
compiled subscriptions.
"""

from __future__ import annotations

import math
import re

import numpy as np

from dls.space import BreakpointAttribute, ContentSpace, DiscreteAttribute, UniformAttribute

__all__ = ["simple_row"]

_NUM = r"-?\d+(?:\.\d+)?"
_WORD = r"[A-Za-z_][A-Za-z0-9_.\-]*"
_PRED = re.compile(
    rf"({_WORD}) (?:between ({_NUM}) and ({_NUM})|(<=|>=|<|>|=|!=) ({_NUM}|{_WORD})"
    rf"|(in|not in) \(((?:{_WORD}|{_NUM})(?:, (?:{_WORD}|{_NUM}))*)\))(?: and |$)")
_IS_NUM = re.compile(_NUM)
_IS_WORD = re.compile(_WORD)

#: (lo, lo closed, hi, hi closed) of a numeric comparison with value v
_PIECES = {
    "=": lambda v: (v, True, v, True),
    "<": lambda v: (-math.inf, True, v, False),
    "<=": lambda v: (-math.inf, True, v, True),
    ">": lambda v: (v, False, math.inf, True),
    ">=": lambda v: (v, True, math.inf, True),
}


def _meet(a: tuple[float, bool, float, bool], b: tuple[float, bool, float, bool]
          ) -> tuple[float, bool, float, bool]:
    """The intersection of two intervals (as :func:`dls.constraints._bounds` takes it)."""
    if b[0] > a[0]:
        lo, lc = b[0], b[1]
    elif a[0] > b[0]:
        lo, lc = a[0], a[1]
    else:
        lo, lc = a[0], a[1] and b[1]
    if b[2] < a[2]:
        hi, hc = b[2], b[3]
    elif a[2] < b[2]:
        hi, hc = a[2], a[3]
    else:
        hi, hc = a[2], a[3] and b[3]
    return lo, lc, hi, hc


class _Plan:
    """What reading a space's rows needs, worked out once per space."""

    def __init__(self, space: ContentSpace) -> None:
        self.space = space
        numeric = [a for a in space.attributes
                   if isinstance(a, UniformAttribute | BreakpointAttribute)]
        self.numeric = [a.name for a in space.attributes if a.kind == "numeric"]
        #: every numeric attribute is of a kind read here (else no row is read: compiled)
        self.known = self.numeric == [a.name for a in numeric]
        self.domain = {a.name: (float(a.low), True, float(a.high), True) for a in numeric}
        #: per discrete attribute: name, words, its values' cells
        self.discrete = [(a.name, (a.n_cells + 63) // 64, dict(a.index))
                         for a in space.attributes if isinstance(a, DiscreteAttribute)]
        self.full = [np.frombuffer(((1 << a.n_cells) - 1).to_bytes(8 * w, "little"),
                                   dtype="<u8").astype(np.uint64)
                     for a, (_, w, _) in zip((a for a in space.attributes
                                              if isinstance(a, DiscreteAttribute)),
                                             self.discrete, strict=True)]


_PLANS: dict[int, _Plan] = {}


def _plan(space: ContentSpace) -> _Plan:
    plan = _PLANS.get(id(space))
    if plan is None or plan.space is not space:
        if len(_PLANS) > 64:
            _PLANS.clear()
        plan = _PLANS[id(space)] = _Plan(space)
    return plan


def simple_row(space: ContentSpace, where: str | None
               ) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """The simple row of ``where`` (bounds per numeric attribute, masks per discrete one).

    None when the text is not a simple subscription in the SDK's spelling, or when any
    doubt remains: the caller then compiles it.
    """
    if not where:
        return None
    by_name = space.by_name
    plan = _plan(space)
    if not plan.known:
        return None
    domain = plan.domain
    intervals: dict[str, tuple[float, bool, float, bool]] = {}
    sets: dict[str, frozenset[str]] = {}
    excluded: dict[str, frozenset[str]] = {}
    pos, end = 0, len(where)
    match = _PRED.match
    while pos < end:
        m = match(where, pos)
        if m is None:
            return None
        pos = m.end()
        name, lo, hi, op, value, set_op, listed = m.groups()
        start = domain.get(name)
        if start is not None:  # a numeric attribute
            if by_name[name].optional:
                return None
            if lo is not None:
                low, high = float(lo), float(hi)
                if low > high:
                    return None
                piece = (low, True, high, True)
            elif op is not None and op != "!=" and _IS_NUM.fullmatch(value):
                piece = _PIECES[op](float(value))
            else:
                return None
            intervals[name] = _meet(intervals.get(name, start), piece)
            continue
        a = by_name.get(name)
        if not isinstance(a, DiscreteAttribute) or a.optional or lo is not None:
            return None
        vals = [value] if op is not None else listed.split(", ")
        index = a.index
        if op not in ("=", "!=", None) or not all(
                v in index and _IS_WORD.fullmatch(v) for v in vals):
            return None
        if op == "!=" or set_op == "not in":
            excluded[name] = excluded.get(name, frozenset()) | frozenset(vals)
        else:
            sets[name] = sets[name] & frozenset(vals) if name in sets else frozenset(vals)
    flat: list[float] = []
    for name in plan.numeric:
        iv = intervals.get(name)
        if iv is None:
            flat += (-math.inf, math.inf)
            continue
        low = iv[0] if iv[1] else math.nextafter(iv[0], math.inf)
        high = iv[2] if iv[3] else math.nextafter(iv[2], -math.inf)
        if low > high:
            return None  # can match nothing: the compiler says so
        flat += (low, high)
    bounds = np.array(flat, dtype=np.float64).reshape(len(plan.numeric), 2)
    masks = []
    for (name, words, index), full in zip(plan.discrete, plan.full, strict=True):
        allowed = sets.get(name)
        if allowed is None and name not in excluded:
            masks.append(full)
            continue
        left = (frozenset(index) if allowed is None else allowed) - excluded.get(
            name, frozenset())
        if not left:
            return None  # can match nothing: the compiler says so
        bits = 0
        for v in left:
            bits |= 1 << index[v]
        masks.append(np.frombuffer(bits.to_bytes(8 * words, "little"), dtype="<u8")
                     .astype(np.uint64))
    return bounds, masks
