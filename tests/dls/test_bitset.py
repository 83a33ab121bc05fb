"""Bitsets of matching clients to CSR client lists: popcounts per row and the decode."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dls.bitset import WORD_BITS, decode, round_up, row_counts


@settings(max_examples=80, deadline=None)
@given(n_events=st.integers(0, 40), n_words=st.integers(1, 40), seed=st.integers(0, 2**16),
       density=st.sampled_from([0.0, 0.1, 0.5, 1.0]))
def testrow_counts(n_events: int, n_words: int, seed: int, density: float) -> None:
    rng = np.random.default_rng(seed)
    bits = rng.random((n_events, n_words * 64)) < density
    acc = np.packbits(bits, axis=1, bitorder="little").view(np.uint64)
    got = row_counts(acc)
    assert got.dtype == np.int64
    assert got.tolist() == bits.sum(axis=1).tolist()


@pytest.mark.parametrize("n_words", [8, 992, 1000, 1008])
def test_row_counts_full_rows(n_words: int) -> None:
    """All bits set: the largest lane sums (up to 1,000 words) do not overflow."""
    acc = np.full((3, n_words), np.iinfo(np.uint64).max, dtype=np.uint64)
    assert row_counts(acc).tolist() == [64 * n_words] * 3


@settings(max_examples=60, deadline=None)
@given(n_events=st.integers(0, 30), n_words=st.integers(1, 5), seed=st.integers(0, 2**16),
       density=st.sampled_from([0.0, 0.05, 0.5, 1.0]))
def test_decode_lists_the_set_bits_in_order(n_events: int, n_words: int, seed: int,
                                            density: float) -> None:
    rng = np.random.default_rng(seed)
    bits = rng.random((n_events, n_words * WORD_BITS)) < density
    acc = np.packbits(bits, axis=1, bitorder="little").view(np.uint64)
    offsets, clients = decode(acc)
    assert offsets.dtype == np.int64 and clients.dtype == np.int64
    assert offsets.tolist() == [0, *np.cumsum(bits.sum(axis=1)).tolist()]
    for e in range(n_events):
        assert clients[offsets[e]:offsets[e + 1]].tolist() == np.flatnonzero(bits[e]).tolist()


def test_round_up() -> None:
    assert [round_up(n) for n in (1, 63, 64, 65, 128)] == [64, 64, 64, 128, 128]
