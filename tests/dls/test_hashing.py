from __future__ import annotations

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dls.exceptions import DLSError, FilterParamsError, LabelError, LabelTypeError
from dls.hashing import (
    PositionTable,
    as_label_array,
    check_label,
    label_hash128,
    make_position_fn,
    positions,
    positions_scalar,
)

SEEDS = [0, 1, 42, 0xDEADBEEF, 2**32 - 1]


def _ref_hash(label: int, seed: int) -> tuple[int, int]:
    return mmh3.hash64(label.to_bytes(8, "big"), seed, signed=False)


def _ref_positions(label: int, m: int, k: int, seed: int) -> list[int]:
    h1, h2 = _ref_hash(label, seed)
    return [((h1 % m) + i * (h2 % m)) % m for i in range(k)]


@pytest.mark.parametrize("seed", SEEDS)
def test_label_hash128_matches_mmh3(seed: int) -> None:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2**64 - 1, 500, dtype=np.uint64, endpoint=True)
    labels[:4] = [0, 1, 2**63, 2**64 - 1]
    h1, h2 = label_hash128(labels, seed)
    assert h1.dtype == np.uint64 and h2.dtype == np.uint64
    for lab, a, b in zip(labels.tolist(), h1.tolist(), h2.tolist(), strict=True):
        assert (a, b) == _ref_hash(lab, seed)


@settings(max_examples=200, deadline=None)
@given(label=st.integers(0, 2**64 - 1), seed=st.integers(0, 2**32 - 1))
def test_label_hash128_property(label: int, seed: int) -> None:
    h1, h2 = label_hash128(np.array([label], dtype=np.uint64), seed)
    assert (int(h1[0]), int(h2[0])) == _ref_hash(label, seed)


def test_label_hash128_accepts_python_ints_and_signed() -> None:
    h_obj = label_hash128([0, 5, 2**64 - 1])
    h_u = label_hash128(np.array([0, 5, 2**64 - 1], dtype=np.uint64))
    assert np.array_equal(h_obj[0], h_u[0]) and np.array_equal(h_obj[1], h_u[1])
    h_i = label_hash128(np.array([0, 5], dtype=np.int64))
    assert np.array_equal(h_i[0], h_u[0][:2])


def test_label_hash128_does_not_modify_input() -> None:
    labels = np.array([1, 2, 3], dtype=np.uint64)
    label_hash128(labels)
    assert labels.tolist() == [1, 2, 3]


def test_label_hash128_empty() -> None:
    h1, h2 = label_hash128(np.empty(0, dtype=np.uint64))
    assert h1.shape == (0,) and h2.shape == (0,)


@pytest.mark.parametrize("bad", [[-1], np.array([-3], dtype=np.int64), [2**64]])
def test_bad_labels_rejected(bad: object) -> None:
    with pytest.raises((ValueError, OverflowError)):
        as_label_array(bad)


def test_float_labels_rejected() -> None:
    with pytest.raises(TypeError):
        as_label_array(np.array([1.0]))
    with pytest.raises(TypeError):
        check_label(True)
    with pytest.raises(ValueError):
        check_label(-1)


@pytest.mark.parametrize("call, error, field, value", [
    (lambda: check_label(True), LabelTypeError, "label", True),
    (lambda: check_label(2**64, field="base"), LabelError, "base", 2**64),
    (lambda: as_label_array(np.array([1.5])), LabelTypeError, "labels", "float64"),
    (lambda: as_label_array([[1, 2]]), LabelError, "labels", (1, 2)),
    (lambda: as_label_array(np.array([4, -3])), LabelError, "labels", -3),
    (lambda: as_label_array([1, 2**64]), LabelError, "labels", 2**64),
    (lambda: PositionTable(10, 100, 3, base=5).lookup([4]), LabelError, "labels", 4),
])
def test_label_errors_are_dls_errors_with_field_and_value(call, error, field, value) -> None:
    with pytest.raises(error) as info:
        call()
    assert isinstance(info.value, DLSError)
    assert isinstance(info.value, TypeError if error is LabelTypeError else ValueError)
    assert (info.value.field, info.value.value) == (field, value)


@pytest.mark.parametrize("seed", [-1, 2**32, True, 1.0])
def test_bad_seed(seed: object) -> None:
    with pytest.raises(FilterParamsError) as info:
        label_hash128([1], seed)  # type: ignore[arg-type]
    assert info.value.field == "seed"


