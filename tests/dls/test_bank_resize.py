"""``BitSlicedCBFBank.resized``: a larger bank holding exactly the pairs given."""

from __future__ import annotations

import numpy as np

from dls.bank import BitSlicedCBFBank
from dls.cbf import CountingBloomFilter


def test_a_resized_bank_is_the_bank_built_from_its_pairs_at_the_new_size() -> None:
    rng = np.random.default_rng(3)
    clients = rng.integers(0, 70, 500)
    labels = rng.integers(0, 10_000, 500).astype(np.uint64)
    old = BitSlicedCBFBank(64, 3, counter_bits=4, seed=5)
    old.add(clients, labels)
    old.match_threads = 2
    old.update_threads = 3
    before = old.counters.copy()
    new = old.resized(1024, 4, clients, labels)
    assert np.array_equal(old.counters, before)  # the old bank is left as it was
    assert (new.m, new.k, new.counter_bits, new.seed) == (1024, 4, 4, 5)
    assert (new.capacity, new.n_clients, new.match_threads, new.update_threads) == (
        old.capacity, 70, 2, 3)
    assert np.array_equal(new.item_counts, old.item_counts)
    for c in (0, 33, 69):
        want = CountingBloomFilter.with_params(1024, 4, seed=5)
        want.add_many(labels[clients == c])
        assert new.client_filter(c) == want
    probe = rng.integers(0, 10_000, 2000).astype(np.uint64)
    off_new, cli_new = new.match(probe)
    off_old, cli_old = old.match(probe)
    assert off_new[-1] <= off_old[-1]  # fewer false positives, and no label lost:
    for c, label in zip(clients.tolist(), labels.tolist(), strict=True):
        assert new.contains(c, label)
    fill = new.fill_ratios()
    assert np.allclose(new.estimated_fprs(), fill ** 4)
    new.remove(clients, labels)  # removes exactly what it holds
    assert not new.counters.any() and not new.item_counts.any()


def test_a_resized_bank_keeps_clients_with_no_pairs() -> None:
    old = BitSlicedCBFBank(32, 2)
    old.add(np.array([130]), np.array([7], dtype=np.uint64))
    new = old.resized(64, 2, np.zeros(0, np.int64), np.zeros(0, np.uint64))
    assert new.n_clients == 131 and new.capacity == old.capacity
    assert not new.counters.any() and new.fill_ratios().shape == (131,)


def test_the_fill_of_some_clients_is_theirs_in_every_layout() -> None:
    rng = np.random.default_rng(4)
    for bits in (4, 8):
        bank = BitSlicedCBFBank(128, 3, counter_bits=bits)
        bank.add(rng.integers(0, 130, 900), rng.integers(0, 5000, 900).astype(np.uint64))
        some = np.array([0, 1, 7, 64, 129, 128])
        assert np.array_equal(bank.fill_of(some), bank.fill_ratios()[some])
