from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dls.bank import BitSlicedCBFBank, ClientFilterBank, DirectLabelBank
from dls.cbf import CountingBloomFilter
from dls.exceptions import AbsentLabelError, DLSError, FilterParamsError, IncompatibleFiltersError
from dls.hashing import PositionTable


def _csr_to_lists(offsets: np.ndarray, clients: np.ndarray) -> list[list[int]]:
    assert offsets.dtype == np.int64 and clients.dtype == np.int64
    assert offsets[0] == 0 and offsets[-1] == clients.shape[0]
    assert np.all(np.diff(offsets) >= 0)
    return [clients[offsets[e] : offsets[e + 1]].tolist() for e in range(offsets.shape[0] - 1)]


def _brute_match(
    filters: dict[int, CountingBloomFilter], labels: np.ndarray, exclude: np.ndarray | None
) -> list[list[int]]:
    out = []
    for e, lab in enumerate(labels.tolist()):
        ex = -1 if exclude is None else int(exclude[e])
        out.append(sorted(c for c, f in filters.items() if c != ex and lab in f))
    return out


def _random_workload(
    rng: np.random.Generator, n_clients: int, n_pairs: int, label_space: int
) -> tuple[np.ndarray, np.ndarray]:
    clients = rng.integers(0, n_clients, n_pairs).astype(np.int64)
    labels = rng.integers(0, label_space, n_pairs).astype(np.uint64)
    return clients, labels


def test_protocol() -> None:
    assert isinstance(BitSlicedCBFBank(100, 3), ClientFilterBank)
    assert isinstance(DirectLabelBank(100), ClientFilterBank)


# ---------------------------------------------------------------- bit-sliced bank


@pytest.mark.parametrize(("m", "k", "bits"), [(257, 3, 4), (64, 2, 4), (1000, 4, 8), (5, 1, 4)])
@pytest.mark.parametrize("seed", [0, 99])
def test_bitsliced_matches_bruteforce(m: int, k: int, bits: int, seed: int) -> None:
    rng = np.random.default_rng(m * 31 + seed)
    n_clients = 150
    bank = BitSlicedCBFBank(m, k, counter_bits=bits, seed=seed)
    filters = {
        c: CountingBloomFilter.with_params(m, k, counter_bits=bits, seed=seed)
        for c in range(n_clients)
    }
    clients, labels = _random_workload(rng, n_clients, 3000, 400)
    bank.add(clients, labels)
    for c, lab in zip(clients.tolist(), labels.tolist(), strict=True):
        filters[c].add(lab)
    # remove a random subset of what was added
    sel = rng.random(clients.shape[0]) < 0.4
    bank.remove(clients[sel], labels[sel])
    for c, lab in zip(clients[sel].tolist(), labels[sel].tolist(), strict=True):
        filters[c].remove(lab)
    assert bank.n_clients == int(clients.max()) + 1
    assert bank.capacity % 64 == 0 and bank.capacity >= bank.n_clients
    for c in range(n_clients):
        assert bank.client_filter(c) == filters[c]
    events = rng.integers(0, 500, 300).astype(np.uint64)
    exclude = rng.integers(-1, n_clients, 300).astype(np.int64)
    for ex in (None, exclude):
        got = _csr_to_lists(*bank.match(events, exclude=ex))
        assert got == _brute_match(filters, events, ex)
    for c in rng.integers(0, n_clients, 50).tolist():
        for lab in rng.integers(0, 500, 5).tolist():
            assert bank.contains(c, lab) == (lab in filters[c])


