import json
import math

import numpy as np
import pytest

from dls.exceptions import SpaceSpecError
from dls.space import ContentSpace

SPEC = {
    "attributes": [
        {"name": "price", "type": "numeric", "low": 0, "high": 1000, "granules": 32},
        {"name": "temp", "type": "numeric", "low": 30, "high": 45,
         "breakpoints": [35, 36.5, 37.5, 38.5, 40]},
        {"name": "sym", "type": "discrete", "values": ["AAPL", "MSFT", "IBM"]},
    ]
}


def test_layout_bits_and_shifts():
    sp = ContentSpace.from_spec(SPEC)
    assert sp.bits == (5, 3, 2)
    assert sp.shifts == (5, 2, 0)
    assert sp.cell_bits == 10 and sp.total_bits == 10
    assert sp.n_cells == 32 * 6 * 3


def test_app_id_sits_above_cells():
    sp = ContentSpace.from_spec({**SPEC, "app_id": 3})
    assert sp.total_bits == 26
    label = sp.compose((1, 2, 1))
    assert label >> 10 == 3
    assert sp.decompose(label) == (1, 2, 1)
    assert sp.format_label(label) == "3|00001-010-01"
    assert sp.parse_label("3|00001-010-01") == label


def test_single_cell_attribute_takes_one_bit():
    sp = ContentSpace.from_spec({"attributes": [
        {"name": "x", "type": "discrete", "values": ["only"]},
        {"name": "y", "type": "numeric", "low": 0, "high": 1, "granules": 4}]})
    assert sp.bits == (1, 2)


def test_paper_figure_label_text():
    sp = ContentSpace.from_spec({"attributes": [
        {"name": "a", "type": "numeric", "low": 0, "high": 5, "granules": 5},
        {"name": "b", "type": "numeric", "low": 0, "high": 5, "granules": 5}]})
    assert sp.format_label(sp.compose((3, 2))) == "011-010"


def test_uniform_cell_formula_matches_spec():
    sp = ContentSpace.from_spec(SPEC)
    price = sp.attributes[0]
    rng = np.random.default_rng(1)
    vals = np.concatenate([rng.uniform(0, 1000, 5000), [0.0, 1000.0, 31.25, 31.249999999]])
    want = [min(31, math.floor((v - 0.0) * 32 / 1000.0)) for v in vals]
    assert price.cells(vals).tolist() == want
    assert [price.cell(v) for v in vals] == want
    assert price.cell(1000.0) == 31


def test_breakpoint_cells():
    temp = ContentSpace.from_spec(SPEC).attributes[1]
    assert [temp.cell(v) for v in (30, 34.99, 35, 36.5, 37.4, 40, 45)] == [0, 0, 1, 2, 2, 5, 5]
    assert temp.cells(np.array([30, 35, 45.0])).tolist() == [0, 1, 5]


def test_discrete_cells_unknown_is_minus_one():
    sym = ContentSpace.from_spec(SPEC).attributes[2]
    assert sym.cells(["IBM", "AAPL", "XYZ"]).tolist() == [2, 0, -1]


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (lambda s: s["attributes"][0].update(granules=0), "granules must be a positive integer"),
        (lambda s: s["attributes"][0].update(low=2000), "low 2000.0 must be below high"),
        (lambda s: s["attributes"][0].update(high=float("nan")), "high must be finite"),
        (lambda s: s["attributes"][0].update(breakpoints=[1]), "exactly one of granules"),
        (lambda s: s["attributes"][1].update(breakpoints=[36, 35]), "increase strictly"),
        (lambda s: s["attributes"][2].update(values=["A", "A"]), "duplicate value 'A'"),
        (lambda s: s["attributes"][2].update(type="text"), "type must be 'numeric'"),
        (lambda s: s["attributes"][2].update(name="in"), "must be an identifier"),
        (lambda s: s["attributes"][0].update(granule=3), "unknown key 'granule'"),
        (lambda s: s.update(app_id=70000), "app_id must be an integer"),
        (lambda s: s["attributes"].append(dict(s["attributes"][0])), "duplicate attribute"),
        (lambda s: s.update(filters={"client": {"m": 0, "k": 3}}), "filters.client.m"),
    ],
)
def test_bad_specs_are_refused_with_clear_errors(mutate, fragment):
    spec = json.loads(json.dumps(SPEC))
    mutate(spec)
    with pytest.raises(SpaceSpecError) as exc:
        ContentSpace.from_spec(spec)
    assert fragment in str(exc.value)


def test_more_than_64_bits_is_refused_at_load():
    attrs = [{"name": f"a{i}", "type": "numeric", "low": 0, "high": 1, "granules": 2**16}
             for i in range(4)]
    ContentSpace.from_spec({"attributes": attrs})  # exactly 64 bits is fine
    with pytest.raises(SpaceSpecError, match="66 bits"):
        ContentSpace.from_spec({"attributes": attrs + [
            {"name": "b", "type": "numeric", "low": 0, "high": 1, "granules": 3}]})
    with pytest.raises(SpaceSpecError, match="80 bits"):
        ContentSpace.from_spec({"attributes": attrs, "app_id": 1})


def test_spec_round_trip(tmp_path):
    sp = ContentSpace.from_spec({**SPEC, "app_id": 9,
                                 "filters": {"client": {"m": 1024, "k": 3}}})
    path = tmp_path / "space.json"
    path.write_text(json.dumps(sp.to_spec()))
    assert ContentSpace.from_json(path) == sp


def test_compose_many_equals_compose():
    sp = ContentSpace.from_spec({**SPEC, "app_id": 1})
    cells = np.array([[0, 0, 0], [31, 5, 2], [7, 3, 1]])
    assert sp.compose_many(cells).tolist() == [sp.compose(c) for c in cells.tolist()]


def test_parse_label_rejects_garbage():
    sp = ContentSpace.from_spec(SPEC)
    with pytest.raises(SpaceSpecError):
        sp.parse_label("0101")
    with pytest.raises(SpaceSpecError, match="out of range"):
        sp.parse_label("00000-111-00")
