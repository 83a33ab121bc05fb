"""Slices of a label's cell: no value inside a range falls outside the range's slices."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dls import _jit
from dls import _slicekernels as _sk
from dls.exceptions import DLSError
from dls.label_slices import MAX_AUTO_PARTS, TUNE_FIRST, AutoSlices, Slicing
from dls.space import ContentSpace

SPACE = ContentSpace.from_spec({"attributes": [
    {"name": "sym", "type": "discrete", "values": ["A", "B", "C"]},
    {"name": "price", "type": "numeric", "low": 0, "high": 1000, "granules": 64},
    {"name": "volume", "type": "numeric", "low": 0, "high": 100,
     "breakpoints": [10, 50]}]})
PRICE = Slicing.of(SPACE, 0, "price", 8)

values = st.one_of(st.floats(-50, 1050, allow_nan=False), st.sampled_from(
    [-math.inf, math.inf, 0.0, 1000.0, 15.625, 15.625 * 3, 1.953125, 999.9999]))


def test_a_slicing_of_a_uniform_attribute_reads_its_cells_from_the_label():
    """``price`` is 6 bits above ``volume``'s 2: a label's cell in it comes back."""
    labels = SPACE.compose_many(np.array([[1, 5, 2], [2, 63, 0]]))
    assert PRICE.cell_of(labels.astype(np.int64), 0).tolist() == [5, 63]
    assert PRICE.lists == 9 and PRICE.with_parts(1).lists == 1


@pytest.mark.parametrize(("kwargs", "field", "value"), [
    ({"parts": 0}, "parts", 0), ({"parts": 65}, "parts", 65),
    ({"column": -1}, "column", -1), ({"scale": 0.0}, "scale", 0.0),
    ({"low": math.inf}, "low", math.inf)])
def test_a_slicing_the_kernels_cannot_use_is_refused_naming_the_field(kwargs, field, value):
    spec = {"column": 0, "shift": 0, "width": 2, "cells": 3, "low": 0.0, "scale": 1.0,
            "parts": 4} | kwargs
    with pytest.raises(DLSError) as e:
        Slicing(**spec)
    assert e.value.field == field and e.value.value == value


def test_only_an_attribute_of_equal_cells_is_sliced():
    for name in ("volume", "sym", "nope"):
        with pytest.raises(DLSError, match="equal cells") as e:
            Slicing.of(SPACE, 1, name, 4)
        assert e.value.field == "attribute" and e.value.value == name


@settings(deadline=None)  # the kernels compile on the first example
@given(a=values, v=values, b=values, cell=st.integers(0, 70), parts=st.sampled_from([2, 3, 8]))
def test_a_value_inside_a_range_lies_in_the_range_s_slices(a, v, b, cell, parts):
    """Whatever the cell (a label's cell and the value may disagree), clipped."""
    a, v, b = sorted((a, v, b))
    s = PRICE.with_parts(parts)
    cells = np.array([cell])
    pa, pv, pb = (int(s.part(np.array([x]), cells)[0]) for x in (a, v, b))
    assert 0 <= pa <= pv <= pb < parts
    place = np.array([cell << 2])  # the label of price cell ``cell`` (volume cell 0)
    first, count = s.entry_lists(place, 0, np.array([True]), np.array([a]), np.array([b]))
    lists = range(int(first[0]), int(first[0] + count[0]))
    if cell < 64:
        assert place[0] * s.lists + 1 + pv in lists or list(lists) == [place[0] * s.lists]
    if _jit.ENABLED:  # the kernels give the same
        sf, si = s.params()
        assert _sk.part(v, cell, sf, si) == pv
        assert _sk.entry_lists(int(place[0]), True, a, b, 0, sf, si) == (first[0], count[0])


def test_an_entry_that_holds_its_cell_or_covers_every_slice_is_listed_whole():
    s, place = PRICE, np.array([7 << 2, 7 << 2, 7 << 2, 64 << 2])
    first, count = s.entry_lists(place, 0, np.array([False, True, True, True]),
                                 np.array([0.0, 0.0, 110.0, 0.0]),
                                 np.array([1000.0, 1000.0, 111.0, 1000.0]))
    whole = place * s.lists
    # held wholly; covers the cell; a narrow range (7 * 15.625 = 109.375: slice 0);
    # a label past the attribute's cells (no slices)
    assert first.tolist() == [whole[0], whole[1], whole[2] + 1, whole[3]]
    assert count.tolist() == [1, 1, 1, 1]


def test_automatic_slicing_moves_on_doubling_up_or_a_fourth_down():
    auto = AutoSlices()
    assert auto.due(TUNE_FIRST) and not auto.due(TUNE_FIRST - 1)
    assert auto.parts(1, 244 * 1000, 1000) == 1  # 244 entries a label: one list
    assert not auto.due(244 * 1000 + 1) and auto.due(2 * 244 * 1000)
    assert auto.parts(1, 1800 * 1000, 1000) == 8  # 225 read an event
    assert auto.parts(8, 1100 * 1000, 1000) == 8  # wants 8 still
    assert auto.parts(8, 600 * 1000, 1000) == 8  # wants 4: not a fourth
    assert auto.parts(8, 300 * 1000, 1000) == 2  # wants 2: moves
    assert auto.parts(1, 10**12, 1) == MAX_AUTO_PARTS