@settings(max_examples=40, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.booleans(),
            st.lists(st.tuples(st.integers(0, 200), st.integers(0, 40)), max_size=30),
        ),
        max_size=8,
    ),
    m=st.integers(1, 120),
    k=st.integers(1, 4),
)
def test_bitsliced_property(ops: list[tuple[bool, list[tuple[int, int]]]], m: int, k: int) -> None:
    bank = BitSlicedCBFBank(m, k)
    filters: dict[int, CountingBloomFilter] = {}
    for is_add, pairs in ops:
        clients = np.array([c for c, _ in pairs], dtype=np.int64)
        labels = np.array([lab for _, lab in pairs], dtype=np.uint64)
        if is_add:
            bank.add(clients, labels)
            for c, lab in pairs:
                filters.setdefault(c, CountingBloomFilter.with_params(m, k)).add(lab)
        else:
            # model: all or nothing over a batch of sequential removes
            trial = {c: f.copy() for c, f in filters.items()}
            ok = True
            try:
                batch: dict[int, list[int]] = {}
                for c, lab in pairs:
                    batch.setdefault(c, []).append(lab)
                for c, labs in batch.items():
                    if c not in trial:
                        raise KeyError(c)
                    trial[c].remove_many(labs)
            except KeyError:
                ok = False
            before = {c: bank.client_filter(c) for c in filters}
            if ok:
                bank.remove(clients, labels)
                filters = trial
            else:
                with pytest.raises(KeyError):
                    bank.remove(clients, labels)
                assert {c: bank.client_filter(c) for c in filters} == before
    events = np.arange(45, dtype=np.uint64)
    exclude = (np.arange(45) % 7 - 1).astype(np.int64)
    for ex in (None, exclude):
        assert _csr_to_lists(*bank.match(events, ex)) == _brute_match(filters, events, ex)
    for c, f in filters.items():
        assert bank.client_filter(c) == f


def test_bitsliced_bits_consistent_with_counters() -> None:
    rng = np.random.default_rng(5)
    bank = BitSlicedCBFBank(300, 3)
    clients, labels = _random_workload(rng, 500, 5000, 10_000)
    bank.add(clients, labels)
    bank.remove(clients[:2500], labels[:2500])
    expected = np.packbits(bank.counters != 0, axis=1, bitorder="little")
    assert np.array_equal(bank.bits.view(np.uint8).reshape(300, -1), expected)


def test_bitsliced_saturation() -> None:
    bank = BitSlicedCBFBank(1000, 3)
    clients = np.full(16, 70, dtype=np.int64)
    labels = np.full(16, 5, dtype=np.uint64)
    bank.add(clients, labels)
    bank.remove(clients, labels)
    assert bank.contains(70, 5)
    assert bank.client_filter(70).count(5) == 15
    off, cli = bank.match(np.array([5], dtype=np.uint64))
    assert cli.tolist() == [70]
    off, cli = bank.match(np.array([5], dtype=np.uint64), np.array([70]))
    assert cli.tolist() == []


def test_bitsliced_remove_all_or_nothing() -> None:
    bank = BitSlicedCBFBank(2000, 4)
    bank.add(np.array([1, 2, 3], dtype=np.int64), np.array([10, 20, 30], dtype=np.uint64))
    counters = bank.counters.copy()
    bits = bank.bits.copy()
    with pytest.raises(KeyError, match="client 2 does not contain label 99"):
        bank.remove(np.array([1, 2], dtype=np.int64), np.array([10, 99], dtype=np.uint64))
    with pytest.raises(KeyError, match="client 500 does not contain label 10"):
        bank.remove(np.array([1, 500], dtype=np.int64), np.array([10, 10], dtype=np.uint64))
    with pytest.raises(KeyError, match="client 1 does not contain label 10"):
        bank.remove(np.array([1, 1], dtype=np.int64), np.array([10, 10], dtype=np.uint64))
    assert np.array_equal(bank.counters, counters) and np.array_equal(bank.bits, bits)
    bank.remove(np.array([1, 2, 3], dtype=np.int64), np.array([10, 20, 30], dtype=np.uint64))
    assert not bank.counters.any() and not bank.bits.any()


def test_bitsliced_growth() -> None:
    bank = BitSlicedCBFBank(100, 2)
    assert bank.capacity == 64 and bank.n_clients == 0
    bank.add(np.array([3], dtype=np.int64), np.array([1], dtype=np.uint64))
    assert bank.capacity == 64 and bank.n_clients == 4
    bank.add(np.array([64], dtype=np.int64), np.array([2], dtype=np.uint64))
    assert bank.capacity == 128 and bank.n_clients == 65
    bank.add(np.array([1000], dtype=np.int64), np.array([3], dtype=np.uint64))
    assert bank.capacity == 1024
    assert bank.contains(3, 1) and bank.contains(64, 2) and bank.contains(1000, 3)
    assert not bank.contains(5000, 3)
    off, cli = bank.match(np.array([1, 2, 3], dtype=np.uint64))
    assert _csr_to_lists(off, cli) == [[3], [64], [1000]]
    # 4-bit counters two to a byte, the bitset, the item counts
    assert bank.memory_bytes() == 100 * 512 + 100 * 16 * 8 + 1024 * 8
    assert BitSlicedCBFBank(100, 2, counter_bits=8, initial_capacity=1024).memory_bytes() == (
        100 * 1024 + 100 * 16 * 8 + 1024 * 8)


