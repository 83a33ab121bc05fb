"""The exact subscription registry of a broker, and the CSR helpers its batches go through.

An unsubscription names a subscription id and removes exactly the labels that id added, so
the broker keeps ``subscription id -> (client, labels)``
(docs/architecture.md#exact-aggregation). Subscriptions arrive in batches given as CSR
``(offsets, labels)``: row ``i`` holds the labels ``labels[offsets[i]:offsets[i + 1]]``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from broker_node.exceptions import DuplicateSubscriptionError, UnknownSubscriptionError
from dls import _jit
from dls.ids import HashIdIndex, IdIndex, make_id_index

if _jit.ENABLED:
    from dls import _idkernels as _K

__all__ = ["SubscriptionRegistry", "client_table", "first_repeat", "look_up", "sorted_unique_rows",
           "take_rows"]


def _smallest_uint(top: int) -> type:
    """The narrowest unsigned dtype holding ``0..top``."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(dtype).max:
            return dtype
    return np.uint64


_M32 = 0xFFFFFFFF
_COMPACT_MIN = 1 << 16  # dead seqs below this never trigger a compaction
_MERGE_ROWS = 1024  # a batch smaller than this takes the next one in (single subscribes)


class _Codes(Mapping[str, int]):
    """The registered ids as a read-only mapping ``id -> code`` (iterates in seq order)."""

    def __init__(self, registry: SubscriptionRegistry) -> None:
        self._r = registry

    def __getitem__(self, sub_id: str) -> int:
        code = self._r.code(sub_id)
        if code < 0:
            raise UnknownSubscriptionError(f"unknown subscription id {sub_id!r}", field="id",
                                           value=sub_id)
        return code

    def __contains__(self, sub_id: object) -> bool:
        return isinstance(sub_id, str) and self._r.code(sub_id) >= 0

    def __iter__(self) -> Iterator[str]:
        idx = self._r.index
        return iter(idx.ids_of(idx.live()))

    def __len__(self) -> int:
        return len(self._r.index)


