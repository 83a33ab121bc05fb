"""Indexes of string ids by sequence number, for the broker's subscription registry.

An index maps each registered id to a *seq*, a non-negative integer below 2**32 that the
caller chooses (consecutive for a batch), and gives back an opaque int64 *code* per id
whose low 32 bits are the seq. Two implementations, with the same answers
(``tests/dls/test_ids.py``):

* :class:`HashIdIndex` (compiled kernels, :mod:`dls._idkernels`): the ids' UTF-8 bytes in
  one arena with an offset per seq, and an open-addressing table of 32-bit entries (seq
  and a tag of the id's hash; 64-bit past 2**26 seqs). About 4 + ``len(id)`` bytes per id
  plus 4 bytes per table slot at a load between 0.45 and 0.8: 17 to 21 bytes per id for
  the ids ``s0`` .. ``s499999``, where a dict of str keys takes 118;
* :class:`DictIdIndex`: a dict from id to seq, on the numpy reference path
  (``DLS_NO_JIT=1``).

:func:`make_id_index` picks the one :mod:`dls._jit` says.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import Any, Protocol

import numpy as np

from dls import _jit
from dls.exceptions import IdIndexError

if _jit.ENABLED:
    from dls import _idkernels as _K

__all__ = ["DictIdIndex", "HashIdIndex", "IdIndex", "encode_ids", "make_id_index"]

_M32 = 0xFFFFFFFF
_MAX_LOAD = 0.8  # used slots (live and tombstones) over capacity before a rebuild
_TARGET_LOAD = 0.45  # live ids over capacity right after one
_EXPECT_LOAD = 0.7  # live ids over capacity once those HashIdIndex.expect made room for are in
_GROW = 1.25  # arena and offsets grow by at least this factor
_NARROW_SEQ_BITS = 26  # beyond, the table's entries are 64-bit


class IdIndex(Protocol):
    """What the registry asks of an id index."""

    def __len__(self) -> int: ...

    def reserve(self, ids: Sequence[str], first: int) -> np.ndarray | None:
        """Register ``ids[i]`` as seq ``first + i``, all or none.

        None when all went in; else per id 1 (known before), 2 (repeats an earlier id of
        the batch) or 0, and nothing was registered.
        """
        ...

    def codes(self, ids: Sequence[str]) -> tuple[np.ndarray, int]:
        """(code per id, -1 when unknown; first index repeating a known id, or -1)."""
        ...

    def discard(self, ids: Sequence[str], codes: np.ndarray) -> None:
        """Forget registered ids (``codes`` theirs)."""
        ...

    def live(self) -> np.ndarray:
        """Sorted seqs of the registered ids."""
        ...

    def ids_of(self, seqs: np.ndarray) -> list[str]:
        """The ids of registered seqs."""
        ...

    def renumber(self, seqs: np.ndarray, new: np.ndarray | None = None,
                 top: int | None = None) -> None:
        """Give the registered ``seqs`` (sorted, all of them) the rising seqs ``new``.

        ``new`` defaults to 0, 1, 2, ...; ``top`` (the next free seq after, by default one
        past the last) leaves the seqs between without an id.
        """
        ...

    def nbytes(self) -> int:
        """Bytes the index keeps."""
        ...

    def expect(self, n: int) -> None:
        """Make room for ``n`` more ids ahead, so that registering them rebuilds nothing."""
        ...


def make_id_index() -> IdIndex:
    """The compiled index, or the dict one on the reference path."""
    return HashIdIndex() if _jit.ENABLED else DictIdIndex()


class DictIdIndex:
    """``id -> seq`` in a dict: the reference (``DLS_NO_JIT=1``)."""

    def __init__(self) -> None:
        self.map: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.map)

    def reserve(self, ids: Sequence[str], first: int) -> np.ndarray | None:
        """Register ``ids`` as seqs ``first...``, all or none (:meth:`IdIndex.reserve`)."""
        d = self.map
        before = len(d)
        got = list(map(d.setdefault, ids, range(first, first + len(ids))))
        if len(d) == before + len(ids):
            return None
        for i, sid in enumerate(ids):
            if got[i] == first + i:
                del d[sid]
        flags = np.zeros(len(ids), dtype=np.int8)
        seen: set[str] = set()
        for i, sid in enumerate(ids):
            if sid in d:
                flags[i] = 1
            elif sid in seen:
                flags[i] = 2
            seen.add(sid)
        return flags

    def codes(self, ids: Sequence[str]) -> tuple[np.ndarray, int]:
        """Codes of ``ids`` and the first repeat (:meth:`IdIndex.codes`)."""
        codes = np.fromiter(map(self.map.get, ids, repeat(-1)), dtype=np.int64,
                            count=len(ids))
        if len(set(ids)) == len(ids):
            return codes, -1
        seen: set[str] = set()
        for i, sid in enumerate(ids):
            if sid in seen and codes[i] >= 0:
                return codes, i
            seen.add(sid)
        return codes, -1

    def discard(self, ids: Sequence[str], codes: np.ndarray) -> None:
        """Forget registered ids (``codes`` theirs)."""
        d = self.map
        for sid in ids:
            del d[sid]

    def live(self) -> np.ndarray:
        """Sorted seqs of the registered ids."""
        return np.sort(np.fromiter(self.map.values(), dtype=np.int64, count=len(self.map)))

    def ids_of(self, seqs: np.ndarray) -> list[str]:
        """The ids of registered seqs."""
        want = set(seqs.tolist())
        by_seq = {q: sid for sid, q in self.map.items() if q in want}
        return [by_seq[q] for q in seqs.tolist()]

    def renumber(self, seqs: np.ndarray, new: np.ndarray | None = None,
                 top: int | None = None) -> None:
        """Give the registered ``seqs`` (sorted, all of them) the rising seqs ``new``."""
        to = range(len(seqs)) if new is None else new.tolist()
        moved = dict(zip(seqs.tolist(), to, strict=True))
        self.map = {sid: moved[q] for sid, q in self.map.items()}

    def nbytes(self) -> int:
        """Bytes the index keeps."""
        d = self.map
        return sys.getsizeof(d) + sum(map(sys.getsizeof, d)) + sum(
            map(sys.getsizeof, d.values()))

    def expect(self, n: int) -> None:
        """Nothing to do: a dict cannot be sized ahead (:meth:`IdIndex.expect`)."""
        _check_expect(n)

    def __iter__(self) -> Iterator[str]:
        return iter(self.map)


def _check_expect(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise IdIndexError(f"expect: n must be a non-negative int, got {n!r}", field="n",
                           value=n)
    return int(n)


def _layout(cap: int, top: int) -> tuple[int, type]:
    """(seq bits, entry type) of a table of ``cap`` slots for seqs up to ``top``.

    Twice the seqs the table can hold (or ``top``), so that seqs rise for a while before
    the next rebuild; the bits above are the tag (32-bit entries up to
    :data:`_NARROW_SEQ_BITS` seq bits).
    """
    bits = max(16, cap.bit_length() + 1, (top + 2).bit_length() + 1)
    return bits, np.uint32 if bits <= _NARROW_SEQ_BITS else np.uint64


def encode_ids(ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """(bytes, starts, sep, whether an id holds a NUL) of ids, as the kernels take them.

    The common case joins the ids with NUL bytes in one C-level call; ids holding a NUL
    are encoded one by one, back to back. UTF-8 with lone surrogates kept (every ``str``
    has one encoding, and distinct ids distinct bytes).
    """
    n = len(ids)
    joined = "\0".join(ids)
    if joined.count("\0") == n - 1:
        buf = np.frombuffer(joined.encode("utf-8", "surrogatepass"), dtype=np.uint8)
        starts = np.empty(n + 1, dtype=np.int64)
        _K.sep_starts(buf, n, starts)
        return buf, starts, 1, False
    parts = [s.encode("utf-8", "surrogatepass") for s in ids]
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, parts), dtype=np.int64, count=n), out=starts[1:])
    return np.frombuffer(b"".join(parts), dtype=np.uint8), starts, 0, True


class HashIdIndex:
    """Ids in one byte arena and an open-addressing table (:mod:`dls._idkernels`)."""

    def __init__(self) -> None:
        self._seed = np.uint64(int.from_bytes(os.urandom(8), "little"))
        self._arena = np.zeros(256, dtype=np.uint8)
        self._at = 0  # arena bytes in use
        self._off: np.ndarray = np.zeros(65, dtype=np.uint32)  # seq -> start in the arena
        self._top = 0  # seqs below have their bytes in the arena
        self._bits = 16
        self._table: np.ndarray = np.zeros(64, dtype=np.uint32)
        self._live = 0
        self._used = 0  # slots not empty (live and tombstones)
        self._nul = False  # an id holds a NUL byte: decode them one by one

    def __len__(self) -> int:
        return self._live

    # -- storage --------------------------------------------------------------------------
    def _room(self, seqs: int, nbytes: int) -> None:
        """Arena and offsets large enough for seqs below ``seqs`` and ``nbytes`` bytes."""
        if nbytes > len(self._arena):
            arena = np.empty(max(nbytes, int(len(self._arena) * _GROW)), dtype=np.uint8)
            arena[:self._at] = self._arena[:self._at]
            self._arena = arena
        wide = nbytes > _M32 and self._off.dtype == np.uint32
        if seqs + 1 > len(self._off) or wide:
            off: np.ndarray = np.empty(max(seqs + 1, int(len(self._off) * _GROW)),
                           dtype=np.int64 if wide or self._off.dtype == np.int64
                           else np.uint32)
            off[:self._top + 1] = self._off[:self._top + 1]
            self._off = off

    def _resize(self, need_live: int, top_seq: int, load: float = _TARGET_LOAD) -> None:
        """A new table for ``need_live`` ids (at ``load``) and seqs up to ``top_seq``.

        Tombstones go.
        """
        cap = max(64, int(need_live / load) + 1)
        bits, dtype = _layout(cap, top_seq)
        seqs = np.empty(self._live, dtype=np.int64)
        seqs = seqs[:_K.id_live(self._table, self._bits, seqs)]  # any order will do
        table: np.ndarray = np.zeros(cap, dtype=dtype)
        _K.id_rebuild(table, bits, self._seed, self._arena, self._off, seqs, seqs)
        self._table, self._bits, self._used = table, bits, len(seqs)

    def expect(self, n: int) -> None:
        """Room for ``n`` more ids ahead (:meth:`IdIndex.expect`).

        The table is rebuilt now, once, for them (at :data:`_EXPECT_LOAD` once they are
        in), and the seq offsets grow to hold them; the arena still grows as their bytes
        come. A table with that room already is left as it is.
        """
        n = _check_expect(n)
        self._ensure(n, self._top + n, _EXPECT_LOAD)
        self._room(self._top + n, self._at)

    def _ensure(self, n: int, top_seq: int, load: float = _TARGET_LOAD) -> None:
        """Rebuild the table (for ``load``) unless ``n`` more ids up to ``top_seq`` fit."""
        if (self._used + n > _MAX_LOAD * len(self._table)
                or top_seq + 2 >= 1 << self._bits):
            self._resize(self._live + n, top_seq, load)

    # -- the interface --------------------------------------------------------------------
    def reserve(self, ids: Sequence[str], first: int) -> np.ndarray | None:
        """Register ``ids`` as seqs ``first...``, all or none (:meth:`IdIndex.reserve`)."""
        n = len(ids)
        if first < self._top:
            raise IdIndexError(f"seq {first} is below the next free one ({self._top})",
                               field="first", value=first)
        buf, starts, sep, nul = encode_ids(ids)
        self._ensure(n, first + n)
        at = self._at
        self._room(first + n, at + len(buf))
        self._off[self._top:first + 1] = at  # seqs skipped have no bytes
        end = _K.id_stage(buf, starts, sep, self._arena, at, self._off, first)
        flags = np.empty(n, dtype=np.int8)
        flagged, filled, _ = _K.id_insert(self._table, self._bits, self._seed, self._arena,
                                       self._off, first, n, flags)
        self._used += filled
        if flagged:
            return flags
        self._at, self._top = end, first + n
        self._live += n
        self._nul |= nul
        return None

    def codes(self, ids: Sequence[str]) -> tuple[np.ndarray, int]:
        """Codes of ``ids`` and the first repeat (:meth:`IdIndex.codes`)."""
        buf, starts, sep, _ = encode_ids(ids)
        codes = np.empty(len(ids), dtype=np.int64)
        repeat_at, _ = _K.id_codes(self._table, self._bits, self._seed, self._arena, self._off,
                                buf, starts, sep, codes)
        return codes, int(repeat_at)

    def discard(self, ids: Sequence[str], codes: np.ndarray) -> None:
        """Forget registered ids (``codes`` theirs)."""
        stale = _K.id_discard(self._table, self._bits, np.ascontiguousarray(codes))
        if stale >= 0:  # a code from before a rebuild: look the ids up again
            fresh, _ = self.codes(ids[stale:])
            _K.id_discard(self._table, self._bits, fresh)
        self._live -= len(codes)

    def live(self) -> np.ndarray:
        """Sorted seqs of the registered ids."""
        out = np.empty(self._live, dtype=np.int64)
        got = _K.id_live(self._table, self._bits, out)
        mark = np.zeros(self._top, dtype=np.bool_)  # sorted by marking: no sort
        mark[out[:got]] = True
        return np.flatnonzero(mark)

    def ids_of(self, seqs: np.ndarray) -> list[str]:
        """The ids of registered seqs."""
        seqs = np.ascontiguousarray(seqs, dtype=np.int64)
        if not len(seqs):
            return []
        sep = 0 if self._nul else 1
        size = int((self._off[seqs + 1].astype(np.int64) - self._off[seqs]).sum())
        out = np.empty(size + sep * len(seqs), dtype=np.uint8)
        out_off = np.empty(len(seqs) + 1, dtype=np.int64)
        end = _K.id_gather(self._arena, self._off, seqs, out, out_off, sep)
        raw = out[:end].tobytes()
        if sep:
            return raw[:-1].decode("utf-8", "surrogatepass").split("\0")
        return [raw[a:b].decode("utf-8", "surrogatepass")
                for a, b in zip(out_off[:-1].tolist(), out_off[1:].tolist(), strict=True)]

    def renumber(self, seqs: np.ndarray, new: np.ndarray | None = None,
                 top: int | None = None) -> None:
        """Give the registered ``seqs`` (sorted, all of them) the rising seqs ``new``.

        The arena keeps only their bytes and the offsets only seqs below ``top``. The
        table keeps its slots (an id's slot depends on its hash, not its seq): each live
        entry gets its new seq in one pass, no id hashed again (tombstones stay, until a
        rebuild for room); it is rebuilt only when the new seqs do not fit its entries.
        Like a dict, the table does not shrink when ids go, so that a registry emptied and
        filled again does not rebuild it at every step of its growth (at d = 3, 500K
        subscriptions in batches of 50,000 after a full delete: 0.08 us per subscription
        of rebuilds).
        """
        seqs = np.ascontiguousarray(seqs, dtype=np.int64)
        n = len(seqs)
        new = np.arange(n, dtype=np.int64) if new is None else np.ascontiguousarray(
            new, dtype=np.int64)
        top = (int(new[-1]) + 1 if n else 0) if top is None else top
        new_of_old = None
        if n and top + 2 < 1 << self._bits:  # the new seqs fit the table's entries
            new_of_old = np.zeros(self._top, dtype=np.uint32)
            new_of_old[seqs] = new
        lens = np.zeros(top, dtype=np.int64)
        lens[new] = self._off[seqs + 1].astype(np.int64) - self._off[seqs]
        size = int(lens.sum())
        arena = np.empty(max(256, size), dtype=np.uint8)
        _K.id_gather(self._arena, self._off, seqs, arena, np.empty(n + 1, dtype=np.int64), 0)
        off: np.ndarray = np.zeros(max(65, top + 1),
                                   dtype=np.int64 if size > _M32 else np.uint32)
        off[1:top + 1] = np.cumsum(lens)
        self._arena, self._off, self._at, self._top = arena, off, size, top
        if new_of_old is not None:  # the slots stay (a hash picks them): seqs rewritten
            _K.id_remap(self._table, self._bits, new_of_old)
            return
        if not n:
            self._table[:] = 0
            self._used = 0
            return
        cap = max(64, int(n / _TARGET_LOAD) + 1, len(self._table))
        bits, dtype = _layout(cap, top)
        table: np.ndarray = np.zeros(cap, dtype=dtype)
        _K.id_rebuild(table, bits, self._seed, self._arena, self._off, new, new)
        self._table, self._bits, self._used = table, bits, n

    def first_other(self, seqs: np.ndarray, ids: Sequence[str]) -> int:
        """The first ``i`` whose ``ids[i]`` is not the id of seq ``seqs[i]`` (-1: none).

        The seqs must have their bytes in the index (registered, or registered once and
        not renumbered since): a byte comparison, no look-up.
        """
        seqs = np.ascontiguousarray(seqs, dtype=np.int64)
        if len(seqs) != len(ids):
            raise IdIndexError(f"{len(seqs)} seqs for {len(ids)} ids", field="ids",
                               value=len(ids))
        if not len(ids):
            return -1
        if int(seqs.min()) < 0 or int(seqs.max()) >= self._top:
            raise IdIndexError("a seq has no id", field="seqs", value=int(seqs.max()))
        buf, starts, sep, _ = encode_ids(ids)
        return int(_K.id_equal(self._arena, self._off, seqs, buf, starts, sep))

    def nbytes(self) -> int:
        """Bytes the index keeps."""
        return int(self._arena.nbytes + self._off.nbytes + self._table.nbytes)

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids_of(self.live()))