@pytest.mark.parametrize(
    ("m", "k"),
    [(1, 1), (7, 3), (1000, 7), (65536, 4), (2**31 - 1, 5), (2**40 + 3, 64), (2**63 - 1, 64)],
)
def test_positions_formula(m: int, k: int) -> None:
    rng = np.random.default_rng(m)
    labels = rng.integers(0, 2**64 - 1, 300, dtype=np.uint64, endpoint=True)
    labels[:2] = [0, 2**64 - 1]
    for seed in (0, 9):
        pos = positions(labels, m, k, seed)
        assert pos.shape == (300, k) and pos.dtype == np.int64
        assert int(pos.min()) >= 0 and int(pos.max()) < m
        for row, lab in zip(pos.tolist(), labels.tolist(), strict=True):
            assert row == _ref_positions(lab, m, k, seed)
            assert row == positions_scalar(lab, m, k, seed)


@settings(max_examples=200, deadline=None)
@given(
    label=st.integers(0, 2**64 - 1),
    m=st.integers(1, 2**63 - 1),
    k=st.integers(1, 64),
    seed=st.integers(0, 2**32 - 1),
)
def test_positions_property(label: int, m: int, k: int, seed: int) -> None:
    pos = positions(np.array([label], dtype=np.uint64), m, k, seed)
    assert pos[0].tolist() == _ref_positions(label, m, k, seed)


@pytest.mark.parametrize(("m", "k"), [(0, 3), (-1, 3), (10, 0), (10, 65), (True, 3)])
def test_positions_bad_params(m: int, k: int) -> None:
    with pytest.raises(FilterParamsError):
        positions([1], m, k)


@pytest.mark.parametrize(("m", "k", "seed"), [(1000, 7, 0), (65536, 4, 3), (2**33 + 1, 3, 1)])
def test_position_table_matches_hashing(m: int, k: int, seed: int) -> None:
    table = PositionTable(5000, m, k, seed)
    assert table.table.dtype == (np.uint32 if m < 2**32 else np.int64)
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5000, 2000, dtype=np.uint64)
    labels[:2] = [0, 4999]
    got = table.lookup(labels)
    assert got.dtype == np.int64
    assert np.array_equal(got, positions(labels, m, k, seed))
    full = np.arange(5000, dtype=np.uint64)
    assert np.array_equal(table(full), positions(full, m, k, seed))


def test_position_table_out_of_range() -> None:
    table = PositionTable(10, 100, 3)
    with pytest.raises(ValueError, match="outside"):
        table.lookup(np.array([10], dtype=np.uint64))


def test_position_table_budget() -> None:
    with pytest.raises(FilterParamsError, match="budget"):
        PositionTable(1000, 100, 4, max_bytes=1000 * 4 * 4 - 1)
    PositionTable(1000, 100, 4, max_bytes=1000 * 4 * 4)
    with pytest.raises(FilterParamsError):
        PositionTable(0, 100, 4)


def test_make_position_fn_paths_agree() -> None:
    labels = np.arange(0, 3000, 7, dtype=np.uint64)
    tabled = make_position_fn(4099, 5, 11, label_space_size=3000)
    hashed = make_position_fn(4099, 5, 11, label_space_size=None)
    too_big = make_position_fn(4099, 5, 11, label_space_size=3000, max_bytes=10)
    assert isinstance(getattr(tabled, "__self__", None), PositionTable)
    assert not isinstance(getattr(hashed, "__self__", None), PositionTable)
    assert not isinstance(getattr(too_big, "__self__", None), PositionTable)
    ref = positions(labels, 4099, 5, 11)
    for fn in (tabled, hashed, too_big):
        assert np.array_equal(fn(labels), ref)


def test_position_table_with_a_base_equals_hashing():
    from dls.hashing import PositionTable, positions

    base = 7 << 20
    table = PositionTable(1 << 12, 1000, 5, 3, base=base)
    labels = np.arange(base, base + (1 << 12), 37, dtype=np.uint64)
    assert np.array_equal(table.lookup(labels), positions(labels, 1000, 5, 3))
    with pytest.raises(ValueError, match="outside the table's label space"):
        table.lookup(np.array([base - 1], dtype=np.uint64))
