"""Exact delivery at the edge: which cells of a subscription can hold a non-matching event.

A subscription's labels are the cells it touches. An event in an *interior* cell (one that
lies wholly inside the subscription) matches it whatever its value; only an event in a
*boundary* cell can be a false positive, and only there does the node a client is attached
to need the event's value to deliver exactly.

Per attribute and alternative, which cells are interior is :func:`dls.constraints.interior`
(an attribute left out, a discrete set, the absent cell of ``missing``: every cell; a range:
the cells strictly between its ends' cells, minus the cells of excluded values; a finite
set of numbers or strings: none). A label is interior in an alternative when its cell is
interior in every attribute, and interior in the subscription when it is in some
alternative. :func:`interior_mask` gives one flag per label, aligned with
:meth:`~dls.predicates.Subscription.labels`.

:func:`numeric_bounds` gives what the vectorised check of a boundary cell needs for a
:attr:`~dls.predicates.Subscription.is_simple` subscription: per numeric attribute, the
smallest and largest float64 inside the constraint (the domain's edges where the attribute is
left out). A value ``v`` in the domain satisfies the constraint when ``lo <= v <= hi``,
except for a numeric ``in`` set, which :func:`needs_values` flags.
"""

from __future__ import annotations

import numpy as np

from dls import constraints as _c
from dls.predicates import DiscreteConstraint, NumericConstraint, Subscription
from dls.space import Attribute, ContentSpace

__all__ = ["interior_cells", "interior_labels", "interior_mask", "needs_values",
           "numeric_attributes", "numeric_bounds"]


def interior_cells(sub: Subscription, attr: Attribute) -> np.ndarray:
    """One flag per cell of ``sub.cells(attr)`` (one alternative): True where interior."""
    return _c.interior(attr, sub.constraints.get(attr.name))


def _product(flags: list[np.ndarray]) -> np.ndarray:
    grids = np.meshgrid(*flags, indexing="ij")
    out = np.ones(grids[0].shape, dtype=bool)
    for g in grids:
        out &= g
    return out.ravel()


def interior_mask(sub: Subscription) -> np.ndarray:
    """One flag per label of ``sub.labels()`` (same order): True where the cell is interior.

    An alternative's labels are the cross product of the attributes' cells with the first
    attribute varying slowest; its flags are the same product of the per-attribute flags
    (AND). Over several alternatives a label is interior when it is in any of them.
    """
    space = sub.space
    alts = sub.alternatives
    if len(alts) == 1:
        cons = alts[0].constraints
        return _product([_c.interior(a, cons.get(a.name)) for a in space.attributes])
    labels = sub.labels()
    return np.isin(labels, interior_labels(sub), assume_unique=False)


def interior_labels(sub: Subscription) -> np.ndarray:
    """Sorted labels of the subscription's interior cells."""
    space = sub.space
    parts = []
    for alt in sub.alternatives:
        per = [alt.cells(a) for a in space.attributes]
        flags = _product([_c.interior(a, alt.constraints.get(a.name))
                          for a in space.attributes])
        grids = np.meshgrid(*per, indexing="ij")
        cells = np.stack([g.ravel() for g in grids], axis=1)
        parts.append(space.compose_many(cells[flags]))
    return np.unique(np.concatenate(parts))


def numeric_attributes(space: ContentSpace) -> tuple[str, ...]:
    """The names of the space's numeric attributes, in the space's order."""
    return tuple(a.name for a in space.attributes if a.kind == "numeric")


def numeric_bounds(sub: Subscription) -> np.ndarray:
    """``(n, 2)`` float64: ``[lo, hi]`` inside the constraint of each numeric attribute."""
    rows = []
    for a in sub.space.attributes:
        if a.kind != "numeric":
            continue
        c = sub.constraints.get(a.name)
        if c is None:
            rows.append((float(a.low), float(a.high)))  # type: ignore[union-attr]
        else:
            assert isinstance(c, NumericConstraint)  # noqa: S101 - guaranteed by compile
            rows.append(c.effective_bounds())
    return np.array(rows, dtype=np.float64).reshape(-1, 2)


def needs_values(sub: Subscription) -> bool:
    """True when a numeric constraint is a set of values (bounds alone cannot check it)."""
    return any(isinstance(c, NumericConstraint) and c.values is not None
               for c in sub.constraints.values())


_ = DiscreteConstraint  # re-exported for the node's table