def test_bitsliced_input_errors() -> None:
    bank = BitSlicedCBFBank(100, 2)
    with pytest.raises(ValueError):
        bank.add(np.array([1, 2], dtype=np.int64), np.array([1], dtype=np.uint64))
    with pytest.raises(ValueError):
        bank.add(np.array([-1], dtype=np.int64), np.array([1], dtype=np.uint64))
    with pytest.raises(ValueError):
        bank.match(np.array([1, 2], dtype=np.uint64), np.array([1]))
    with pytest.raises(FilterParamsError):
        BitSlicedCBFBank(0, 2)
    with pytest.raises(FilterParamsError):
        BitSlicedCBFBank(10, 2, counter_bits=5)
    off, cli = bank.match(np.empty(0, dtype=np.uint64))
    assert off.tolist() == [0] and cli.shape == (0,)
    bank.add(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.uint64))
    bank.remove(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.uint64))
    assert bank.n_clients == 0


def test_bitsliced_position_table_identical() -> None:
    table = PositionTable(1000, 509, 3, 4)
    a = BitSlicedCBFBank(509, 3, seed=4, position_fn=table)
    b = BitSlicedCBFBank(509, 3, seed=4)
    rng = np.random.default_rng(3)
    clients, labels = _random_workload(rng, 200, 4000, 1000)
    a.add(clients, labels)
    b.add(clients, labels)
    assert np.array_equal(a.counters, b.counters) and np.array_equal(a.bits, b.bits)
    events = rng.integers(0, 1000, 500).astype(np.uint64)
    ra, rb = a.match(events), b.match(events)
    assert np.array_equal(ra[0], rb[0]) and np.array_equal(ra[1], rb[1])


def test_client_filter_serialisation_and_load() -> None:
    rng = np.random.default_rng(8)
    bank = BitSlicedCBFBank(777, 3, seed=12)
    clients, labels = _random_workload(rng, 100, 2000, 5000)
    bank.add(clients, labels)
    restored = BitSlicedCBFBank(777, 3, seed=12)
    for c in range(bank.n_clients):
        data = bank.client_filter(c).to_bytes()
        restored.load_client_filter(c, CountingBloomFilter.from_bytes(data))
    assert np.array_equal(restored.counters, bank.counters)
    assert np.array_equal(restored.bits, bank.bits)
    events = rng.integers(0, 5000, 300).astype(np.uint64)
    ra, rb = restored.match(events), bank.match(events)
    assert np.array_equal(ra[0], rb[0]) and np.array_equal(ra[1], rb[1])
    assert len(bank.client_filter(0)) == int((clients == 0).sum())
    assert len(bank.client_filter(10_000)) == 0
    with pytest.raises(IncompatibleFiltersError):
        restored.load_client_filter(0, CountingBloomFilter.with_params(777, 3, seed=13))


def test_match_chunking(monkeypatch: pytest.MonkeyPatch) -> None:
    import dls.bitset_bank as bitset_bank_mod

    rng = np.random.default_rng(2)
    bank = BitSlicedCBFBank(300, 2)
    clients, labels = _random_workload(rng, 300, 3000, 200)
    bank.add(clients, labels)
    events = rng.integers(0, 250, 1000).astype(np.uint64)
    exclude = rng.integers(-1, 300, 1000).astype(np.int64)
    full = bank.match(events, exclude)
    monkeypatch.setattr(bitset_bank_mod, "_MATCH_CHUNK_BYTES", 8 * 5 * 37)
    chunked = bank.match(events, exclude)
    assert np.array_equal(full[0], chunked[0]) and np.array_equal(full[1], chunked[1])


