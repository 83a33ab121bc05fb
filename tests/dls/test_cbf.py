from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dls.cbf import HEADER_SIZE, K_SLACK, CBFParams, CountingBloomFilter, size_for
from dls.exceptions import (
    AbsentLabelError,
    DLSError,
    FilterParamsError,
    FilterTypeError,
    IncompatibleFiltersError,
)
from dls.hashing import PositionTable, positions

labels_st = st.lists(st.integers(0, 2**64 - 1), max_size=60)


def _brute_counters(labels: list[int], m: int, k: int, seed: int, bits: int) -> np.ndarray:
    """Reference: sequential per-increment saturating counters."""
    mx = (1 << bits) - 1
    c = [0] * m
    for lab in labels:
        for p in positions(np.array([lab], dtype=np.uint64), m, k, seed)[0].tolist():
            c[p] = min(c[p] + 1, mx)
    return np.array(c, dtype=np.uint8)


# ---------------------------------------------------------------- construction


def test_sizing() -> None:
    """5 hash functions instead of the optimal 7, for 2.7 % more counters, same rate."""
    f = CountingBloomFilter(1000, 0.01)
    m_opt = math.ceil(-1000 * math.log(0.01) / math.log(2) ** 2)
    assert m_opt == 9586 and round(m_opt / 1000 * math.log(2)) == 7
    assert f.m == math.ceil(-5 * 1000 / math.log(1 - 0.01 ** (1 / 5))) == 9849
    assert f.k == 5
    assert f.counter_bits == 4 and f.seed == 0
    assert f.params == CBFParams(9849, 5, 4, 0)
    assert len(f) == 0


def _rate(n: int, m: int, k: int) -> float:
    return (1.0 - math.exp(-k * n / m)) ** k


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 10**7), p=st.floats(1e-9, 0.9))
def test_size_for_reaches_the_rate_with_the_fewest_hashes_in_the_slack(n: int, p: float
                                                                       ) -> None:
    m, k = size_for(n, p)
    m_opt = max(1, math.ceil(-n * math.log(p) / math.log(2) ** 2))
    k_opt = min(64, max(1, round(m_opt / n * math.log(2))))
    assert 1 <= k <= k_opt
    assert m <= m_opt * (1 + K_SLACK) or (m, k) == (m_opt, k_opt)
    if k < k_opt:
        assert _rate(n, m, k) <= p * (1 + 1e-9)
    for fewer in range(1, k):  # a smaller k needs more than the slack
        need = -fewer * n / math.log1p(-(p ** (1 / fewer)))
        assert need > m_opt * (1 + K_SLACK) - 1


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        (
            {"expected_items": 0},
            "expected_items",
            "expected_items must be a positive integer, got 0",
        ),
        (
            {"expected_items": -5},
            "expected_items",
            "expected_items must be a positive integer, got -5",
        ),
        (
            {"expected_items": True},
            "expected_items",
            "expected_items must be a positive integer, got True",
        ),
        ({"fp_rate": 1.5}, "fp_rate", "fp_rate must be in (0, 1), got 1.5"),
        ({"fp_rate": 0.0}, "fp_rate", "fp_rate must be in (0, 1), got 0.0"),
        ({"fp_rate": 1}, "fp_rate", "fp_rate must be in (0, 1), got 1"),
        ({"fp_rate": float("nan")}, "fp_rate", "fp_rate must be in (0, 1), got nan"),
        ({"fp_rate": True}, "fp_rate", "fp_rate must be in (0, 1), got True"),
        ({"counter_bits": 3}, "counter_bits", "counter_bits must be 4 or 8, got 3"),
        ({"seed": -1}, "seed", None),
    ],
)
def test_bad_constructor_args(kwargs: dict[str, object], field: str, message: str | None) -> None:
    args: dict[str, object] = {"expected_items": 100, "fp_rate": 0.01}
    args.update(kwargs)
    with pytest.raises(FilterParamsError) as info:
        CountingBloomFilter(**args)  # type: ignore[arg-type]
    assert info.value.field == field
    assert info.value.value is kwargs[field] or info.value.value == kwargs[field]
    if message is not None:
        assert str(info.value) == message
    assert isinstance(info.value, DLSError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("m", "k", "bits", "message"),
    [
        (-1, 3, 4, "m must be a positive integer, got -1"),
        (0, 3, 4, "m must be a positive integer, got 0"),
        (True, 3, 4, "m must be a positive integer, got True"),
        (10, 0, 4, "k must be between 1 and 64, got 0"),
        (10, 65, 4, "k must be between 1 and 64, got 65"),
        (10, 3, 16, "counter_bits must be 4 or 8, got 16"),
        (10, 3, False, "counter_bits must be 4 or 8, got False"),
    ],
)
def test_bad_with_params(m: int, k: int, bits: int, message: str) -> None:
    with pytest.raises(FilterParamsError, match=None) as info:
        CountingBloomFilter.with_params(m, k, counter_bits=bits)
    assert str(info.value) == message


