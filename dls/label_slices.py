"""Slices of a label's cell in one numeric column, so an event reads a part of its list.

A label's list in :class:`dls.label_index.LabelIndex` holds every subscription that
touches its cell. When many of them cut the cell in the same numeric column (price ranges
a few units wide in a cell sixteen units wide), an event reads them all to keep the few
whose range holds its value. *Slicing* cuts that column's cell into ``parts`` equal
slices and gives each label ``1 + parts`` lists: the *whole* list (entries that hold the
column's cell, or whose range covers every slice) and one list per slice, where an entry
that cuts the column is listed under every slice its range touches. An event whose value
was read reads the whole list and the list of its value's slice; one whose value was not
reads all of them.

Nothing that matches is missed: an event's slice and an entry's first and last slices
come from one function of the value that never decreases (``part`` below), clipped to the
label's cell, so a value inside an entry's range has its slice inside the entry's slices,
whatever the cell the event's label names. Labels whose cell in the column is not a value
cell (the absent cell of an optional attribute, a label of no cell) list everything
whole.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dls.exceptions import DLSError
from dls.space import ContentSpace, UniformAttribute

__all__ = ["MAX_AUTO_PARTS", "MAX_PARTS", "READ_TARGET", "TUNE_FIRST", "AutoSlices", "Slicing"]

#: The most slices a cell is cut into.
MAX_PARTS = 64
#: automatic slicing cuts a cell so that an event reads about this many entries of its
#: label (a long list's first pass costs more than the rest of an event past it)
READ_TARGET = 256
#: the most slices automatic slicing cuts a cell into
MAX_AUTO_PARTS = 16
#: automatic slicing first looks at this many entries (then at each doubling or eighth)
TUNE_FIRST = 1 << 16


@dataclass(frozen=True)
class Slicing:
    """How the index slices cells: value column ``column``, ``parts`` slices a cell.

    A label's cell in that column is ``(label >> shift) & (2**width - 1)``; the cells below
    ``cells`` are value cells ``[low + c * step, low + (c + 1) * step)`` with
    ``scale = parts / step``. ``parts`` 1: no slicing (one list per label).
    """

    column: int
    shift: int
    width: int
    cells: int
    low: float
    scale: float
    parts: int

    def __post_init__(self) -> None:
        """Refuse what the kernels cannot use."""
        for name in ("column", "shift", "width", "cells"):
            v = getattr(self, name)
            if v < 0:
                raise DLSError(f"slicing {name} must be >= 0, got {v}", field=name, value=v)
        if not 1 <= self.parts <= MAX_PARTS:
            raise DLSError(f"slicing parts must be 1..{MAX_PARTS}, got {self.parts}",
                           field="parts", value=self.parts)
        if not np.isfinite(self.low):
            raise DLSError(f"slicing low must be finite, got {self.low}", field="low",
                           value=self.low)
        if not (np.isfinite(self.scale) and self.scale > 0):
            raise DLSError(f"slicing scale must be positive and finite, got {self.scale}",
                           field="scale", value=self.scale)

    @classmethod
    def of(cls, space: ContentSpace, column: int, attribute: str, parts: int) -> Slicing:
        """Slices of ``space``'s numeric attribute ``attribute`` (value column ``column``).

        Only an attribute cut into equal cells can be sliced (a breakpoint attribute's
        cells differ in width).
        """
        at = space.names.index(attribute) if attribute in space.names else -1
        a = space.attributes[at] if at >= 0 else None
        if not isinstance(a, UniformAttribute):
            raise DLSError(f"only a numeric attribute cut into equal cells can be sliced, "
                           f"not {attribute!r}", field="attribute", value=attribute)
        step = (a.high - a.low) / a.granules
        return cls(column, space.shifts[at], space.bits[at], a.granules, float(a.low),
                   parts / step, parts)

    def with_parts(self, parts: int) -> Slicing:
        """The same column cut into ``parts`` slices a cell."""
        return replace(self, parts=parts, scale=self.scale * parts / self.parts)

    @property
    def lists(self) -> int:
        """Lists per label: the whole one and one per slice (one alone when not sliced)."""
        return 1 + self.parts if self.parts > 1 else 1

    def params(self) -> tuple[np.ndarray, np.ndarray]:
        """The kernels' form.

        Floats ``(low, scale)``, ints ``(lists, parts, column, shift, mask, cells)``.
        """
        return (np.array([self.low, self.scale], dtype=np.float64),
                np.array([self.lists, self.parts, self.column, self.shift,
                          (1 << self.width) - 1, self.cells], dtype=np.int64))

    # -- numpy forms (the kernels' are in dls._indexkernels) ----------------------------
    def cell_of(self, places: np.ndarray, base: int) -> np.ndarray:
        """The column's cell of labels ``base + places``."""
        labels = np.asarray(places, dtype=np.int64) + np.int64(base)
        return (labels >> self.shift) & ((1 << self.width) - 1)

    def part(self, values: np.ndarray, cells: np.ndarray) -> np.ndarray:
        """Slice of each value in its cell, clipped to ``0 .. parts - 1`` (NaN: 0)."""
        f = (np.asarray(values, dtype=np.float64) - self.low) * self.scale
        first = (self.parts * np.asarray(cells, dtype=np.int64)).astype(np.float64)
        with np.errstate(invalid="ignore"):
            inside = np.clip(f, first, first + self.parts - 1)
            out = np.where(f >= first, np.floor(inside) - first, 0.0)
        return np.where(f >= first + self.parts, self.parts - 1, out).astype(np.int64)

    def entry_lists(self, places: np.ndarray, base: int, cuts: np.ndarray,
                    lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per entry its first list and how many lists it goes to.

        ``places``: its label's place; ``cuts``: whether it cuts its cell; ``lo``/``hi``:
        its subscription's bounds in the column.
        """
        places = np.asarray(places, dtype=np.int64)
        if self.lists == 1:
            return places, np.ones(len(places), dtype=np.int64)
        cells = self.cell_of(places, base)
        p0, p1 = self.part(lo, cells), self.part(hi, cells)
        whole = (~np.asarray(cuts, dtype=bool) | (cells >= self.cells)
                 | ((p0 == 0) & (p1 == self.parts - 1)))
        first = places * self.lists + np.where(whole, 0, 1 + p0)
        return first, np.where(whole, 1, p1 - p0 + 1)


class AutoSlices:
    """When, and into how many slices, an index slices its cells by itself."""

    def __init__(self) -> None:
        """Looking first at :data:`TUNE_FIRST` entries."""
        self.look_at = TUNE_FIRST

    def due(self, entries: int) -> bool:
        """Whether to look again: the entries doubled, or fell to an eighth, since the last."""
        return not self.look_at // 8 < entries < self.look_at

    def parts(self, now: int, entries: int, labels: int) -> int:
        """The slices for ``entries`` (copies not counted) over ``labels`` used, from ``now``.

        About :data:`READ_TARGET` entries read per event; it moves only on a change of at
        least twice up or four times down.
        """
        self.look_at = max(2 * entries, TUNE_FIRST)
        per, want = entries / max(labels, 1), 1
        while want < MAX_AUTO_PARTS and per > READ_TARGET * want:
            want *= 2
        return want if want >= 2 * now or 4 * want <= now else now
