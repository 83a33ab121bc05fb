"""Exact delivery at the edge: which cells of a subscription can hold a non-matching event.

A subscription's labels are the cells it touches. An event in an *interior* cell (one that
lies wholly inside the subscription) matches it whatever its value; only an event in a
*boundary* cell can be a false positive, and only there does the node a client is attached
to need the event's value to deliver exactly.

Per attribute, a cell is interior when every in-domain value that falls in it satisfies the
attribute's constraint:

* an attribute the subscription leaves out: every cell;
* a discrete attribute: every cell it touches (one cell per value);
* a numeric range ``[lo, hi]`` (its effective bounds, open ends resolved): the cells
  strictly between ``cell(lo)`` and ``cell(hi)``, and the end cells too where the range
  reaches the domain's edge. A cell function is monotone, so a value of a cell strictly
  between the two cannot lie outside the range; no float arithmetic on cell edges is
  needed, and no cell is called interior that is not;
* a numeric ``in`` set of values: no cell.

A label is interior when its cell is interior in every attribute. :func:`interior_mask`
gives one flag per label, aligned with :meth:`~dls.predicates.Subscription.labels`.

:func:`numeric_bounds` gives what the exact check of a boundary cell needs: per numeric
attribute, the smallest and largest float64 inside the constraint (the domain's edges
where the attribute is left out). A value ``v`` in the domain satisfies the constraint when
``lo <= v <= hi``, except for a numeric ``in`` set, which :func:`needs_values` flags.
"""

from __future__ import annotations

import numpy as np

from dls.predicates import DiscreteConstraint, NumericConstraint, Subscription
from dls.space import Attribute, ContentSpace, DiscreteAttribute

__all__ = ["interior_cells", "interior_mask", "needs_values", "numeric_attributes",
           "numeric_bounds"]


def interior_cells(sub: Subscription, attr: Attribute) -> np.ndarray:
    """One flag per cell of ``sub.cells(attr)``: True where the cell is interior."""
    cells = sub.cells(attr)
    c = sub.constraints.get(attr.name)
    if c is None or isinstance(c, DiscreteConstraint):
        return np.ones(len(cells), dtype=bool)
    if isinstance(attr, DiscreteAttribute) or c.values is not None:
        return np.zeros(len(cells), dtype=bool)
    lo, hi = c.effective_bounds()
    low, high = float(attr.low), float(attr.high)
    c_lo = -1 if lo <= low else attr.cell(lo)
    c_hi = attr.n_cells if hi >= high else attr.cell(hi)
    return (cells > c_lo) & (cells < c_hi)


def interior_mask(sub: Subscription) -> np.ndarray:
    """One flag per label of ``sub.labels()`` (same order): True where the cell is interior.

    The labels are the cross product of the attributes' cells with the first attribute
    varying slowest; the flags are the same product of the per-attribute flags (AND).
    """
    space = sub.space
    flags = [interior_cells(sub, a) for a in space.attributes]
    grids = np.meshgrid(*flags, indexing="ij")
    out = np.ones(grids[0].shape, dtype=bool)
    for g in grids:
        out &= g
    return out.ravel()


def numeric_attributes(space: ContentSpace) -> tuple[str, ...]:
    """The names of the space's numeric attributes, in the space's order."""
    return tuple(a.name for a in space.attributes if not isinstance(a, DiscreteAttribute))


def numeric_bounds(sub: Subscription) -> np.ndarray:
    """``(n, 2)`` float64: ``[lo, hi]`` inside the constraint of each numeric attribute."""
    rows = []
    for a in sub.space.attributes:
        if isinstance(a, DiscreteAttribute):
            continue
        c = sub.constraints.get(a.name)
        if c is None:
            rows.append((float(a.low), float(a.high)))
        else:
            assert isinstance(c, NumericConstraint)  # noqa: S101 - guaranteed by compile
            rows.append(c.effective_bounds())
    return np.array(rows, dtype=np.float64).reshape(-1, 2)


def needs_values(sub: Subscription) -> bool:
    """True when a numeric constraint is a set of values (bounds alone cannot check it)."""
    return any(isinstance(c, NumericConstraint) and c.values is not None
               for c in sub.constraints.values())
