"""A subscription's exact constraints as a fixed-size row of bytes, sent with its labels.

Labels route a subscription; its exact constraints decide, at the subscriber's node,
which of the events its labels bring are really its. For a *simple* subscription (one
alternative of numeric ranges and discrete sets on required attributes,
:func:`simple_parts`) those constraints are a *row*: the bounds of every numeric attribute
and a cell mask of every discrete one. The SDK compiles the ``where`` text anyway (it
needs its labels), so it sends the row too, and a node takes a subscription without
reading its text: compiling text is most of what taking one would otherwise cost.

A space's :class:`RowLayout` fixes the row's bytes: for each numeric attribute in the
space's order its lower and upper bound, IEEE doubles, both included (an open end is moved
to the next double inwards, as the compiler does), then for each discrete attribute its
mask, ``ceil(cells / 64)`` 64-bit words, bit ``c`` of word ``c // 64`` set when cell ``c``
is allowed; all little-endian. An attribute the subscription leaves out has bounds
``[-inf, inf]``, or a full mask.

A row read from the wire is checked before it is used (:meth:`RowLayout.read`): its size,
bounds that are numbers with the lower not above the upper, masks with no cell past the
attribute's last and at least one cell. The node trusts a good row as it trusts labels:
both are the sender's own account of its subscription.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dls.exceptions import DLSError
from dls.predicates import DiscreteConstraint, NumericConstraint, Subscription
from dls.space import ContentSpace

__all__ = ["RowLayout", "SimpleParts", "simple_parts"]

#: A simple row: its bounds ``(numeric attributes, 2)`` and its mask per discrete attribute.
SimpleParts = tuple[np.ndarray, list[np.ndarray]]


def simple_parts(sub: Subscription, numeric: list[int], discrete: list[int]
                 ) -> SimpleParts | None:
    """The row of a simple subscription; None when it needs a general row.

    Simple: one alternative whose constrained attributes are all required, each a numeric
    range (no set of values, no exclusion) or a discrete set. An attribute left out (of
    any kind, optional or not) allows every cell, absent included: its bounds are
    ``[-inf, inf]``, its mask full. ``numeric`` and ``discrete``: the indexes of those
    attributes in the space.
    """
    if len(sub.alternatives) != 1:
        return None
    alt = sub.alternatives[0]
    cons = alt.constraints
    attrs = sub.space.attributes
    if any(a.optional or a.kind not in ("numeric", "discrete") for a in attrs
           if a.name in cons):
        return None
    bounds = np.empty((len(numeric), 2), dtype=np.float64)
    for j, i in enumerate(numeric):
        c = cons.get(attrs[i].name)
        if c is None:
            bounds[j] = (-math.inf, math.inf)
        elif isinstance(c, NumericConstraint) and c.values is None and not c.excluded:
            bounds[j] = c.effective_bounds()
        else:
            return None
    masks = []
    for i in discrete:
        a = attrs[i]
        c = cons.get(a.name)
        if c is not None and not isinstance(c, DiscreteConstraint):
            return None
        bits = ((1 << a.n_cells) - 1 if c is None
                else sum(1 << cell for cell in set(alt.cells(a).tolist())))
        masks.append(_words(bits, (a.n_cells + 63) // 64))
    return bounds, masks


def _which(i: int, n: int) -> str:
    """How an error names the row: "row: " alone, "row 3 of 8: " in a batch."""
    return "row: " if n == 1 else f"row {i} of {n}: "


def _words(bits: int, words: int) -> np.ndarray:
    return np.frombuffer(bits.to_bytes(8 * words, "little"), dtype="<u8").astype(np.uint64)


class RowLayout:
    """The bytes of a space's rows (see the module)."""

    def __init__(self, space: ContentSpace) -> None:
        """The layout of ``space``."""
        attrs = space.attributes
        self.space = space
        self.numeric = [i for i, a in enumerate(attrs) if a.kind == "numeric"]
        self.discrete = [i for i, a in enumerate(attrs) if a.kind == "discrete"]
        self.cells = [attrs[i].n_cells for i in self.discrete]
        self.words = [(n + 63) // 64 for n in self.cells]
        #: first word of each discrete attribute's mask among the masks
        self.word_off = np.r_[0, np.cumsum(self.words)].astype(np.int64)
        self.size = 16 * len(self.numeric) + 8 * int(self.word_off[-1])
        """Bytes of one row."""
        # per mask word: the bits of cells past the attribute's last (must be clear)
        spare = []
        for n, w in zip(self.cells, self.words, strict=True):
            spare += [0] * (w - 1) + [~((1 << (n - 64 * (w - 1))) - 1) & (2**64 - 1)]
        self._spare = np.array(spare, dtype=np.uint64)

    def of(self, sub: Subscription) -> bytes | None:
        """The row of ``sub`` (None: not simple, its text is compiled instead)."""
        parts = simple_parts(sub, self.numeric, self.discrete)
        return None if parts is None else self.encode(parts)

    def encode(self, parts: SimpleParts) -> bytes:
        """The bytes of a row."""
        bounds, masks = parts
        return (np.asarray(bounds, dtype="<f8").tobytes()
                + b"".join(np.asarray(m, dtype="<u8").tobytes() for m in masks))

    def read(self, rows: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """Rows from their bytes: bounds ``(n, numeric, 2)`` and masks ``(n, words)``.

        Raises:
            DLSError: A row is not one of this layout (field ``row``; the value names
                which of ``rows`` and what is wrong). Nothing is read then.
        """
        n, size = len(rows), self.size
        for i, r in enumerate(rows):
            if len(r) != size:
                raise DLSError(f"{_which(i, n)}{len(r)} bytes, the space's rows have {size} "
                               f"({len(self.numeric)} numeric attributes, "
                               f"{int(self.word_off[-1])} mask words)", field="row",
                               value=f"{i}: {len(r)} bytes")
        return self.read_block(np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(n, size))

    def read_block(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`read` of rows given side by side, one per line of ``flat`` (uint8).

        Raises:
            DLSError: As :meth:`read`.
        """
        n = len(flat)
        k = len(self.numeric)
        bounds = flat[:, :16 * k].copy().view("<f8").astype(np.float64).reshape(n, k, 2)
        masks = flat[:, 16 * k:].copy().view("<u8").astype(np.uint64).reshape(
            n, int(self.word_off[-1]))
        bad = np.isnan(bounds).any(axis=(1, 2)) | (bounds[:, :, 0] > bounds[:, :, 1]).any(
            axis=1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DLSError(f"{_which(i, n)}bounds {bounds[i].tolist()} are not ranges (NaN, or "
                           f"a lower bound above its upper)", field="row",
                           value=f"{i}: {bounds[i].tolist()}")
        for a, (lo, hi) in enumerate(zip(self.word_off[:-1], self.word_off[1:], strict=True)):
            part = masks[:, lo:hi]
            empty = np.flatnonzero(np.all(part == 0, axis=1)).tolist()
            past = np.flatnonzero(np.any(part & self._spare[None, lo:hi], axis=1)).tolist()
            if empty or past:
                i = min(empty[:1] + past[:1])
                name = self.space.attributes[self.discrete[a]].name
                raise DLSError(f"{_which(i, n)}the mask of {name!r} allows "
                               + ("no cell" if i in empty[:1] else "cells past its last"),
                               field="row", value=f"{i}: {name}")
        return bounds, masks
