"""The compiled kernels give what the numpy reference gives (docs: dls._jit).

Each test runs the same inputs through both paths in one process: the functions by their
two names (``*_compiled``, ``*_reference``), the banks and filters as twin subclasses whose
methods are bound to one path each. Positions, counters, bitsets, item counts, matches and
errors (type and message) must be identical. Skipped with ``DLS_NO_JIT=1`` or without
numba: only the reference exists then, and the rest of the suite tests it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dls import _jit, bitset, hashing, mapping
from dls.bank import BitSlicedCBFBank, DirectLabelBank
from dls.bitset_bank import BitsetBank
from dls.cbf import CountingBloomFilter
from dls.exceptions import DLSError
from dls.hashing import PositionTable
from tests.dls.test_mapping import spaces as mapping_spaces

pytestmark = pytest.mark.skipif(not _jit.ENABLED, reason=_jit.REASON or "numba absent")

U64 = st.integers(0, 2**64 - 1)


def _decode_reference(acc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(acc.shape[0] + 1, dtype=np.int64)
    np.cumsum(bitset.row_counts_reference(acc), out=offsets[1:])
    clients = np.empty(int(offsets[-1]), dtype=np.int64)
    bitset.decode_into_reference(acc, offsets, clients)
    return offsets, clients


def _decode_compiled(acc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(acc.shape[0] + 1, dtype=np.int64)
    np.cumsum(bitset._row_counts_compiled(acc), out=offsets[1:])
    clients = np.empty(int(offsets[-1]), dtype=np.int64)
    bitset._decode_into_compiled(acc, offsets, clients)
    return offsets, clients


class _Reference:
    """Mixin: a bank on the numpy path only."""

    _add_pairs = BitsetBank._add_pairs_reference
    _remove_pairs = BitsetBank._remove_pairs_reference
    _accumulate = BitsetBank._accumulate_reference

    def _match_chunk(self, labels: np.ndarray, exclude: np.ndarray | None
                     ) -> tuple[np.ndarray, np.ndarray]:
        return _decode_reference(self._accumulate(labels, exclude))  # type: ignore[attr-defined]


class _Compiled:
    """Mixin: a bank on the compiled path only."""

    _add_pairs = BitsetBank._add_pairs_compiled
    _remove_pairs = BitsetBank._remove_pairs_compiled
    _accumulate = BitsetBank._accumulate_compiled

    def _match_chunk(self, labels: np.ndarray, exclude: np.ndarray | None
                     ) -> tuple[np.ndarray, np.ndarray]:
        return _decode_compiled(self._accumulate(labels, exclude))  # type: ignore[attr-defined]


class RefCBFBank(_Reference, BitSlicedCBFBank):
    pass


class JitCBFBank(_Compiled, BitSlicedCBFBank):
    pass


class RefDirectBank(_Reference, DirectLabelBank):
    pass


class JitDirectBank(_Compiled, DirectLabelBank):
    pass


class RefCBF(CountingBloomFilter):
    _apply_add = CountingBloomFilter._apply_add_reference
    remove_many = CountingBloomFilter._remove_many_reference
    count_many = CountingBloomFilter._count_many_reference


class JitCBF(CountingBloomFilter):
    _apply_add = CountingBloomFilter._apply_add_compiled
    remove_many = CountingBloomFilter._remove_many_compiled
    count_many = CountingBloomFilter._count_many_compiled


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        return ("ok", fn(*args))
    except (DLSError, IndexError) as exc:
        return ("error", type(exc), str(exc))


def _same(a: Any, b: Any) -> None:
    if isinstance(a, tuple) and a and a[0] == "ok":
        assert b[0] == "ok", b
        _same_value(a[1], b[1])
    else:
        assert a == b


def _same_value(a: Any, b: Any) -> None:
    if isinstance(a, tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same_value(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a, b)
    else:
        assert a == b


def _same_bank(ref: BitsetBank, jit: BitsetBank) -> None:
    assert ref.capacity == jit.capacity and ref.n_clients == jit.n_clients
    assert np.array_equal(ref._counts, jit._counts)
    assert np.array_equal(ref._bits, jit._bits)
    if isinstance(ref, BitSlicedCBFBank):
        assert np.array_equal(ref._items, jit._items)  # type: ignore[attr-defined]
    # the bitset mirrors the counts, bit for bit (4-bit counters unpacked)
    counts = jit.counters if isinstance(jit, BitSlicedCBFBank) else jit._counts
    nz = np.packbits(counts != 0, axis=1, bitorder="little")
    assert np.array_equal(nz.view("<u8"), jit._bits)


# ---------------------------------------------------------------- positions


@settings(max_examples=200, deadline=None)
@given(labels=st.lists(U64, max_size=60),
       m=st.one_of(st.integers(1, 5000), st.integers(1, 2**63 - 1),
                   st.integers(0, 62).map(lambda e: 2**e)),
       k=st.integers(1, 64), seed=st.integers(0, 2**32 - 1))
def test_positions(labels: list[int], m: int, k: int, seed: int) -> None:
    arr = np.array(labels, dtype=np.uint64)
    ref = hashing.positions_reference(arr, m, k, seed)
    jit = hashing._positions_compiled(arr, m, k, seed)
    assert jit.dtype == np.int64 and np.array_equal(ref, jit)
    for label, row in zip(labels[:3], jit.tolist(), strict=False):
        assert row == hashing.positions_scalar(label, m, k, seed)


@pytest.mark.parametrize(("m", "k", "seed", "labels"), [
    (0, 3, 0, [1]), (10, 0, 0, [1]), (10, 65, 0, [1]), (10, 3, -1, [1]), (10, 3, 2**32, [1]),
    (10, 3, 0, [-1]), (10, 3, 0, [[1, 2]]), (10, 3, 0, ["a"]), (True, 3, 0, [1])])
def test_positions_refuse_alike(m: Any, k: Any, seed: Any, labels: Any) -> None:
    _same(_outcome(hashing.positions_reference, labels, m, k, seed),
          _outcome(hashing._positions_compiled, labels, m, k, seed))
    assert _outcome(hashing._positions_compiled, labels, m, k, seed)[0] == "error"


# ---------------------------------------------------------------- bitset decode


@st.composite
def bitsets(draw: Any) -> np.ndarray:
    n_events = draw(st.integers(0, 40))
    n_words = draw(st.sampled_from([1, 2, 3, 8, 16, 24]))
    density = draw(st.sampled_from([0.0, 0.02, 0.5, 1.0]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    bits = rng.random((n_events, n_words * 64)) < density
    return np.packbits(bits, axis=1, bitorder="little").view("<u8").astype(np.uint64)


@settings(max_examples=150, deadline=None)
@given(acc=bitsets())
def test_row_counts_and_decode(acc: np.ndarray) -> None:
    assert np.array_equal(bitset.row_counts_reference(acc), bitset._row_counts_compiled(acc))
    _same_value(_decode_reference(acc), _decode_compiled(acc))


@settings(max_examples=60, deadline=None)
@given(acc=bitsets(), split=st.integers(0, 40), shift=st.integers(0, 5))
def test_decode_into_a_slice(acc: np.ndarray, split: int, shift: int) -> None:
    """A part of a bitset decoded into its range of a larger output (threads do this)."""
    split = min(split, acc.shape[0])
    offsets = np.zeros(acc.shape[0] + 1, dtype=np.int64)
    np.cumsum(bitset.row_counts_reference(acc), out=offsets[1:])
    offsets += shift
    outs = []
    for fn in (bitset.decode_into_reference, bitset._decode_into_compiled):
        out = np.full(int(offsets[-1]) + 3, -7, dtype=np.int64)
        fn(acc[split:], offsets[split:], out)
        outs.append(out)
    assert np.array_equal(outs[0], outs[1])


# ---------------------------------------------------------------- banks


@st.composite
def bank_ops(draw: Any, n_labels: int, max_client: int) -> list[tuple[Any, ...]]:
    """add / remove / match operations; removes mostly of held pairs, some absent."""
    ops: list[tuple[Any, ...]] = []
    held: list[tuple[int, int]] = []
    label = st.integers(0, n_labels - 1)
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["add", "add", "remove", "match"]))
        if kind == "add":
            pairs = draw(st.lists(st.tuples(st.integers(0, max_client), label), max_size=40))
            held.extend(pairs)
            ops.append(("add", pairs))
        elif kind == "remove":
            take = draw(st.lists(st.integers(0, max(0, len(held) - 1)), max_size=20,
                                 unique=True)) if held else []
            pairs = [held[i] for i in take]
            if draw(st.booleans()):  # possibly absent, possibly a client beyond the bank
                pairs.insert(draw(st.integers(0, len(pairs))),
                             (draw(st.integers(0, max_client + 70)), draw(label)))
            else:
                for i in sorted(take, reverse=True):
                    held.pop(i)
            ops.append(("remove", pairs))
        else:
            labels = draw(st.lists(st.integers(0, n_labels + 5), max_size=30))
            exclude = draw(st.lists(st.integers(-1, max_client + 70), min_size=len(labels),
                                    max_size=len(labels))) if draw(st.booleans()) else None
            ops.append(("match", labels, exclude))
    return ops


def _run(ref: BitsetBank, jit: BitsetBank, ops: list[tuple[Any, ...]], base: int = 0) -> None:
    for op in ops:
        if op[0] == "match":
            labels = np.array(op[1], dtype=np.uint64) + np.uint64(base)
            ex = None if op[2] is None else np.array(op[2], dtype=np.int64)
            outs = [_outcome(b.match, labels, ex) for b in (ref, jit)]  # type: ignore[attr-defined]
        else:
            cli = np.array([c for c, _ in op[1]], dtype=np.int64)
            lab = np.array([x for _, x in op[1]], dtype=np.uint64) + np.uint64(base)
            outs = [_outcome(getattr(b, op[0]), cli, lab) for b in (ref, jit)]
        _same(*outs)
        _same_bank(ref, jit)


@settings(max_examples=120, deadline=None)
@given(m=st.integers(1, 300), k=st.integers(1, 8), counter_bits=st.sampled_from([4, 8]),
       seed=st.integers(0, 2**32 - 1), table=st.booleans(), capacity=st.sampled_from([64, 128]),
       data=st.data())
def test_cbf_bank(m: int, k: int, counter_bits: int, seed: int, table: bool, capacity: int,
                  data: Any) -> None:
    n_labels = 50
    fn = PositionTable(n_labels + 6, m, k, seed).lookup if table else None
    banks = [cls(m, k, counter_bits=counter_bits, seed=seed, position_fn=fn,
                 initial_capacity=capacity) for cls in (RefCBFBank, JitCBFBank)]
    ops = data.draw(bank_ops(n_labels, 150))
    _run(banks[0], banks[1], ops)


@settings(max_examples=40, deadline=None)
@given(k=st.integers(1, 4), data=st.data())
def test_cbf_bank_saturates_alike(k: int, data: Any) -> None:
    """Tiny filters and one label added many times: counters reach 15 and stay."""
    banks = [cls(3, k) for cls in (RefCBFBank, JitCBFBank)]
    ops = [("add", [(1, 0)] * 20), *data.draw(bank_ops(3, 2))]
    _run(banks[0], banks[1], ops)


@settings(max_examples=100, deadline=None)
@given(n_labels=st.integers(1, 60), base=st.sampled_from([0, 5, 2**48]), data=st.data())
def test_direct_bank(n_labels: int, base: int, data: Any) -> None:
    banks = [cls(n_labels, base=base) for cls in (RefDirectBank, JitDirectBank)]
    ops = data.draw(bank_ops(n_labels + 3, 150))  # labels past the space: refused alike
    _run(banks[0], banks[1], ops, base)


def test_direct_bank_count_at_its_maximum() -> None:
    """An exact count cannot pass its type: the kernel undoes the batch, both refuse it."""
    banks = [cls(10) for cls in (RefDirectBank, JitDirectBank)]
    ops = [("add", [(0, 1), (3, 2), (0, 4)])]
    _run(banks[0], banks[1], ops)
    for b in banks:
        b._counts[4, 0] = 2**32 - 1
    _run(banks[0], banks[1], [("add", [(1, 1), (0, 1), (70, 2), (0, 4), (2, 2)])])
    assert banks[1]._counts[1, 0] == 1 and banks[1]._counts[2, 70] == 0


def test_threads_match_alike() -> None:
    """A batch large enough for threads: the compiled parts decode into one output."""
    rng = np.random.default_rng(5)
    ref, jit = RefCBFBank(500, 3), BitSlicedCBFBank(500, 3)
    cli = rng.integers(0, 300, 20_000).astype(np.int64)
    lab = rng.integers(0, 5_000, 20_000).astype(np.uint64)
    ref.add(cli, lab)
    jit.add(cli, lab)
    jit.match_threads = 2
    events = rng.integers(0, 5_000, 5_000).astype(np.uint64)
    exclude = rng.integers(-1, 300, 5_000).astype(np.int64)
    _same_value(ref.match(events, exclude), jit.match(events, exclude))


# ---------------------------------------------------------------- one filter


@settings(max_examples=120, deadline=None)
@given(m=st.integers(1, 200), k=st.integers(1, 8), counter_bits=st.sampled_from([4, 8]),
       seed=st.integers(0, 2**32 - 1), table=st.booleans(), data=st.data())
def test_cbf(m: int, k: int, counter_bits: int, seed: int, table: bool, data: Any) -> None:
    fn = PositionTable(40, m, k, seed).lookup if table else None
    ref, jit = (cls.with_params(m, k, counter_bits=counter_bits, seed=seed, position_fn=fn)
                for cls in (RefCBF, JitCBF))
    held: list[int] = []
    for _ in range(data.draw(st.integers(1, 8))):
        kind = data.draw(st.sampled_from(["add", "remove", "count"]))
        labels = data.draw(st.lists(st.integers(0, 39), max_size=30))
        if kind == "remove" and held and data.draw(st.booleans()):
            labels = data.draw(st.lists(st.sampled_from(held), max_size=10))
        if kind == "add":
            held.extend(labels)
        method = {"add": "add_many", "remove": "remove_many", "count": "count_many"}[kind]
        _same(_outcome(getattr(ref, method), labels), _outcome(getattr(jit, method), labels))
        assert np.array_equal(ref.counters, jit.counters) and ref.n_items == jit.n_items


def test_foreign_position_fn_out_of_range_is_refused() -> None:
    def bad(labels: np.ndarray) -> np.ndarray:
        return np.full((labels.shape[0], 2), 10, dtype=np.int64)

    for cls in (RefCBF, JitCBF):
        f = cls.with_params(10, 2, position_fn=bad)
        with pytest.raises(DLSError, match="outside"):
            f.add_many([1])
    for bank_cls in (RefCBFBank, JitCBFBank):
        bank = bank_cls(10, 2, position_fn=bad)
        with pytest.raises(DLSError, match="outside"):
            bank.add(np.array([0]), np.array([1], dtype=np.uint64))


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 200), k=st.integers(1, 8), counter_bits=st.sampled_from([4, 8]),
       seed=st.integers(0, 2**32 - 1), data=st.data())
def test_cbf_bank_large_batches_grouped_by_label(m: int, k: int, counter_bits: int, seed: int,
                                                 data: Any) -> None:
    """Batches with many pairs per table row take the label-sorted grouping: same state."""
    n_labels = 12
    fn = PositionTable(n_labels, m, k, seed).lookup
    banks = [cls(m, k, counter_bits=counter_bits, seed=seed, position_fn=fn)
             for cls in (RefCBFBank, JitCBFBank)]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    adds = [[(int(c), int(v)) for c, v in zip(rng.integers(0, 130, n),
                                              rng.integers(0, n_labels, n), strict=True)]
            for n in rng.integers(30, 200, 4)]
    ops: list[Any] = [("add", a) for a in adds]
    ops += [("remove", adds[1]), ("remove", adds[1] + [(129, 0)] * 40), ("remove", adds[0])]
    ops += [("add", [(5, 3)] * 60), ("remove", [(5, 3)] * 60)]  # saturates 4-bit counters
    _run(banks[0], banks[1], ops)


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 200), k=st.integers(1, 8), seed=st.integers(0, 2**32 - 1),
       threads=st.sampled_from([1, 2, 3]), wide=st.sampled_from([False] * 5 + [True]),
       data=st.data())
def test_cbf_bank_row_order_batches(m: int, k: int, seed: int, threads: int, wide: bool,
                                    data: Any) -> None:
    """Packed batches that cover a table go in row order (dls._rowkernels): same state.

    On one thread or on ranges of rows on several (``update_threads``). A refused remove
    (client 63 never added, inside the capacity, so a kernel itself meets the zero
    counter) leaves nothing changed, wherever it falls in the batch. ``wide``: the clients
    lie above 65,536, past what the kernels' 16-bit grouping buffer holds.
    """
    low = 1 << 16 if wide else 0
    n_labels = 12
    fn = PositionTable(n_labels, m, k, seed).lookup
    banks = [cls(m, k, seed=seed, position_fn=fn) for cls in (RefCBFBank, JitCBFBank)]
    banks[1].update_threads = threads
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    adds = [[(int(c), int(v)) for c, v in zip(rng.integers(low, low + 63, n),
                                              rng.integers(0, n_labels, n), strict=True)]
            for n in rng.integers(30, 200, 3)]
    bad = list(adds[1])
    bad.insert(data.draw(st.integers(0, len(bad))), (low + 63, data.draw(st.integers(0, 11))))
    ops: list[Any] = [("add", a) for a in adds]
    ops += [("remove", bad), ("remove", adds[1]), ("add", [(low + 7, 3)] * 40),
            ("remove", adds[0] + [(low + 7, 3)] * 40)]
    _run(banks[0], banks[1], ops)
    assert banks[1]._inverse is not None  # the row-order kernels ran


# ---------------------------------------------------------------- mapping


@settings(max_examples=80, deadline=None)
@given(space=mapping_spaces(), seed=st.integers(0, 2**32 - 1), n=st.integers(0, 30),
       budget=st.sampled_from([None, 5, 10**7]))
def test_box_labels_batch(space: Any, seed: int, n: int, budget: int | None) -> None:
    """Boxes to labels: the kernel and the numpy reference give the same CSR or error."""
    rng = np.random.default_rng(seed)
    cells = np.array([a.n_cells for a in space.attributes])
    a = rng.integers(0, cells, (n, len(cells)))
    b = rng.integers(0, cells, (n, len(cells)))
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    if n and rng.random() < 0.2:  # a box with hi < lo somewhere
        lo, hi = hi, lo
    outs = [_outcome(fn, space, lo, hi, budget) for fn in
            (mapping.box_labels_batch_reference, mapping._box_labels_batch_compiled)]
    _same(*outs)
