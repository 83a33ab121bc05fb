"""What the standalone filter and the bank share: counting keys, checks, read-only views."""

from __future__ import annotations

import numpy as np
import pytest

from dls.counting import check_positive_int, count_keys, read_only
from dls.exceptions import DLSError, FilterParamsError


def test_count_keys_paths_agree() -> None:
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 5000, 20_000)
    u1, c1 = count_keys(keys, 5000)  # bincount path
    u2, c2 = count_keys(keys, 2**40)  # sort path, int64
    u3, c3 = count_keys(keys, 2**31)  # sort path, uint32
    ref_u, ref_c = np.unique(keys, return_counts=True)
    for u, c in ((u1, c1), (u2, c2), (u3, c3)):
        assert np.array_equal(u, ref_u) and np.array_equal(c, ref_c)
        assert u.dtype == np.int64


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "3", None])
def test_check_positive_int_names_the_field(value: object) -> None:
    with pytest.raises(FilterParamsError) as info:
        check_positive_int(value, "label_space_size")
    assert info.value.field == "label_space_size" and info.value.value is value
    assert str(info.value) == f"label_space_size must be a positive integer, got {value!r}"
    assert isinstance(info.value, DLSError) and isinstance(info.value, ValueError)


def test_check_positive_int_and_read_only() -> None:
    assert check_positive_int(np.int32(5), "n") == 5
    arr = np.zeros(3, dtype=np.uint8)
    view = read_only(arr)
    with pytest.raises(ValueError):
        view[0] = 1
    arr[0] = 2
    assert view[0] == 2 and arr.flags.writeable
