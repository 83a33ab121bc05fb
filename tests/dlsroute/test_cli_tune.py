"""``dlsroute tune-space``: a tuned spec from a JSONL sample; bad samples are refused."""

import json

import numpy as np

from dls.space import BreakpointAttribute, ContentSpace
from dlsroute.cli import main

SPACE = {"attributes": [
    {"name": "price", "type": "numeric", "low": 0, "high": 10000, "granules": 16},
    {"name": "volume", "type": "numeric", "low": 0, "high": 10**6, "granules": 8},
    {"name": "sym", "type": "discrete", "values": ["A", "B"]}],
    "filters": {"client": {"m": 4096, "k": 3}}}


def write(tmp_path, lines):
    (tmp_path / "space.json").write_text(json.dumps(SPACE))
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    return str(tmp_path / "space.json"), str(tmp_path / "events.jsonl")


def test_tune_space_writes_a_spec_with_balanced_cells(tmp_path, capsys) -> None:
    rng = np.random.default_rng(0)
    prices = np.minimum(10000, rng.exponential(300, 5000)).round(2)
    lines = [json.dumps({"price": float(p), "volume": int(v), "sym": "A"})
             for p, v in zip(prices, rng.integers(0, 10**6, 5000), strict=True)]
    # trace ops are read too; subscribe ops (no attrs) are skipped
    lines += [json.dumps({"op": "publish", "node": "A", "client": "c", "id": "e",
                          "attrs": {"price": 10.0, "volume": 5}}),
              json.dumps({"op": "subscribe", "node": "A", "client": "c", "id": "s",
                          "where": "price > 3"})]
    space, events = write(tmp_path, lines)
    out = tmp_path / "tuned.json"
    assert main(["tune-space", "--space", space, "--events", events, "--attributes",
                 "price", "--out", str(out)]) == 0
    tuned = json.loads(out.read_text())
    assert tuned["filters"] == SPACE["filters"]
    sp = ContentSpace.from_spec(tuned)
    price = sp.by_name["price"]
    assert isinstance(price, BreakpointAttribute) and price.n_cells == 16
    assert sp.by_name["volume"].to_spec() == SPACE["attributes"][1]  # not asked for
    err = capsys.readouterr().err
    assert "price: 5001 values; 16 -> 16 cells" in err
    first, last = err.split("holds ")[1].split(" of")[0].split(" -> ")
    assert float(first.rstrip("%")) > 50 and float(last.rstrip("%")) < 10


def test_tune_space_refuses_a_non_number_naming_line_and_field(tmp_path, capsys) -> None:
    space, events = write(tmp_path, [json.dumps({"price": 5, "volume": 1}),
                                     json.dumps({"price": "cheap", "volume": 2})])
    assert main(["tune-space", "--space", space, "--events", events]) == 2
    err = capsys.readouterr().err
    assert "events.jsonl:2" in err and "'price'" in err and "'cheap'" in err


def test_tune_space_refuses_an_attribute_without_values(tmp_path, capsys) -> None:
    space, events = write(tmp_path, [json.dumps({"price": 5})])
    assert main(["tune-space", "--space", space, "--events", events]) == 2
    assert "no value of attribute 'volume'" in capsys.readouterr().err
