"""Batched matching of the client banks: every path (single call, chunks, decode blocks,
threads) gives exactly the per-client filters' answer, as the same CSR arrays."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dls.bank as bank_mod
import dls.bitset as bitset_mod
import dls.bitset_bank as bitset_bank_mod
from dls.bank import BitSlicedCBFBank, DirectLabelBank
from dls.hashing import PositionTable

LABELS = 120  # labels 0..LABELS-1 are "in the space"; events also use labels beyond it
TABLE_LABELS = LABELS + 20  # labels a position table covers (0..TABLE_LABELS-1)


def _reference(bank: BitSlicedCBFBank | DirectLabelBank, labels: np.ndarray,
               exclude: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """CSR built one (event, client) pair at a time from ``contains``."""
    per_event = []
    for e, lab in enumerate(labels.tolist()):
        ex = -1 if exclude is None else int(exclude[e])
        per_event.append([c for c in range(bank.capacity)
                          if c != ex and bank.contains(c, lab)])
    offsets = np.zeros(len(per_event) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in per_event], out=offsets[1:])
    clients = np.array([c for p in per_event for c in p], dtype=np.int64)
    return offsets, clients


def _assert_same(got: tuple[np.ndarray, np.ndarray],
                 want: tuple[np.ndarray, np.ndarray]) -> None:
    off, cli = got
    assert off.dtype == np.int64 and cli.dtype == np.int64
    assert np.array_equal(off, want[0])
    assert np.array_equal(cli, want[1])


def _bank(kind: str, capacity: int, pairs: list[tuple[int, int]]
          ) -> BitSlicedCBFBank | DirectLabelBank:
    bank: BitSlicedCBFBank | DirectLabelBank
    if kind == "cbf":
        bank = BitSlicedCBFBank(53, 3, seed=7, initial_capacity=capacity)
    elif kind in ("table", "lookup"):  # a position table, or its bound lookup
        table = PositionTable(TABLE_LABELS, 53, 3, 7)
        bank = BitSlicedCBFBank(53, 3, seed=7, initial_capacity=capacity,
                                position_fn=table if kind == "table" else table.lookup)
        assert bank._cols_table is not None
    else:
        bank = DirectLabelBank(LABELS, base=5, initial_capacity=capacity)
    if pairs:
        clients = np.array([c for c, _ in pairs], dtype=np.int64)
        labels = np.array([lab for _, lab in pairs], dtype=np.uint64)
        if kind == "direct":
            labels += np.uint64(5)
        bank.add(clients, labels)
    return bank


def _events(rng: np.random.Generator, n: int) -> np.ndarray:
    """Labels that repeat (a few hot values), cover the space, or lie far outside it."""
    kind = rng.integers(0, 3, n)
    hot = rng.integers(0, 12, n)
    space = rng.integers(0, LABELS + 10, n)
    outside = rng.integers(2**40, 2**63, n)
    return np.where(kind == 0, hot, np.where(kind == 1, space, outside)).astype(np.uint64)


@settings(max_examples=50, deadline=None)
@given(
    kind=st.sampled_from(["cbf", "direct", "table", "lookup"]),
    capacity=st.sampled_from([64, 128, 192]),
    n_pairs=st.integers(0, 500),
    n_events=st.integers(0, 70),
    with_exclude=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
    threads=st.integers(1, 4),
    block_bytes=st.sampled_from([1, 300, 2**19]),
    chunk_bytes=st.sampled_from([16 * 3 * 9, 64 * 2**20]),
)
def test_every_match_path_gives_the_filters_answer(
        kind: str, capacity: int, n_pairs: int, n_events: int, with_exclude: bool,
        seed: int, threads: int, block_bytes: int, chunk_bytes: int) -> None:
    rng = np.random.default_rng(seed)
    pairs = list(zip(rng.integers(0, 131, n_pairs).tolist(),
                     rng.integers(0, LABELS, n_pairs).tolist(), strict=True))
    bank = _bank(kind, capacity, pairs)
    labels = _events(rng, n_events)
    if kind in ("table", "lookup"):  # a table knows its labels only
        labels %= np.uint64(TABLE_LABELS)
    exclude = None
    if with_exclude:
        # mostly a client the event matches (so excluding it changes the answer), else
        # -1 (nobody) or any client, in or beyond the capacity
        off, cli = _reference(bank, labels, None)
        exclude = rng.integers(-1, bank.capacity + 3, len(labels)).astype(np.int64)
        for e in range(len(labels)):
            if off[e + 1] > off[e] and rng.random() < 0.7:
                exclude[e] = rng.choice(cli[off[e]:off[e + 1]])
    want = _reference(bank, labels, exclude)
    _assert_same(bank.match(labels, exclude), want)
    bank.match_threads = threads
    with mock.patch.object(bitset_bank_mod, "_PARALLEL_MIN_EVENTS", 2), \
            mock.patch.object(bitset_mod, "_DECODE_BLOCK_BYTES", block_bytes), \
            mock.patch.object(bitset_bank_mod, "_MATCH_CHUNK_BYTES", chunk_bytes):
        _assert_same(bank.match(labels, exclude), want)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_threads_on_a_large_batch(threads: int) -> None:
    """The default thresholds: a batch large enough to be split really is."""
    rng = np.random.default_rng(threads)
    bank = BitSlicedCBFBank(997, 4, seed=3, initial_capacity=256)
    bank.add(rng.integers(0, 250, 20_000), rng.integers(0, 3000, 20_000).astype(np.uint64))
    labels = rng.integers(0, 3500, 4 * bitset_bank_mod._PARALLEL_MIN_EVENTS).astype(np.uint64)
    exclude = rng.integers(-1, 250, len(labels)).astype(np.int64)
    want = bank.match(labels, exclude)
    bank.match_threads = threads
    original = BitSlicedCBFBank._match_parallel
    with mock.patch.object(BitSlicedCBFBank, "_match_parallel", autospec=True,
                           side_effect=original) as spy:
        got = bank.match(labels, exclude)
    assert spy.call_count == (0 if threads == 1 else 1)
    if threads > 1:
        assert spy.call_args.args[3] == threads
    _assert_same(got, want)
    off, cli = want
    for e in rng.integers(0, len(labels), 50).tolist():
        ex = int(exclude[e])
        ref = [c for c in range(250) if c != ex and bank.contains(c, int(labels[e]))]
        assert cli[off[e]:off[e + 1]].tolist() == ref


def test_position_table_path() -> None:
    """The transposed table gives the rows of the position function; a label outside it
    fails as the function does; a table over the size limit is not copied."""
    table = PositionTable(TABLE_LABELS, 53, 3, 7, base=1000)
    bank = BitSlicedCBFBank(53, 3, seed=7, position_fn=table.lookup)
    labels = np.arange(1000, 1000 + TABLE_LABELS, dtype=np.uint64)[::-1].copy()
    cols, valid = bank._match_cols(labels)
    assert valid is None and np.array_equal(cols, table.lookup(labels).T)
    assert bank.memory_bytes() == (BitSlicedCBFBank(53, 3, seed=7).memory_bytes()
                                   + table.table.nbytes)
    for bad in (999, 1000 + TABLE_LABELS):
        with pytest.raises(ValueError, match="outside the table"):
            bank.match(np.array([1000, bad], dtype=np.uint64))
    with mock.patch.object(bank_mod, "_COLS_TABLE_MAX_BYTES", table.table.nbytes - 1):
        assert BitSlicedCBFBank(53, 3, seed=7, position_fn=table)._cols_table is None
    assert BitSlicedCBFBank(53, 4, seed=7, position_fn=table)._cols_table is None  # k


@pytest.mark.parametrize("field", ["match_threads", "update_threads"])
def test_thread_counts_are_validated(field: str) -> None:
    bank = BitSlicedCBFBank(64, 2)
    assert getattr(bank, field) == 1
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(ValueError, match=f"{field} must be a positive integer, got "):
            setattr(bank, field, bad)
        assert getattr(bank, field) == 1  # unchanged
    setattr(bank, field, np.int64(3))
    assert getattr(bank, field) == 3 and isinstance(getattr(bank, field), int)


def test_match_threads_on_an_empty_batch() -> None:
    bank = BitSlicedCBFBank(64, 2)
    bank.match_threads = 2
    off, cli = bank.match(np.zeros(0, dtype=np.uint64))
    assert off.tolist() == [0] and cli.shape == (0,) and cli.dtype == np.int64