@pytest.mark.parametrize("capacity", [64, 192, 256])
@pytest.mark.parametrize("block_bytes", [1, 500, 2**18])
def test_match_decode_blocks(monkeypatch: pytest.MonkeyPatch, capacity: int,
                             block_bytes: int) -> None:
    """Block-wise decoding (power-of-two width or not) gives the brute-force answer."""
    import dls.bitset as bitset_mod

    monkeypatch.setattr(bitset_mod, "_DECODE_BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(capacity + block_bytes)
    m, k = 97, 2
    n_clients = capacity - 7
    bank = BitSlicedCBFBank(m, k, initial_capacity=capacity)
    assert bank.capacity == capacity
    filters = {c: CountingBloomFilter.with_params(m, k) for c in range(n_clients)}
    clients, labels = _random_workload(rng, n_clients, 40 * n_clients, 300)
    bank.add(clients, labels)
    for c, lab in zip(clients.tolist(), labels.tolist(), strict=True):
        filters[c].add(lab)
    # labels 1000.. mostly match nobody: empty rows and empty blocks between full ones
    events = np.concatenate([rng.integers(0, 300, 150), rng.integers(1000, 10**6, 150)])
    events = rng.permutation(events).astype(np.uint64)
    exclude = rng.integers(-1, n_clients, len(events)).astype(np.int64)
    for ex in (None, exclude):
        assert _csr_to_lists(*bank.match(events, ex)) == _brute_match(filters, events, ex)
    off, cli = bank.match(np.zeros(0, dtype=np.uint64))
    assert off.tolist() == [0] and cli.shape == (0,)


# ---------------------------------------------------------------- direct bank


def _exact_reference(pairs: Counter[tuple[int, int]]) -> dict[int, set[int]]:
    ref: dict[int, set[int]] = {}
    for (c, lab), n in pairs.items():
        if n > 0:
            ref.setdefault(lab, set()).add(c)
    return ref


@settings(max_examples=40, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.booleans(),
            st.lists(st.tuples(st.integers(0, 150), st.integers(0, 49)), max_size=30),
        ),
        max_size=8,
    )
)
def test_direct_bank_exact(ops: list[tuple[bool, list[tuple[int, int]]]]) -> None:
    bank = DirectLabelBank(50)
    held: Counter[tuple[int, int]] = Counter()
    for is_add, pairs in ops:
        clients = np.array([c for c, _ in pairs], dtype=np.int64)
        labels = np.array([lab for _, lab in pairs], dtype=np.uint64)
        if is_add:
            bank.add(clients, labels)
            held.update(pairs)
        else:
            need = Counter(pairs)
            if all(held[p] >= n for p, n in need.items()):
                bank.remove(clients, labels)
                held.subtract(need)
            else:
                before = bank.counts.copy()
                with pytest.raises(KeyError):
                    bank.remove(clients, labels)
                assert np.array_equal(bank.counts, before)
    ref = _exact_reference(held)
    events = np.arange(55, dtype=np.uint64)  # 50..54 are outside the space
    exclude = (np.arange(55) % 9 - 1).astype(np.int64)
    for ex in (None, exclude):
        got = _csr_to_lists(*bank.match(events, ex))
        want = [sorted(c for c in ref.get(e, set()) if ex is None or c != ex[e]) for e in range(55)]
        assert got == want
    for (c, lab), n in held.items():
        assert bank.contains(c, lab) == (n > 0)
        assert bank.count(c, lab) == n


def test_direct_bank_random_large() -> None:
    rng = np.random.default_rng(11)
    bank = DirectLabelBank(2000)
    clients, labels = _random_workload(rng, 700, 20_000, 2000)
    bank.add(clients, labels)
    held = Counter(zip(clients.tolist(), labels.tolist(), strict=True))
    sel = rng.random(20_000) < 0.5
    bank.remove(clients[sel], labels[sel])
    held.subtract(Counter(zip(clients[sel].tolist(), labels[sel].tolist(), strict=True)))
    ref = _exact_reference(held)
    events = rng.integers(0, 2000, 3000).astype(np.uint64)
    exclude = rng.integers(-1, 700, 3000).astype(np.int64)
    got = _csr_to_lists(*bank.match(events, exclude))
    want = [
        sorted(c for c in ref.get(lab, set()) if c != ex)
        for lab, ex in zip(events.tolist(), exclude.tolist(), strict=True)
    ]
    assert got == want
    expected_bits = np.packbits(bank.counts != 0, axis=1, bitorder="little")
    assert np.array_equal(bank._bits.view(np.uint8).reshape(2000, -1), expected_bits)


