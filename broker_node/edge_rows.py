"""What a row of the exact check is, and the cells and values it is compared with.

A *simple* row (:func:`simple_parts`: one alternative of numeric ranges and discrete sets on
required attributes) is float bounds per numeric attribute and a cell mask per discrete one;
any other subscription is a *general* row (:func:`general_row`: the subscription, its
labels and its interior labels), with the :func:`hull` of its numeric bounds as a first
test. :func:`row_cells` gives the cells a row holds and holds wholly, :func:`label_cells`
the cells of labels. The table that keeps
rows is :class:`broker_node.edge.EdgeTable`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from dls import _indexkernels as _ik
from dls.edge import interior_labels
from dls.exact_row import SimpleParts, simple_parts
from dls.predicates import NumericConstraint, Subscription
from dls.space import ContentSpace

__all__ = ["CHECK", "NONE", "SURE", "EdgeRows", "RowChecker", "SimpleParts", "Verdict",
           "cut_columns", "general_row", "has_label", "hull", "label_cells", "row_cells",
           "simple_held", "simple_parts", "values_match"]

#: What the edge does with a candidate client for a label: deliver, check its values, drop.
SURE, CHECK, NONE = 0, 1, 2
_EMPTY32 = np.zeros(0, dtype=np.int32)


class RowChecker(Protocol):
    """What checks an event against a CHECK verdict's rows (an EdgeTable)."""

    def matches(self, verdict: Verdict, event: dict[str, Any], values: np.ndarray) -> bool:
        """Whether the event passes ``verdict``."""


@dataclass(frozen=True)
class Verdict:
    """What the edge does with one candidate client for one label."""

    kind: int  # SURE, CHECK or NONE
    rows: np.ndarray = field(default_factory=lambda: _EMPTY32)  # CHECK: rows cutting the cell
    table: RowChecker | None = field(default=None, compare=False, repr=False)  # CHECK: whose


def values_match(verdict: Verdict, values: np.ndarray, event: dict[str, Any]) -> bool:
    """Whether an event passes ``verdict`` (one of :meth:`EdgeTable.verdicts`).

    ``values``: its numeric values in the table's order; ``event``: its attributes.
    """
    if verdict.kind != CHECK:
        return verdict.kind == SURE
    assert verdict.table is not None  # noqa: S101 - a CHECK verdict names its table
    return verdict.table.matches(verdict, event, values)


@dataclass(frozen=True)
class EdgeRows:
    """The checked subscriptions of a snapshot (a general row: its hull, its ``where``)."""

    index: np.ndarray  # int64: which of the snapshot's subscriptions these rows are
    bounds: np.ndarray  # (rows, numeric attributes, 2) float64
    masks: list[np.ndarray]  # per discrete attribute, (rows, words) uint64
    sets: dict[int, str]  # subscription index -> its JSON where (a general row: compiled)


def general_row(sub: Subscription) -> tuple[Subscription, np.ndarray, np.ndarray]:
    """A general row: the subscription, its sorted labels, its sorted interior labels."""
    return sub, sub.labels(), interior_labels(sub)


def hull(sub: Subscription, numeric: list[int]) -> np.ndarray:
    """``(numeric attributes, 2)``: bounds that hold every matching event's values.

    Per attribute the widest of the alternatives' effective bounds; ``[-inf, inf]`` where
    an alternative leaves it unconstrained or lets it be absent (read as 0).
    """
    attrs = sub.space.attributes
    out = np.full((len(numeric), 2), (np.inf, -np.inf))
    for alt in sub.alternatives:
        for j, i in enumerate(numeric):
            c = alt.constraints.get(attrs[i].name)
            lo, hi = c.effective_bounds() if isinstance(c, NumericConstraint) else (
                -math.inf, math.inf)
            out[j] = (min(out[j, 0], lo), max(out[j, 1], hi))
    return out


def has_label(sorted_labels: np.ndarray, label: int) -> bool:
    """Whether ``label`` is one of ``sorted_labels``."""
    i = int(np.searchsorted(sorted_labels, np.uint64(label)))
    return i < len(sorted_labels) and int(sorted_labels[i]) == label


