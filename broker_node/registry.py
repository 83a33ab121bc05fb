"""The exact subscription registry of a broker, and the CSR helpers its batches go through.

An unsubscription names a subscription id and removes exactly the labels that id added, so
the broker keeps ``subscription id -> (client, labels)``
(docs/architecture.md#exact-aggregation). Subscriptions arrive in batches given as CSR
``(offsets, labels)``: row ``i`` holds the labels ``labels[offsets[i]:offsets[i + 1]]``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["SubscriptionRegistry", "first_repeat", "sorted_unique_rows", "take_rows"]


def _smallest_uint(top: int) -> type:
    """The narrowest unsigned dtype holding ``0..top``."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(dtype).max:
            return dtype
    return np.uint64


class SubscriptionRegistry:
    """Exact ``subscription id -> (client, labels)``, stored in CSR batches.

    One dict entry per subscription maps the id to ``batch << 32 | row``; the labels stay in
    numpy arrays of the batch they arrived in, so bulk inserts and deletes need no
    per-subscription Python objects.

    A batch is stored compact: with a known label space ``base..base+size-1`` its labels
    are kept as ``label - base`` in the narrowest unsigned type that holds ``size - 1``
    (uint16 for the 32,768 labels of d = 3, g = 32), its offsets as int32 (int64 past
    2**31 labels) and its clients in the narrowest unsigned type that holds the batch's
    largest client index. :meth:`get`, :meth:`gather` and :meth:`live` give uint64 labels
    and int64 clients, as before.
    """

    def __init__(self, label_base: int | None = None,
                 label_space_size: int | None = None) -> None:
        """An empty registry (labels relative to ``label_base`` when the space is known)."""
        self.codes: dict[str, int] = {}
        self.batches: dict[int, list[Any]] = {}  # batch -> [offsets, labels, clients, live]
        self._next = 0
        self._base = np.uint64(0)
        self._label_dtype: type = np.uint64
        if label_base is not None and label_space_size is not None:
            self._base = np.uint64(label_base)
            self._label_dtype = _smallest_uint(max(0, int(label_space_size) - 1))

    def _labels_out(self, stored: np.ndarray) -> np.ndarray:
        """Stored labels as the uint64 labels they stand for."""
        out = stored.astype(np.uint64)
        if self._base:
            out += self._base
        return out

    def __len__(self) -> int:
        return len(self.codes)

    def __contains__(self, sub_id: str) -> bool:
        return sub_id in self.codes

    def reserve(self, sub_ids: Sequence[str]) -> list[int]:
        """Give distinct ``sub_ids`` the codes of the next batch, unless one is known.

        Returns the indexes of the ids already registered (usually none: then every id
        now has its code, row ``i`` for ``sub_ids[i]``, and :meth:`add` with
        ``reserved=True`` stores the batch). When some are known nothing is kept: the ids
        are released again and the known ones keep their codes. One C-level pass
        (``dict.setdefault``) both looks the ids up and registers them.
        """
        codes = self.codes
        before = len(codes)
        base = self._next << 32
        got = list(map(codes.setdefault, sub_ids, range(base, base + len(sub_ids))))
        if len(codes) == before + len(sub_ids):
            return []
        known = [i for i, code in enumerate(got) if code != base + i]
        self.release(sub_ids, known)
        return known

    def release(self, sub_ids: Sequence[str], known: Sequence[int] = ()) -> None:
        """Undo :meth:`reserve` of ``sub_ids`` (all but the indexes ``known``)."""
        skip = set(known)
        codes = self.codes
        for i, sid in enumerate(sub_ids):
            if i not in skip:
                del codes[sid]

    def add(self, sub_ids: Sequence[str], clients: np.ndarray, offsets: np.ndarray,
            labels: np.ndarray, *, reserved: bool = False) -> None:
        """Register new ids; row ``i`` of the CSR batch belongs to ``clients[i]``.

        ``reserved``: :meth:`reserve` already gave the ids their codes.
        """
        b = self._next
        self._next += 1
        stored: np.ndarray = (labels - self._base if self._base else labels).astype(
            self._label_dtype)
        offs = offsets.astype(np.int32 if len(labels) < 2**31 else np.int64)
        top = int(clients.max()) if len(clients) else 0
        cli: np.ndarray = clients.astype(_smallest_uint(top))
        self.batches[b] = [offs, stored, cli, len(sub_ids)]
        if not reserved:
            base = b << 32
            self.codes.update(zip(sub_ids, range(base, base + len(sub_ids)), strict=True))

    def get(self, sub_id: str) -> tuple[int, np.ndarray]:
        """(client index, labels) of a registered id."""
        code = self.codes[sub_id]
        offsets, labels, clients, _ = self.batches[code >> 32]
        row = code & 0xFFFFFFFF
        return int(clients[row]), self._labels_out(labels[offsets[row]:offsets[row + 1]])

    def gather(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(client per sub, label count per sub, labels concatenated) for codes."""
        batch_of = codes >> 32
        rows = codes & 0xFFFFFFFF
        owners = np.empty(len(codes), dtype=np.int64)
        lens = np.empty(len(codes), dtype=np.int64)
        starts = np.empty(len(codes), dtype=np.int64)
        order = np.argsort(batch_of, kind="stable")
        bounds = np.flatnonzero(np.diff(batch_of[order])) + 1
        for group in np.split(order, bounds):
            if group.size == 0:
                continue
            offsets, labels, clients, _ = self.batches[int(batch_of[group[0]])]
            r = rows[group]
            owners[group] = clients[r]
            starts[group] = offsets[r]
            lens[group] = offsets[r + 1] - offsets[r]
        # Gather in the caller's order, batch by batch.
        out = np.empty(int(lens.sum()), dtype=np.uint64)
        out_off = np.zeros(len(codes) + 1, dtype=np.int64)
        np.cumsum(lens, out=out_off[1:])
        for group in np.split(order, bounds):
            if group.size == 0:
                continue
            labels = self.batches[int(batch_of[group[0]])][1]
            g_lens = lens[group]
            total = int(g_lens.sum())
            if total == 0:
                continue
            src = np.repeat(starts[group] - np.cumsum(g_lens) + g_lens, g_lens) + np.arange(
                total)
            dst = np.repeat(out_off[group] - np.cumsum(g_lens) + g_lens, g_lens) + np.arange(
                total)
            out[dst] = labels[src]
        if self._base:
            out += self._base
        return owners, lens, out

    def live(self) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """Every live subscription as ``(ids, client per id, CSR offsets, labels)``.

        In registration order (oldest first); what a snapshot of the node saves.
        """
        ids = list(self.codes)
        codes = np.fromiter(self.codes.values(), dtype=np.int64, count=len(ids))
        owners, lens, flat = self.gather(codes)
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        return ids, owners, offsets, flat

    def remove(self, sub_ids: Sequence[str], codes: np.ndarray) -> None:
        """Forget ids (``codes`` are theirs); a batch goes once its last id is gone."""
        deque(map(self.codes.__delitem__, sub_ids), maxlen=0)  # a C-level loop
        batch_of, counts = np.unique(codes >> 32, return_counts=True)
        for b, c in zip(batch_of.tolist(), counts.tolist(), strict=True):
            entry = self.batches[b]
            entry[3] -= c
            if entry[3] == 0:
                del self.batches[b]

    def memory_bytes(self) -> int:
        """Bytes of the batches' arrays (offsets, labels, clients); the dict not counted."""
        total = 0
        for offsets, labels, clients, _ in self.batches.values():
            total += int(offsets.nbytes + labels.nbytes + np.asarray(clients).nbytes)
        return total


def first_repeat(items: Sequence[str]) -> str:
    """The first item that occurs a second time (the caller knows there is one)."""
    seen: set[str] = set()
    return next(x for x in items if x in seen or seen.add(x))  # type: ignore[func-returns-value]


def sorted_unique_rows(offsets: np.ndarray, flat: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Sort and de-duplicate the labels inside each CSR row (cheap when already so)."""
    if len(flat) < 2:
        return offsets, flat
    rising = flat[1:] > flat[:-1]
    rising[offsets[1:-1] - 1] = True  # a row boundary may go down
    if rising.all():
        return offsets, flat
    rows = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    order = np.lexsort((flat, rows))
    flat, rows = flat[order], rows[order]
    keep = np.ones(len(flat), dtype=bool)
    keep[1:] = (flat[1:] != flat[:-1]) | (rows[1:] != rows[:-1])
    flat, rows = flat[keep], rows[keep]
    new_offsets = np.zeros_like(offsets)
    np.cumsum(np.bincount(rows, minlength=len(offsets) - 1), out=new_offsets[1:])
    return new_offsets, flat


def take_rows(offsets: np.ndarray, flat: np.ndarray, rows: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """Keep some rows of a CSR array."""
    lens = offsets[rows + 1] - offsets[rows]
    new_offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lens, out=new_offsets[1:])
    src = np.repeat(offsets[rows] - new_offsets[:-1], lens) + np.arange(int(new_offsets[-1]))
    return new_offsets, flat[src]
