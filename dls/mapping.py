"""The DLS mapping: an event becomes one label, a subscription a sorted set of labels.

Scalar functions serve the SDK and the broker's per-message checks; the ``*_batch``
functions do the same for whole numpy batches and are what hot paths call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from dls import _jit
from dls.exceptions import EventError, LabelBudgetError, PredicateError
from dls.space import (
    Attribute,
    ContentSpace,
    DiscreteAttribute,
    HashedAttribute,
    StringAttribute,
    is_number,
)

if _jit.ENABLED:
    from dls import _mapkernels

__all__ = [
    "CellSet",
    "box_labels_batch",
    "box_labels_batch_reference",
    "event_label",
    "event_labels_batch",
    "subscription_labels",
    "validate_event",
    "value_cell",
]


class CellSet(Protocol):
    """What the mapping reads of a subscription: its space and its cells per attribute.

    :class:`dls.predicates.Subscription` is one; the mapping does not import it, so that
    the arrow runs one way (predicates use the mapping for their labels).
    """

    space: ContentSpace

    def cells(self, attr: Attribute) -> np.ndarray:
        """Sorted cell indexes of ``attr`` that the subscription touches."""
        ...


def validate_event(space: ContentSpace, attrs: Any) -> tuple[int, ...]:
    """Check an event and return its cell index per attribute.

    An event must give every required attribute of the space, no other, each inside its
    domain; an optional attribute left out (or given as None) falls in its absent cell.
    """
    if not isinstance(attrs, Mapping):
        raise EventError(f"event attributes must be an object, got {attrs!r}", field="attrs",
                         value=attrs)
    names = space.names
    extra = [k for k in attrs if k not in space.by_name]
    if extra:
        raise EventError(f"unknown attribute {extra[0]!r} (the space has {list(names)})",
                         field=str(extra[0]), value=attrs[extra[0]])
    cells: list[int] = []
    for a in space.attributes:
        v = attrs.get(a.name)
        if v is None and a.optional:
            cells.append(a.n_values)
        elif a.name not in attrs:
            raise EventError(f"event lacks attribute {a.name!r}", field=a.name, value=None)
        else:
            cells.append(value_cell(a, v))
    return tuple(cells)


def value_cell(a: Attribute, v: Any) -> int:
    """The cell of one given value of ``a`` (raises :class:`EventError` naming it)."""
    if isinstance(a, DiscreteAttribute):
        if not isinstance(v, str):
            raise EventError(f"attribute {a.name!r} is discrete: value must be a string, "
                             f"got {v!r}", field=a.name, value=v)
        idx = a.index.get(v)
        if idx is None:
            raise EventError(f"attribute {a.name!r}: unknown value {v!r}", field=a.name,
                             value=v)
        return idx
    if isinstance(a, StringAttribute | HashedAttribute):
        if not isinstance(v, str):
            raise EventError(f"attribute {a.name!r} is a {a.kind} attribute: value must be a "
                             f"string, got {v!r}", field=a.name, value=v)
        try:
            return a.cell(v)
        except UnicodeEncodeError:
            raise EventError(f"attribute {a.name!r}: value {v!r} is not valid Unicode text",
                             field=a.name, value=v) from None
    if not is_number(v):
        raise EventError(f"attribute {a.name!r}: value must be a number, got {v!r}",
                         field=a.name, value=v)
    f = float(v)
    if math.isnan(f):
        raise EventError(f"attribute {a.name!r}: value is NaN", field=a.name, value=v)
    if not a.low <= f <= a.high:
        raise EventError(
            f"attribute {a.name!r}: value {v!r} is outside the domain [{a.low}, {a.high}]",
            field=a.name, value=v)
    return a.cell(f)


def event_label(space: ContentSpace, attrs: Any) -> int:
    """Label of one event (validated; raises :class:`EventError`)."""
    return space.compose(validate_event(space, attrs))


def event_labels_batch(
    space: ContentSpace, columns: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """Labels of a batch of events given as columns ``{attr: array}``.

    Returns ``(labels uint64, valid bool)``; an invalid row (out of domain, NaN, unknown
    discrete value) has ``valid`` False and label 0. Every column must be present and of
    one length.
    """
    missing = [n for n in space.names if n not in columns]
    if missing:
        raise EventError(f"event batch lacks attribute {missing[0]!r}", field=missing[0],
                         value=None)
    extra = [k for k in columns if k not in space.by_name]
    if extra:
        raise EventError(f"unknown attribute {extra[0]!r}", field=str(extra[0]), value=None)
    lengths = {len(columns[n]) for n in space.names}
    if len(lengths) != 1:
        raise EventError(f"event batch columns differ in length: {sorted(lengths)}",
                         field="attrs", value=sorted(lengths))
    n = lengths.pop()
    labels = np.full(n, space.app_prefix, dtype=np.uint64)
    valid = np.ones(n, dtype=bool)
    for a, s in zip(space.attributes, space.shifts, strict=True):
        col = columns[a.name]
        if a.optional or isinstance(a, StringAttribute | HashedAttribute):
            cells, ok = _cells_one_by_one(a, col)
        elif isinstance(a, DiscreteAttribute):
            cells = a.cells(np.asarray(col, dtype=str))
            ok = cells >= 0
        else:
            v = np.asarray(col, dtype=np.float64)
            ok = (v >= a.low) & (v <= a.high)  # NaN compares False
            cells = a.cells(np.where(ok, v, a.low))
        valid &= ok
        labels |= np.where(ok, cells, 0).astype(np.uint64) << np.uint64(s)
    labels[~valid] = 0
    return labels, valid


def _cells_one_by_one(a: Attribute, col: Any) -> tuple[np.ndarray, np.ndarray]:
    """Cells and validity of a column, value by value (optional, string and hashed)."""
    cells = np.zeros(len(col), dtype=np.int64)
    ok = np.ones(len(col), dtype=bool)
    for i, v in enumerate(col):
        if v is None and a.optional:
            cells[i] = a.n_values
            continue
        try:
            cells[i] = value_cell(a, v.item() if isinstance(v, np.generic) else v)
        except EventError:
            ok[i] = False
    return cells, ok


def _check_budget(space: ContentSpace, counts: list[int], budget: int | None, what: str) -> int:
    total = math.prod(counts)
    limit = space.filters.label_budget if budget is None else budget
    if total > limit:
        detail = ", ".join(f"{a.name}: {c}" for a, c in zip(space.attributes, counts,
                                                              strict=True))
        raise LabelBudgetError(
            f"{what} expands to {total} labels ({detail} cells), over the budget of {limit}",
            field="labels", value=total)
    return total


def subscription_labels(sub: CellSet, budget: int | None = None) -> np.ndarray:
    """Sorted unique uint64 labels of the cells a subscription touches (paper §3.3).

    ``budget`` defaults to the space's ``filters.label_budget``.
    """
    space = sub.space
    per_attr = [sub.cells(a) for a in space.attributes]
    _check_budget(space, [len(c) for c in per_attr], budget, f"subscription '{sub}'")
    # Cross product in C order: the first attribute varies slowest, so labels come out sorted.
    grids = np.meshgrid(*per_attr, indexing="ij")
    cells = np.stack([g.ravel() for g in grids], axis=1)
    return space.compose_many(cells)


def _box_totals(space: ContentSpace, lo_cells: np.ndarray, hi_cells: np.ndarray,
                budget: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Checked ``(lo, hi, widths, offsets)`` of N boxes (their labels' CSR offsets)."""
    lo = np.asarray(lo_cells, dtype=np.int64)
    hi = np.asarray(hi_cells, dtype=np.int64)
    if lo.shape != hi.shape or lo.ndim != 2 or lo.shape[1] != len(space.attributes):
        raise PredicateError(
            f"lo_cells and hi_cells must both be (n, {len(space.attributes)}), got "
            f"{lo.shape} and {hi.shape}", field="cells", value=(lo.shape, hi.shape))
    if np.any(hi < lo):
        row = int(np.flatnonzero((hi < lo).any(axis=1))[0])
        raise LabelBudgetError(f"box {row} has hi < lo", field="cells", value=row)
    widths = hi - lo + 1
    totals = np.prod(widths, axis=1)
    limit = space.filters.label_budget if budget is None else budget
    if totals.size and int(totals.max()) > limit:
        row = int(np.argmax(totals))
        raise LabelBudgetError(
            f"box {row} expands to {int(totals[row])} labels, over the budget of {limit}",
            field="labels", value=int(totals[row]))
    offsets = np.zeros(len(totals) + 1, dtype=np.int64)
    np.cumsum(totals, out=offsets[1:])
    return lo, hi, widths, offsets