def row_cells(space: ContentSpace, numeric: list[int], optional: list[bool],
              bounds: np.ndarray) -> np.ndarray:
    """Cells held, then held wholly, ``(rows, numeric, 4)`` int32, from float bounds.

    ``numeric``: the space's numeric attributes (indexes) in the order of the bounds,
    ``optional`` their flags. ``[-inf, inf]``: the attribute left out (every cell, the
    absent one too). Else the cells ``cell(lo)..cell(hi)``, wholly those strictly between,
    and the end cells too where the range reaches the domain's edge
    (:func:`dls.edge.interior_cells`).
    """
    span = np.zeros((*bounds.shape[:2], 4), dtype=np.int32)
    attrs = space.attributes
    for j, i in enumerate(numeric):
        a = attrs[i]
        lo, hi = bounds[:, j, 0], bounds[:, j, 1]
        free = np.isneginf(lo) & np.isposinf(hi)
        low, high = float(a.low), float(a.high)  # type: ignore[union-attr]
        c_lo = a.cells(np.clip(lo, low, high))
        c_hi = a.cells(np.clip(hi, low, high))
        last = a.n_cells - 1 - int(optional[j])
        span[:, j, 0] = np.where(free, 0, c_lo)
        span[:, j, 1] = np.where(free, a.n_cells - 1, c_hi)
        span[:, j, 2] = np.where(free, 0, np.where(lo <= low, 0, c_lo + 1))
        span[:, j, 3] = np.where(free, a.n_cells - 1, np.where(hi >= high, last, c_hi - 1))
    return span


def label_cells(space: ContentSpace, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cell indexes ``(labels, attributes)`` and whether each label is the space's.

    The cells of a label that is not one of the space's cells are zeros.
    """
    ls = np.asarray(labels, dtype=np.uint64)
    cells = np.zeros((len(ls), len(space.attributes)), dtype=np.int64)
    valid = (ls >> np.uint64(space.cell_bits)) == np.uint64(
        space.app_id if space.app_id is not None else 0)
    for i, (a, b, sh) in enumerate(zip(space.attributes, space.bits, space.shifts,
                                       strict=True)):
        c = ((ls >> np.uint64(sh)) & np.uint64((1 << b) - 1)).astype(np.int64)
        valid &= c < a.n_cells
        cells[:, i] = c
    cells[~valid] = 0
    return cells, valid


def cut_columns(inside: np.ndarray, valid: np.ndarray, avoid: int) -> np.ndarray:
    """Per entry the numeric column its row cuts its cell in, as :func:`simple_held`'s.

    ``inside[i, j]``: entry ``i``'s cell lies wholly within its row's range of numeric
    column ``j``; ``valid[i]``: its label is one of the space's cells.
    """
    others = inside.copy()  # the column ``avoid`` only if no other cuts
    if avoid >= 0:
        others[:, avoid] = True
    return np.where(inside.all(axis=1) | ~valid, -1,
                    np.where(others.all(axis=1), avoid, np.argmax(~others, axis=1)))


def simple_held(space: ContentSpace, numeric: list[int], discrete: list[int],
                word_off: np.ndarray, span: np.ndarray, masks: np.ndarray, labels: np.ndarray,
                rows: np.ndarray, sizes: np.ndarray, avoid: int = -1
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Simple rows' index entries, compiled: ``(offsets, labels, kinds, cols)``.

    Row ``rows[i]`` has the next ``sizes[i]`` of ``labels``; of those, the ones whose
    cell it holds are ``labels[offsets[i]:offsets[i + 1]]`` of the result, each of kind
    :data:`dls.label_index.HOLDS` (wholly) or ``CUTS``, with the first numeric column that
    cuts it (``cols``, -1: none; ``avoid`` only when no other does). ``span``: the rows'
    cells (:func:`row_cells`), ``masks``
    their discrete masks side by side (attribute ``k`` from word ``word_off[k]``). The
    numpy reference is :meth:`broker_node.edge.EdgeTable._index_rows`'s.
    """
    n = len(labels)
    offsets = np.empty(len(sizes) + 1, dtype=np.int64)
    held = np.empty(n, dtype=np.uint64)
    kinds = np.empty(n, dtype=np.int8)
    cols = np.empty(n, dtype=np.int8)
    _ik.held_entries(labels, sizes, rows, span, masks, np.array(numeric, dtype=np.int64),
                     np.array(discrete, dtype=np.int64), word_off,
                     np.array(space.shifts, dtype=np.int64),
                     np.array(space.bits, dtype=np.int64),
                     np.array([a.n_cells for a in space.attributes], dtype=np.int64),
                     space.cell_bits, space.app_id if space.app_id is not None else 0,
                     offsets, held, kinds, cols, avoid)
    k = int(offsets[-1])  # all held: ``held`` was never written (the kernel's text)
    return (offsets, labels.astype(np.uint64, copy=False) if k == n else held[:k],
            kinds[:k], cols[:k])
