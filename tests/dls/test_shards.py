"""Label shards: stable, the same scalar and vectorised, spread evenly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dls.exceptions import DLSError
from dls.shards import check_shards, label_shard, label_shards


def test_shards_are_pinned() -> None:
    """Persisted in topic names and sent between processes: a change would misroute."""
    assert [label_shard(x, 4) for x in range(8)] == [0, 0, 3, 2, 1, 1, 3, 1]
    assert label_shard(2**64 - 1, 7) == label_shards(np.array([2**64 - 1], np.uint64), 7)[0]
    assert label_shards(np.arange(5, dtype=np.uint64), 1).tolist() == [0] * 5


@given(st.lists(st.integers(0, 2**64 - 1), max_size=50), st.integers(1, 300))
def test_scalar_and_vector_agree(labels: list[int], shards: int) -> None:
    got = label_shards(np.array(labels, dtype=np.uint64), shards)
    assert got.dtype == np.int64
    assert got.tolist() == [label_shard(x, shards) for x in labels]
    assert all(0 <= s < shards for s in got.tolist())


def test_consecutive_labels_spread_evenly() -> None:
    counts = np.bincount(label_shards(np.arange(100_000, dtype=np.uint64), 8), minlength=8)
    assert counts.min() > 0.95 * 100_000 / 8 and counts.max() < 1.05 * 100_000 / 8


@pytest.mark.parametrize("bad", [0, -1, 2.0, "2", True, None])
def test_a_bad_shard_count_is_refused(bad: object) -> None:
    with pytest.raises(DLSError, match="shards must be an integer >= 1") as e:
        check_shards(bad)
    assert e.value.field == "shards"
