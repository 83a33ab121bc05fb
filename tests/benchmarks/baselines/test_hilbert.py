"""The Hilbert curve: a bijection whose consecutive cells share a face; the 4x4 drawing."""

import numpy as np
import pytest

from benchmarks.baselines.hilbert import HilbertCurve, hilbert_cells, hilbert_index


def _grid(d: int, bits: int) -> np.ndarray:
    side = 1 << bits
    return np.stack(np.unravel_index(np.arange(side**d), (side,) * d), axis=1)


@pytest.mark.parametrize(("d", "bits"), [(1, 3), (2, 1), (2, 3), (3, 2), (3, 3), (4, 2),
                                         (2, 5)])
def test_bijection_and_face_steps(d, bits):
    grid = _grid(d, bits)
    h = hilbert_index(grid, bits)
    assert sorted(h.tolist()) == list(range(len(grid)))
    assert (hilbert_cells(h, d, bits) == grid).all()
    walk = hilbert_cells(np.arange(len(grid)), d, bits)
    assert (np.abs(np.diff(walk, axis=0)).sum(axis=1) == 1).all()  # one face per step
    assert (walk[0] == 0).all()


def test_four_by_four_order():
    """The order used in the MICS tests (attribute 0 down, attribute 1 across)::

               a1=0 a1=1 a1=2 a1=3
        a0=0     0    3    4    5
        a0=1     1    2    7    6
        a0=2    14   13    8    9
        a0=3    15   12   11   10
    """
    want = np.array([[0, 3, 4, 5], [1, 2, 7, 6], [14, 13, 8, 9], [15, 12, 11, 10]])
    got = hilbert_index(_grid(2, 2), 2).reshape(4, 4)
    assert (got == want).all()


def test_table_equals_computation():
    rng = np.random.default_rng(3)
    cells = rng.integers(0, 32, size=(5000, 3))
    with_table = HilbertCurve(3, 5, table=True)
    without = HilbertCurve(3, 5, table=False)
    assert with_table.memory_bytes() == 4 * 32**3
    assert without.memory_bytes() == 0
    assert (with_table.index(cells) == without.index(cells)).all()
    assert (with_table.index(cells) == hilbert_index(cells, 5)).all()


def test_wide_curve_round_trip():
    rng = np.random.default_rng(4)
    cells = rng.integers(0, 1 << 16, size=(1000, 4))  # 64-bit positions
    h = hilbert_index(cells, 16)
    assert (hilbert_cells(h, 4, 16) == cells).all()


@pytest.mark.parametrize(("cells", "bits", "match"), [
    (np.array([[0, 4]]), 2, "cell coordinates"),
    (np.array([[-1, 0]]), 2, "cell coordinates"),
    (np.array([0, 1]), 2, "2-D"),
    (np.zeros((1, 5), dtype=np.int64), 13, "at most 64"),
])
def test_bad_input(cells, bits, match):
    with pytest.raises(ValueError, match=match):
        hilbert_index(cells, bits)


def test_bad_curve():
    with pytest.raises(ValueError, match="cell coordinates"):
        HilbertCurve(2, 2).index(np.array([[0, 4]]))
    with pytest.raises(ValueError, match="index must be below"):
        hilbert_cells(np.array([16]), 2, 2)