def test_tiny_fp_rate_caps_k() -> None:
    f = CountingBloomFilter(10, 1e-30)
    assert f.k == 64


# ---------------------------------------------------------------- scalar API


def test_add_contains_remove() -> None:
    f = CountingBloomFilter(100, 0.01)
    f.add(42)
    f.add(2**64 - 1)
    assert 42 in f and (2**64 - 1) in f
    assert f.count(42) >= 1
    assert len(f) == 2
    f.remove(42)
    assert len(f) == 1
    assert (2**64 - 1) in f
    f.remove(2**64 - 1)
    assert len(f) == 0
    assert f.fill_ratio() == 0.0
    assert 42 not in f


def test_remove_absent_raises_and_changes_nothing() -> None:
    f = CountingBloomFilter(100, 0.01)
    f.add(1)
    before = f.copy()
    with pytest.raises(KeyError, match="label 7 is not in the filter"):
        f.remove(7)
    assert f == before
    f.discard(7)
    assert f == before
    f.discard(1)
    assert 1 not in f and len(f) == 0


def test_bad_scalar_labels() -> None:
    f = CountingBloomFilter(100, 0.01)
    with pytest.raises(ValueError):
        f.add(-1)
    with pytest.raises(ValueError):
        f.add(2**64)
    with pytest.raises(TypeError):
        f.add("x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        f.add(True)
    assert len(f) == 0 and f.fill_ratio() == 0.0


@pytest.mark.parametrize("bits", [4, 8])
def test_saturation_sticks(bits: int) -> None:
    mx = (1 << bits) - 1
    f = CountingBloomFilter.with_params(1000, 3, counter_bits=bits)
    for _ in range(mx + 1):
        f.add(5)
    pos = positions([5], 1000, 3)[0]
    assert f.counters[pos].tolist() == [mx] * 3
    assert f.count(5) == mx
    for _ in range(mx + 1):
        f.remove(5)
    # saturated counters are never decremented
    assert f.counters[pos].tolist() == [mx] * 3
    assert 5 in f
    assert len(f) == 0


def test_saturation_batched() -> None:
    f = CountingBloomFilter.with_params(1000, 3)
    f.add_many(np.full(16, 5, dtype=np.uint64))
    assert f.count(5) == 15
    f.remove_many(np.full(16, 5, dtype=np.uint64))
    assert f.count(5) == 15 and 5 in f


def test_repeated_positions_within_a_label() -> None:
    # m = 1: every position of every label is 0, so one add increments counter 0 k times
    f = CountingBloomFilter.with_params(1, 3)
    f.add(9)
    assert f.counters.tolist() == [3]
    f.add(10)
    assert f.counters.tolist() == [6]
    f.remove(9)
    assert f.counters.tolist() == [3]
    f.remove_many([10])
    assert f.counters.tolist() == [0]
    g = CountingBloomFilter.from_counters(np.array([2], dtype=np.uint8), 3)
    # two increments but k = 3 decrements needed: definitely never inserted
    with pytest.raises(KeyError):
        g.remove(1)
    assert g.counters.tolist() == [2]


def test_counters_read_only() -> None:
    f = CountingBloomFilter(10, 0.1)
    with pytest.raises(ValueError):
        f.counters[0] = 3


def test_clear_copy_eq_repr() -> None:
    f = CountingBloomFilter(100, 0.01, seed=3)
    f.add_many([1, 2, 3])
    g = f.copy()
    assert g == f and g is not f
    g.add(4)
    assert g != f
    f.clear()
    assert len(f) == 0 and f.fill_ratio() == 0.0
    assert f == CountingBloomFilter(100, 0.01, seed=3)
    assert f != CountingBloomFilter(100, 0.01, seed=4)
    assert "CountingBloomFilter(m=985, k=5, counter_bits=4, seed=3" in repr(f)
    assert (f == 3) is False
    with pytest.raises(TypeError):
        hash(f)


# ---------------------------------------------------------------- batched API


@settings(max_examples=80, deadline=None)
@given(added=labels_st, bits=st.sampled_from([4, 8]), m=st.integers(1, 300), k=st.integers(1, 6))
def test_add_many_matches_sequential(added: list[int], bits: int, m: int, k: int) -> None:
    f = CountingBloomFilter.with_params(m, k, counter_bits=bits, seed=7)
    f.add_many(np.array(added, dtype=np.uint64))
    assert np.array_equal(f.counters, _brute_counters(added, m, k, 7, bits))
    g = CountingBloomFilter.with_params(m, k, counter_bits=bits, seed=7)
    for lab in added:
        g.add(lab)
    assert f == g
    # no false negatives
    if added:
        assert f.contains_many(np.array(added, dtype=np.uint64)).all()
        counts = f.count_many(np.array(added, dtype=np.uint64))
        assert counts.tolist() == [f.count(x) for x in added]


@settings(max_examples=80, deadline=None)
@given(
    base=labels_st,
    extra=labels_st,
    bits=st.sampled_from([4, 8]),
    m=st.integers(50, 2000),
    k=st.integers(1, 6),
    data=st.data(),
)
def test_remove_many_restores(
    base: list[int], extra: list[int], bits: int, m: int, k: int, data: st.DataObject
) -> None:
    f = CountingBloomFilter.with_params(m, k, counter_bits=bits)
    f.add_many(base)
    snapshot = f.copy()
    f.add_many(extra)
    assert all(x in f for x in base + extra)
    perm = data.draw(st.permutations(extra))
    f.remove_many(np.array(perm, dtype=np.uint64))
    if not np.any(_brute_counters(base + extra, m, k, 0, bits) == (1 << bits) - 1):
        # no counter ever saturated: removal restores exactly
        assert f == snapshot
    assert all(x in f for x in base)
    assert len(f) == len(base)


def test_remove_many_all_or_nothing() -> None:
    f = CountingBloomFilter(1000, 0.001)
    f.add_many(np.arange(100, dtype=np.uint64))
    before = f.copy()
    batch = np.array([1, 2, 3, 10**12, 4], dtype=np.uint64)
    assert 10**12 not in f
    with pytest.raises(KeyError, match=str(10**12)):
        f.remove_many(batch)
    assert f == before
    # a label removed more often than it was added in one batch is refused too
    g = CountingBloomFilter(1000, 0.001)
    g.add(77)
    with pytest.raises(KeyError, match="77"):
        g.remove_many([77, 77])
    assert g.count(77) == 1 and len(g) == 1
    g.remove_many(np.array([77], dtype=np.int64))
    assert len(g) == 0 and g.fill_ratio() == 0.0


def test_empty_batches() -> None:
    f = CountingBloomFilter(10, 0.1)
    f.add_many(np.empty(0, dtype=np.uint64))
    f.remove_many([])
    assert f.contains_many([]).shape == (0,)
    assert f.count_many(np.empty(0, dtype=np.uint64)).shape == (0,)
    assert len(f) == 0


def test_fpr_band() -> None:
    f = CountingBloomFilter(1000, 0.01)
    rng = np.random.default_rng(12345)
    members = rng.integers(0, 2**63, 1000, dtype=np.uint64)
    f.add_many(members)
    assert f.contains_many(members).all()
    absent = rng.integers(2**63, 2**64 - 1, 100_000, dtype=np.uint64, endpoint=True)
    fpr = float(f.contains_many(absent).mean())
    assert 0.005 < fpr < 0.02, fpr
    assert 0.005 < f.estimated_fpr() < 0.02
    assert abs(f.fill_ratio() - 0.01 ** (1 / f.k)) < 0.03  # about half at the optimal k


def test_memory_bytes() -> None:
    assert CountingBloomFilter.with_params(10, 2).memory_bytes() == 5
    assert CountingBloomFilter.with_params(11, 2).memory_bytes() == 6
    assert CountingBloomFilter.with_params(11, 2, counter_bits=8).memory_bytes() == 11


# ---------------------------------------------------------------- position injection


def test_position_table_injection_identical() -> None:
    table = PositionTable(10_000, 4099, 5, 3)
    f = CountingBloomFilter.with_params(4099, 5, seed=3, position_fn=table)
    g = CountingBloomFilter.with_params(4099, 5, seed=3)
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 10_000, 3000, dtype=np.uint64)
    f.add_many(labels)
    g.add_many(labels)
    f.add(17)
    g.add(17)
    assert f == g
    probe = np.arange(10_000, dtype=np.uint64)
    assert np.array_equal(f.count_many(probe), g.count_many(probe))
    assert f.copy() == g