class SubscriptionRegistry:
    """Exact ``subscription id -> (client, labels)``, stored in CSR batches.

    Every registered id has a *seq* (consecutive in a batch, rising with time) and a code
    whose low 32 bits are that seq: the id index (:mod:`dls.ids`: a compact hash table
    of the ids' bytes with the compiled kernels, a dict on the reference path) maps ids to
    codes, and a batch, keyed by its first seq, holds the labels of its rows, so bulk
    inserts and deletes need no per-subscription Python objects.

    A batch is stored compact: with a known label space ``base..base+size-1`` its labels
    are kept as ``label - base`` in the narrowest unsigned type that holds ``size - 1``
    (uint16 for the 32,768 labels of d = 3, g = 32), its offsets as int32 (int64 past
    2**31 labels) and its clients in the narrowest unsigned type that holds the batch's
    largest client index. :meth:`get`, :meth:`gather` and :meth:`live` give uint64 labels
    and int64 clients, as before. A batch of fewer than 1,024 rows takes the next batch in
    (subscriptions one at a time make few batches, and a per-call cost that does not grow
    with them). A batch goes with its last live row; when its batches
    hold more dead rows than live (and at least 65,536), the live rows are copied into one
    batch and renumbered from 0 (:meth:`_compact`); when more seqs lie outside the live
    batches than inside (their ids' bytes are still in the index), the batches are
    renumbered back to back, no label moved (:meth:`_close_gaps`).
    """

    def __init__(self, label_base: int | None = None,
                 label_space_size: int | None = None) -> None:
        """An empty registry (labels relative to ``label_base`` when the space is known)."""
        self.index: IdIndex = make_id_index()
        self.batches: dict[int, list[Any]] = {}  # first seq -> [offsets, labels, clients, live]
        self._starts = np.zeros(0, dtype=np.int64)  # the batches' first seqs, sorted
        self._rows = 0  # rows of the batches (live or dead)
        self._next = 0  # the next free seq
        self._reserved = 0  # the first seq of the last reserved batch
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

    @property
    def codes(self) -> Mapping[str, int]:
        """The registered ids, as a mapping to their codes."""
        return _Codes(self)

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, sub_id: str) -> bool:
        return self.code(sub_id) >= 0

    def code(self, sub_id: str) -> int:
        """The code of an id (-1: not registered)."""
        codes, _ = self.index.codes([sub_id])
        return int(codes[0])

    def expect(self, n: int) -> None:
        """Make room for ``n`` more ids ahead: registering them rebuilds no index table."""
        self.index.expect(n)

    def lookup(self, sub_ids: Sequence[str]) -> tuple[np.ndarray, int]:
        """(code per id, -1 when unknown; the first index repeating a known id, or -1)."""
        return self.index.codes(sub_ids)

    def reserve(self, sub_ids: Sequence[str]) -> list[int]:
        """Give ``sub_ids`` the seqs of the next batch, unless one is known.

        Returns the indexes of the ids already registered (usually none: then every id
        now has its seq, and :meth:`add` with ``reserved=True`` stores the batch). When
        some are known nothing is kept. An id repeated in the batch raises
        :class:`DuplicateSubscriptionError` (nothing kept).
        """
        first = self._next
        flags = self.index.reserve(sub_ids, first)
        if flags is None:
            self._reserved = first
            self._next = first + len(sub_ids)
            return []
        if (flags == 2).any() or len(set(sub_ids)) != len(sub_ids):
            dup = first_repeat(sub_ids)
            raise DuplicateSubscriptionError(f"subscription id {dup!r} repeats in one batch",
                                             field="id", value=dup)
        return np.flatnonzero(flags == 1).tolist()

    def release(self, sub_ids: Sequence[str], known: Sequence[int] = ()) -> None:
        """Undo :meth:`reserve` of ``sub_ids`` (all but the indexes ``known``)."""
        skip = set(known)
        ids = [sid for i, sid in enumerate(sub_ids) if i not in skip]
        codes, _ = self.index.codes(ids)
        self.index.discard(ids, codes)

    def add(self, sub_ids: Sequence[str], clients: np.ndarray, offsets: np.ndarray,
            labels: np.ndarray, *, reserved: bool = False) -> None:
        """Register new ids; row ``i`` of the CSR batch belongs to ``clients[i]``.

        ``reserved``: :meth:`reserve` already gave the ids their seqs.
        """
        if reserved:
            start = self._reserved
        else:
            start = self._next
            if self.index.reserve(sub_ids, start) is not None:
                raise DuplicateSubscriptionError("add: an id is registered or repeats",
                                                 field="id", value=len(sub_ids))
            self._next = start + len(sub_ids)
        self._store(start, clients, offsets, labels)

    def _store(self, start: int, clients: np.ndarray, offsets: np.ndarray,
               labels: np.ndarray) -> None:
        stored: np.ndarray = (labels - self._base if self._base else labels).astype(
            self._label_dtype)
        offs = offsets.astype(np.int32 if len(labels) < 2**31 else np.int64)
        top = int(clients.max()) if len(clients) else 0
        cli: np.ndarray = clients.astype(_smallest_uint(top))
        self._rows += len(clients)
        if len(self._starts):
            last = int(self._starts[-1])
            entry = self.batches[last]
            rows = len(entry[0]) - 1
            if last + rows == start and rows < _MERGE_ROWS:  # a small batch grows
                total = len(entry[1]) + len(stored)
                joined = np.concatenate([entry[0].astype(np.int64),
                                         offs[1:].astype(np.int64) + int(entry[0][-1])])
                entry[0] = joined.astype(np.int32 if total < 2**31 else np.int64)
                entry[1] = np.concatenate([entry[1], stored])
                entry[2] = np.concatenate([entry[2], cli])  # the wider client type
                entry[3] += len(clients)
                return
        self.batches[start] = [offs, stored, cli, len(clients)]
        if len(self._starts) and start < self._starts[-1]:  # pragma: no cover - seqs rise
            self._starts = np.array(sorted(self.batches), dtype=np.int64)
        else:
            self._starts = np.append(self._starts, np.int64(start))

    def get(self, sub_id: str) -> tuple[int, np.ndarray]:
        """(client index, labels) of a registered id."""
        code = self.code(sub_id)
        if code < 0:
            raise UnknownSubscriptionError(f"unknown subscription id {sub_id!r}", field="id",
                                           value=sub_id)
        seq = code & _M32
        start = int(self._starts[np.searchsorted(self._starts, seq, side="right") - 1])
        offsets, labels, clients, _ = self.batches[start]
        row = seq - start
        return int(clients[row]), self._labels_out(labels[offsets[row]:offsets[row + 1]])

    def _groups(self, seqs: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
        """(first seq of a batch, the positions of ``seqs`` in it), batch by batch."""
        where = np.searchsorted(self._starts, seqs, side="right") - 1
        if len(seqs) and where[0] == where[-1] and (where == where[0]).all():
            yield int(self._starts[where[0]]), np.arange(len(seqs))
            return
        order = np.argsort(where, kind="stable")
        bounds = np.flatnonzero(np.diff(where[order])) + 1
        for group in np.split(order, bounds):
            if group.size:
                yield int(self._starts[where[group[0]]]), group

    def gather(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(client per sub, label count per sub, labels concatenated) for codes."""
        seqs = np.asarray(codes, dtype=np.int64) & _M32
        n = len(seqs)
        owners = np.empty(n, dtype=np.int64)
        lens = np.empty(n, dtype=np.int64)
        starts = np.empty(n, dtype=np.int64)
        groups = list(self._groups(seqs))
        for start, group in groups:
            offsets, _, clients, _ = self.batches[start]
            r = seqs[group] - start
            owners[group] = clients[r]
            starts[group] = offsets[r]
            lens[group] = offsets[r + 1] - starts[group]
        out = np.empty(int(lens.sum()), dtype=np.uint64)
        out_off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=out_off[1:])
        for start, group in groups:  # gather in the caller's order, batch by batch
            offsets, labels = self.batches[start][:2]
            if _jit.ENABLED:
                _K.copy_rows(labels, offsets, seqs[group] - start, group, out, out_off,
                             self._base)
                continue
            g_lens = lens[group]
            total = int(g_lens.sum())
            if total == 0:
                continue
            shift = np.cumsum(g_lens) - g_lens
            src = np.repeat(starts[group] - shift, g_lens) + np.arange(total)
            dst = np.repeat(out_off[group] - shift, g_lens) + np.arange(total)
            out[dst] = labels[src] + self._base
        return owners, lens, out

    def live(self) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """Every live subscription as ``(ids, client per id, CSR offsets, labels)``.

        In registration order (oldest first); what a snapshot of the node saves.
        """
        seqs = self.index.live()
        ids = self.index.ids_of(seqs)
        owners, lens, flat = self.gather(seqs)
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        return ids, owners, offsets, flat

    def remove(self, sub_ids: Sequence[str], codes: np.ndarray) -> None:
        """Forget ids (``codes`` are theirs); a batch goes once its last id is gone."""
        self.index.discard(sub_ids, codes)
        seqs = np.asarray(codes, dtype=np.int64) & _M32
        gone = False
        for start, group in self._groups(seqs):
            entry = self.batches[start]
            entry[3] -= len(group)
            if entry[3] == 0:
                del self.batches[start]
                self._rows -= len(entry[0]) - 1
                gone = True
        if gone:
            self._starts = np.array(sorted(self.batches), dtype=np.int64)
        rows = self._rows
        live = len(self.index)
        if rows - live >= max(_COMPACT_MIN, live):
            self._compact()
        elif self._next - rows >= max(_COMPACT_MIN, rows):
            self._close_gaps()

    def _close_gaps(self) -> None:
        """Renumber the batches' seqs back to back from 0 (no label moves).

        The seqs of the batches gone (and of ids released) keep bytes in the id index
        until then; the rows of a live batch keep their seqs, dead or not.
        """
        seqs = self.index.live()
        where = np.searchsorted(self._starts, seqs, side="right") - 1
        sizes = np.array([len(self.batches[int(b)][0]) - 1 for b in self._starts],
                         dtype=np.int64)
        new_starts = np.zeros(len(sizes), dtype=np.int64)
        np.cumsum(sizes[:-1], out=new_starts[1:])
        top = int(sizes.sum())
        self.index.renumber(seqs, seqs - self._starts[where] + new_starts[where], top)
        self.batches = {int(ns): self.batches[int(b)]
                        for b, ns in zip(self._starts, new_starts, strict=True)}
        self._starts = new_starts
        self._next = top

    def _compact(self) -> None:
        """Copy the live rows into one batch and renumber them 0, 1, 2, ... (oldest first)."""
        seqs = self.index.live()
        owners, lens, flat = self.gather(seqs)
        self.index.renumber(seqs)
        self.batches.clear()
        self._starts = np.zeros(0, dtype=np.int64)
        self._rows = 0
        self._next = len(seqs)
        if len(seqs):
            offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
            np.cumsum(lens, out=offsets[1:])
            self._store(0, owners, offsets, flat)

    def memory_bytes(self) -> int:
        """Bytes of the batches' arrays (offsets, labels, clients); the id index apart."""
        total = 0
        for offsets, labels, clients, _ in self.batches.values():
            total += int(offsets.nbytes + labels.nbytes + np.asarray(clients).nbytes)
        return total

    def index_bytes(self) -> int:
        """Bytes of the id index (:meth:`dls.ids.IdIndex.nbytes`)."""
        return self.index.nbytes()


def client_table() -> HashIdIndex | None:
    """A compiled index of client names (their bank index as seq); None on the reference.

    A batch's clients are then looked up in one kernel call (about 20 ns per name against
    37 for a dict look-up from Python); the reference path keeps the dict only.
    """
    return HashIdIndex() if _jit.ENABLED else None


def look_up(table: HashIdIndex, names: Sequence[str]) -> np.ndarray:
    """The seq of each name in ``table`` (-1: unknown), as int64."""
    codes, _ = table.codes(names)
    return np.where(codes >= 0, codes & _M32, -1)


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
