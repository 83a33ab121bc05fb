"""A subscription's row as bytes (dls.exact_row): what is read back is what was compiled,
and a row that is not one of the space's is refused with the reason, reading nothing."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dls.exact_row import RowLayout, simple_parts
from dls.exceptions import DLSError
from dls.predicates import Subscription
from dls.space import ContentSpace

SPACE = ContentSpace.from_spec({"attributes": [
    {"name": "sym", "type": "discrete", "values": [f"S{i}" for i in range(70)]},
    {"name": "price", "type": "numeric", "low": 0, "high": 1000, "granules": 64},
    {"name": "side", "type": "discrete", "values": ["buy", "sell"]},
    {"name": "change", "type": "numeric", "low": -20, "high": 20, "granules": 16},
]})
LAYOUT = RowLayout(SPACE)
PRICE = st.floats(0, 1000, allow_nan=False).map(lambda x: round(x, 2))


@st.composite
def wheres(draw: st.DrawFn) -> str:
    parts = []
    if draw(st.booleans()):
        syms = draw(st.lists(st.integers(0, 69), min_size=1, max_size=5, unique=True))
        parts.append(f"sym in ({', '.join(f'S{i}' for i in syms)})")
    if draw(st.booleans()):
        a, b = sorted((draw(PRICE), draw(PRICE)))
        parts.append(f"price between {a} and {b}")
    if draw(st.booleans()):
        parts.append(f"side = {draw(st.sampled_from(['buy', 'sell']))}")
    if draw(st.booleans()):
        parts.append(f"change {draw(st.sampled_from(['<', '<=', '>', '>=']))} "
                     f"{draw(st.integers(-19, 19))}")
    return " and ".join(parts) or "price >= 0"


@settings(max_examples=200, deadline=None)
@given(st.lists(wheres(), min_size=1, max_size=6))
def test_rows_read_back_as_compiled(texts: list[str]) -> None:
    subs = [Subscription(SPACE, w) for w in texts]
    rows = [LAYOUT.of(s) for s in subs]
    assert all(r is not None and len(r) == LAYOUT.size for r in rows)
    bounds, masks = LAYOUT.read(rows)  # type: ignore[arg-type]
    for i, sub in enumerate(subs):
        want = simple_parts(sub, LAYOUT.numeric, LAYOUT.discrete)
        assert want is not None
        assert np.array_equal(bounds[i], want[0])
        assert np.array_equal(masks[i], np.concatenate(want[1]))
        # the row decides as the subscription does on values inside its cells
        for sym in ("S0", "S64", "S69"):
            for price in (0.0, want[0][0][0], want[0][0][1], 999.99):
                if not math.isfinite(price):
                    continue
                event = {"sym": sym, "price": price, "side": "buy", "change": 0.0}
                cell = SPACE.by_name["sym"].index[sym]
                by_row = (bool(masks[i][cell // 64] >> np.uint64(cell % 64) & np.uint64(1))
                          and bounds[i][0][0] <= price <= bounds[i][0][1]
                          and bounds[i][1][0] <= 0.0 <= bounds[i][1][1]
                          and bool(masks[i][2] & np.uint64(1)))
                assert by_row == sub.matches(event)


def test_a_subscription_that_is_not_simple_has_no_row() -> None:
    assert LAYOUT.of(Subscription(SPACE, "price > 5 or change < 0")) is None
    assert LAYOUT.of(Subscription(SPACE, "price != 5")) is None


def _row(price: tuple[float, float] = (1.0, 2.0), change: tuple[float, float] = (-1, 1),
         sym: int = 1, side: int = 1) -> bytes:
    return (struct.pack("<4d", *price, *change) + struct.pack("<2Q", sym & (2**64 - 1),
                                                              sym >> 64)
            + struct.pack("<Q", side))


@pytest.mark.parametrize(("row", "says"), [
    (_row()[:-1], "row: 55 bytes, the space's rows have 56"),
    (_row(price=(math.nan, 2.0)), "row: bounds [[nan, 2.0], [-1.0, 1.0]] are not ranges"),
    (_row(change=(3.0, 2.0)), "are not ranges"),
    (_row(sym=0), "the mask of 'sym' allows no cell"),
    (_row(sym=1 << 70), "the mask of 'sym' allows cells past its last"),
    (_row(side=4), "the mask of 'side' allows cells past its last"),
    (_row(side=0), "the mask of 'side' allows no cell"),
])
def test_a_row_not_of_the_space_is_refused_naming_what_is_wrong(row: bytes, says: str) -> None:
    assert LAYOUT.read([_row()])[0].shape == (1, 2, 2)  # the good one reads
    with pytest.raises(DLSError, match=says.replace("[", r"\[").replace("]", r"\]")) as e:
        LAYOUT.read([row])
    assert e.value.field == "row"
    with pytest.raises(DLSError, match="row 1 of 3: ") as e:
        LAYOUT.read([_row(), row, _row()])