def test_scalar_ops_use_a_foreign_position_fn() -> None:
    """Only dls.hashing's own functions are replaced by mmh3 on the scalar path."""
    from dls.hashing import make_position_fn

    own = make_position_fn(4099, 5, 3, label_space_size=10_000)
    assert CountingBloomFilter.with_params(4099, 5, seed=3, position_fn=own)._scalar_hash
    other_seed = CountingBloomFilter.with_params(4099, 5, seed=4, position_fn=own)
    assert not other_seed._scalar_hash

    def shifted(labels: np.ndarray) -> np.ndarray:  # not hashing at all
        return (labels.astype(np.int64)[:, None] + np.arange(5)) % 4099

    f = CountingBloomFilter.with_params(4099, 5, seed=3, position_fn=shifted)
    assert not f._scalar_hash
    f.add(10)
    assert np.flatnonzero(f.counters).tolist() == [10, 11, 12, 13, 14]
    assert f.count(10) == 1 and f.count(9) == 0
    f.remove(10)
    assert not f.counters.any()


def test_position_fn_bad_shape() -> None:
    def bad(labels: np.ndarray) -> np.ndarray:
        return np.zeros((labels.shape[0], 2), dtype=np.int64)

    f = CountingBloomFilter.with_params(100, 3, position_fn=bad)
    with pytest.raises(ValueError, match="shape"):
        f.add_many([1, 2])
    with pytest.raises(FilterParamsError):
        CountingBloomFilter.with_params(100, 3, position_fn=5)  # type: ignore[arg-type]