def test_direct_bank_budget_and_errors() -> None:
    with pytest.raises(FilterParamsError):
        DirectLabelBank(0)
    with pytest.raises(FilterParamsError, match="budget"):
        DirectLabelBank(1000, max_bytes=1000 * 64 * 4 - 1)
    bank = DirectLabelBank(1000, max_bytes=1000 * 128 * 4)
    bank.add(np.array([100], dtype=np.int64), np.array([5], dtype=np.uint64))
    assert bank.capacity == 128
    with pytest.raises(FilterParamsError, match="budget"):
        bank.add(np.array([128, 1], dtype=np.int64), np.array([5, 6], dtype=np.uint64))
    assert bank.capacity == 128 and not bank.contains(1, 6)
    with pytest.raises(FilterParamsError, match="outside the label space"):
        bank.add(np.array([1], dtype=np.int64), np.array([1000], dtype=np.uint64))
    assert not bank.contains(1, 1000)
    assert bank.memory_bytes() == 1000 * 128 * 4 + 1000 * 2 * 8
    with pytest.raises(KeyError, match="client 3 does not contain label 5"):
        bank.remove(np.array([3], dtype=np.int64), np.array([5], dtype=np.uint64))


def test_direct_bank_with_a_base():
    base = 5 << 20
    bank = DirectLabelBank(100, base=base)
    bank.add(np.array([3]), np.array([base + 7], dtype=np.uint64))
    assert bank.contains(3, base + 7) and not bank.contains(3, 7)
    off, cli = bank.match(np.array([base + 7, 7, base + 100], dtype=np.uint64))
    assert off.tolist() == [0, 1, 1, 1] and cli.tolist() == [3]
    with pytest.raises(FilterParamsError, match="outside the label space"):
        bank.add(np.array([3]), np.array([7], dtype=np.uint64))


def test_bank_errors_are_dls_errors_that_name_the_field() -> None:
    """Every error is a DLSError and still the builtin the caller may catch."""
    bank = BitSlicedCBFBank(100, 2)
    bank.add(np.array([1], dtype=np.int64), np.array([10], dtype=np.uint64))
    cases: list[tuple[Callable[[], object], type[Exception], str, object]] = [
        (lambda: bank.contains("x", 1), TypeError, "client", "x"),  # type: ignore[arg-type]
        (lambda: bank.contains(-2, 1), ValueError, "client", -2),
        (lambda: bank.add(np.array([1.5]), np.array([1], dtype=np.uint64)), TypeError,
         "clients", ("float64", (1,))),
        (lambda: bank.add(np.array([1, 2]), np.array([1], dtype=np.uint64)), ValueError,
         "clients", (2, 1)),
        (lambda: bank.add(np.array([-3]), np.array([1], dtype=np.uint64)), ValueError,
         "clients", -3),
        (lambda: bank.match(np.array([1, 2], dtype=np.uint64), np.array([1])), ValueError,
         "exclude", ("int64", (1,))),
        (lambda: bank.load_client_filter(0, "f"), TypeError, "cbf", "f"),  # type: ignore[arg-type]
        (lambda: bank.remove(np.array([1]), np.array([11], dtype=np.uint64)), KeyError,
         "label", (1, 11)),
        (lambda: bank.remove(np.array([900]), np.array([10], dtype=np.uint64)), KeyError,
         "label", (900, 10)),
    ]
    for call, builtin, field, value in cases:
        with pytest.raises(DLSError) as info:
            call()
        assert isinstance(info.value, builtin), (field, type(info.value))
        assert info.value.field == field and info.value.value == value
    assert isinstance(info.value, AbsentLabelError)
    assert str(info.value) == "client 900 does not contain label 10"  # no KeyError quotes
    with pytest.raises(FilterParamsError) as params:
        bank.match_threads = 0
    assert params.value.field == "match_threads" and params.value.value == 0
    direct = DirectLabelBank(10)
    with pytest.raises(AbsentLabelError, match="client 3 does not contain label 5"):
        direct.remove(np.array([3]), np.array([5], dtype=np.uint64))


def test_bank_shares_the_filter_parameters() -> None:
    """The bank reads its parameters like a CountingBloomFilter does (one mixin)."""
    bank = BitSlicedCBFBank(101, 3, counter_bits=8, seed=9)
    cbf = CountingBloomFilter.with_params(101, 3, counter_bits=8, seed=9)
    assert bank.params == cbf.params and bank.max_count == cbf.max_count == 255
    assert (bank.m, bank.k, bank.counter_bits, bank.seed) == (101, 3, 8, 9)
    assert repr(bank).startswith("BitSlicedCBFBank(m=101, k=3, counter_bits=8, seed=9, ")