def box_labels_batch_reference(
    space: ContentSpace, lo_cells: np.ndarray, hi_cells: np.ndarray,
    budget: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`box_labels_batch` in numpy (the reference of the compiled kernel)."""
    lo, _, widths, offsets = _box_totals(space, lo_cells, hi_cells, budget)
    totals = np.diff(offsets)
    owner = np.repeat(np.arange(len(totals)), totals)
    rem = np.arange(int(offsets[-1]), dtype=np.int64) - offsets[:-1][owner]
    labels = np.full(len(rem), space.app_prefix, dtype=np.uint64)
    for i in range(len(space.attributes) - 1, -1, -1):
        w = widths[owner, i]
        digit = rem % w
        rem //= w
        labels |= (lo[owner, i] + digit).astype(np.uint64) << np.uint64(space.shifts[i])
    return offsets, labels


def _box_labels_batch_compiled(
    space: ContentSpace, lo_cells: np.ndarray, hi_cells: np.ndarray,
    budget: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    lo, hi, _, offsets = _box_totals(space, lo_cells, hi_cells, budget)
    labels = np.empty(int(offsets[-1]), dtype=np.uint64)
    _mapkernels.box_labels_into(np.ascontiguousarray(lo), np.ascontiguousarray(hi),
                                np.asarray(space.shifts, dtype=np.int64),
                                np.uint64(space.app_prefix), offsets, labels)
    return offsets, labels


def box_labels_batch(
    space: ContentSpace, lo_cells: np.ndarray, hi_cells: np.ndarray,
    budget: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Expand N boxes of cells (inclusive ``lo..hi`` per attribute) into labels, vectorised.

    Returns CSR ``(offsets int64 of length N+1, labels uint64)``; each box's labels are sorted.
    A compiled kernel (:mod:`dls._mapkernels`) unless ``DLS_NO_JIT=1``.
    """
    if _jit.ENABLED:
        return _box_labels_batch_compiled(space, lo_cells, hi_cells, budget)
    return box_labels_batch_reference(space, lo_cells, hi_cells, budget)