# ---------------------------------------------------------------- serialisation


@settings(max_examples=60, deadline=None)
@given(
    added=labels_st,
    bits=st.sampled_from([4, 8]),
    m=st.integers(1, 500),
    k=st.integers(1, 64),
    seed=st.integers(0, 2**32 - 1),
)
def test_serialisation_round_trip(added: list[int], bits: int, m: int, k: int, seed: int) -> None:
    f = CountingBloomFilter.with_params(m, k, counter_bits=bits, seed=seed)
    f.add_many(added)
    data = f.to_bytes()
    assert len(data) == HEADER_SIZE + f.memory_bytes()
    g = CountingBloomFilter.from_bytes(data)
    assert g == f
    assert g.to_bytes() == data


def test_serialisation_layout() -> None:
    f = CountingBloomFilter.with_params(3, 1, seed=0x01020304)
    f.add(0)
    data = f.to_bytes()
    assert data[:6] == b"DLSCBF"
    assert data[6] == 1 and data[7] == 4 and data[8] == 1
    assert data[9:13] == bytes([1, 2, 3, 4])
    assert int.from_bytes(data[13:21], "big") == 3
    assert int.from_bytes(data[21:29], "big", signed=True) == 1
    c = f.counters.tolist()
    assert data[29:] == bytes([(c[0] << 4) | c[1], c[2] << 4])


def test_from_bytes_errors() -> None:
    f = CountingBloomFilter.with_params(5, 2)
    f.add(1)
    good = f.to_bytes()
    with pytest.raises(FilterParamsError, match="too short"):
        CountingBloomFilter.from_bytes(good[:10])
    with pytest.raises(FilterParamsError, match="magic"):
        CountingBloomFilter.from_bytes(b"XXXXXX" + good[6:])
    with pytest.raises(FilterParamsError, match="version"):
        CountingBloomFilter.from_bytes(good[:6] + b"\x02" + good[7:])
    with pytest.raises(FilterParamsError, match="expected"):
        CountingBloomFilter.from_bytes(good + b"\x00")
    with pytest.raises(FilterParamsError, match="expected"):
        CountingBloomFilter.from_bytes(good[:-1])
    with pytest.raises(FilterParamsError, match="counter_bits"):
        CountingBloomFilter.from_bytes(good[:7] + b"\x05" + good[8:])
    with pytest.raises(FilterParamsError, match="k must"):
        CountingBloomFilter.from_bytes(good[:8] + b"\x00" + good[9:])
    with pytest.raises(FilterParamsError, match="padding"):
        CountingBloomFilter.from_bytes(good[:-1] + bytes([good[-1] | 1]))


