"""The edge's label index: its subscriptions listed under their labels, and runs matched.

:class:`EdgeIndex` keeps the :class:`dls.label_index.LabelIndex` of an
:class:`~broker_node.edge.EdgeTable` (which decides, per subscription and label, whether the
cell is held wholly or cut, and in which column) and the slot of each subscription, and
matches a run of events in one pass: their numeric values read at once
(:class:`connectors.serde.raw_numbers.NumericReader`), the index walked by its kernel, and
the cut cells of general rows decided by their subscriptions. See docs/architecture.md,
"The label index".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from connectors.serde.raw_numbers import NumericReader, read_event
from dls.label_index import IndexMatch, LabelIndex
from dls.label_slices import Slicing
from dls.space import ContentSpace, UniformAttribute

__all__ = ["EdgeIndex"]

Key = tuple[str, str]  # (client, subscription id)


class EdgeIndex:
    """The label index of one edge table, by (client, id)."""

    def __init__(self, space: ContentSpace, names: Sequence[str], optional: Sequence[bool],
                 general_matches: Callable[[int, dict[str, Any]], bool],
                 slices: int = 1) -> None:
        """An empty index of ``space``'s labels.

        ``names``/``optional``: the numeric attributes in the order of a row's bounds;
        ``general_matches(row, attrs)``: whether an event matches the general row ``row``;
        ``slices``: per cell of the first required numeric attribute cut into equal cells
        (:mod:`dls.label_slices`; 0: as the index chooses, 1: one list per label).
        """
        by = space.by_name
        cut = [j for j, name in enumerate(names)
               if isinstance(by[name], UniformAttribute) and not optional[j]]
        slicing = (Slicing.of(space, cut[0], names[cut[0]], max(slices, 1))
                   if cut and slices != 1 else None)
        self.labels = LabelIndex(space.app_prefix, space.label_space_size, len(names),
                                 slicing=slicing, auto_slices=slices == 0)
        self._names, self._optional = tuple(names), list(optional)
        self._reader = NumericReader(self._names, self._optional)
        self._general_matches = general_matches
        self._slots: dict[Key, int] = {}

    @property
    def sliced_column(self) -> int:
        """The value column the index slices cells in (-1: none)."""
        sl = self.labels.slicing
        return sl.column if sl.lists > 1 else -1

    def add(self, keys: Sequence[Key], owners: np.ndarray, rows: np.ndarray,
            bounds: np.ndarray, general: np.ndarray, offsets: np.ndarray, labels: np.ndarray,
            kinds: np.ndarray, cols: np.ndarray) -> None:
        """List subscriptions ``keys`` (see :meth:`LabelIndex.add` for the rest)."""
        slots = self.labels.add(owners, rows, bounds, general, offsets, labels, kinds, cols)
        self._slots.update(zip(keys, slots.tolist(), strict=True))

    def remove(self, key: Key) -> None:
        """Retire a subscription (not listed: nothing changes)."""
        slot = self._slots.pop(key, None)
        if slot is not None:
            self.labels.retire(np.array([slot]))

    def match_run(self, labels: np.ndarray, origins: np.ndarray,
                  values: Sequence[bytes | None], deferred: bool = False) -> IndexMatch:
        """Who each event of a run goes to (:meth:`LabelIndex.match`).

        ``origins[e]``: the table's number of the client that published event ``e`` (-1:
        none), never delivered to; ``values[e]``: the event's value, read for cut cells
        (an unreadable one goes by label). General rows' cut cells are decided here.
        Owners are the table's client numbers. ``deferred``: as
        :meth:`dls.label_index.LabelIndex.match` (the rest of ``removed`` comes from
        ``labels.fold()``).
        """
        numbers, ok = self._reader.read(values)
        m = self.labels.match(labels, origins, ok, numbers, deferred)
        if not len(m.pending[0]):
            return m
        return self._decide_general(m, values)

    def _decide_general(self, m: IndexMatch, values: Sequence[bytes | None]) -> IndexMatch:
        """``m`` with its general rows' cut cells decided by their subscriptions.

        Only the events named are decoded whole (their attributes).
        """
        n = len(m.offsets) - 1
        per = [m.owners[m.offsets[e]:m.offsets[e + 1]].tolist() for e in range(n)]
        removed = m.removed.copy()
        owner_of, row_of = self.labels.owner_of, self.labels.row_of
        read: dict[int, tuple[dict[str, Any], np.ndarray] | None] = {}
        for e, s in zip(*(a.tolist() for a in m.pending), strict=True):
            o = owner_of(s)
            if e not in read:
                read[e] = read_event(values[e], self._names, self._optional)
            r = read[e]
            if o in per[e] or r is None or not self._general_matches(row_of(s), r[0]):
                continue
            per[e].append(o)
            removed[o] -= 1
        sizes = [len(p) for p in per]
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        owners = np.fromiter((o for p in per for o in sorted(p)), np.int64, int(offsets[-1]))
        return IndexMatch(offsets, owners, removed,
                          (m.pending[0][:0], m.pending[1][:0]), m.checked, m.unread)