# ---------------------------------------------------------------- combining


def test_union() -> None:
    a = CountingBloomFilter(100, 0.01)
    b = CountingBloomFilter(100, 0.01)
    a.add_many([1, 2])
    b.add_many([2, 3])
    u = a.union(b)
    assert all(x in u for x in (1, 2, 3)) and len(u) == 4
    assert u == (a | b)
    both = CountingBloomFilter(100, 0.01)
    both.add_many([1, 2, 2, 3])
    assert u == both
    a |= b
    assert a == u
    assert len(b) == 2  # untouched


def test_union_saturates() -> None:
    a = CountingBloomFilter.with_params(50, 2)
    a.add_many([9] * 10)
    u = a | a
    assert u.count(9) == 15
    assert int(u.counters.max()) == 15


def test_union_incompatible() -> None:
    a = CountingBloomFilter.with_params(100, 3)
    for other in (
        CountingBloomFilter.with_params(101, 3),
        CountingBloomFilter.with_params(100, 4),
        CountingBloomFilter.with_params(100, 3, counter_bits=8),
        CountingBloomFilter.with_params(100, 3, seed=1),
    ):
        with pytest.raises(IncompatibleFiltersError) as info:
            a.union(other)
        assert str(a.params) in str(info.value) and str(other.params) in str(info.value)
        with pytest.raises(IncompatibleFiltersError):
            a |= other
    with pytest.raises(TypeError):
        a.union({1, 2})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        a | {1, 2}  # type: ignore[operator]  # noqa: B015
    with pytest.raises(TypeError):
        a |= 3  # type: ignore[misc]


@settings(max_examples=80, deadline=None)
@given(added=labels_st, bits=st.sampled_from([4, 8]), m=st.integers(1, 64), k=st.integers(1, 6),
       data=st.data())
def test_scalar_ops_equal_batched_ops(added: list[int], bits: int, m: int, k: int,
                                      data: st.DataObject) -> None:
    """The scalar fast path (mmh3, Python ints) and the numpy batch path agree exactly."""
    f = CountingBloomFilter.with_params(m, k, counter_bits=bits, seed=3)
    g = CountingBloomFilter.with_params(m, k, counter_bits=bits, seed=3)
    for lab in added:
        f.add(lab)
    g.add_many(np.array(added, dtype=np.uint64))
    assert f == g
    gone = data.draw(st.lists(st.sampled_from(added), unique=True)) if added else []
    for lab in gone:
        f.remove(lab)
    g.remove_many(np.array(gone, dtype=np.uint64))
    assert f == g
    probe = added + [x ^ 1 for x in added]
    assert [f.count(x) for x in probe] == g.count_many(np.array(probe, dtype=np.uint64)).tolist()


def test_filter_errors_are_dls_errors() -> None:
    """Removing an absent label, combining with a non-filter, a position function of the
    wrong shape: DLSErrors that are still the builtins callers catch."""
    f = CountingBloomFilter(100, 0.01)
    with pytest.raises(AbsentLabelError) as absent:
        f.remove(7)
    assert isinstance(absent.value, KeyError) and isinstance(absent.value, DLSError)
    assert absent.value.field == "label" and absent.value.value == 7
    assert str(absent.value) == "label 7 is not in the filter"
    with pytest.raises(AbsentLabelError) as many:
        f.remove_many([8])
    assert many.value.value == 8
    with pytest.raises(FilterTypeError) as other:
        f.union(3)  # type: ignore[arg-type]
    assert isinstance(other.value, TypeError) and other.value.field == "other"

    def bad(labels: np.ndarray) -> np.ndarray:
        return np.zeros((labels.shape[0], 2), dtype=np.int64)

    g = CountingBloomFilter.with_params(100, 3, position_fn=bad)
    with pytest.raises(FilterParamsError) as shape:
        g.positions([1, 2])
    assert shape.value.field == "position_fn" and shape.value.value == (2, 2)
