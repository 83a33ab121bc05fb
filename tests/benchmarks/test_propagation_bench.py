"""The propagation benchmark's records and picture, without a broker."""

from __future__ import annotations

from pathlib import Path

from benchmarks.propagation import _space, plot, records


def test_records_hold_every_round_and_the_percentiles_with_missing_rounds() -> None:
    rows = [{"round": r, "far_ms": 10.0 * (r + 1), "local_ms": 1.0, "wait_ms": 2.0,
             "call_ms": 0.5} for r in range(4)]
    rows.append({"round": 4, "local_ms": 1.0, "wait_ms": 2.0, "call_ms": 0.5})  # no far
    recs = records("at_least_once", rows, {"rounds": 5})
    per_round = [r for r in recs if r["metric"] == "far_ms"]
    assert [r["value"] for r in per_round] == [10.0, 20.0, 30.0, 40.0]
    p50 = next(r for r in recs if r["metric"] == "far_p50")
    assert p50["value"] == 25.0 and p50["params"]["missing"] == 1
    assert p50["params"]["delivery"] == "at_least_once" and p50["unit"] == "ms"
    assert next(r for r in recs if r["metric"] == "local_p99")["params"]["missing"] == 0


def test_each_round_has_its_own_cell_and_the_plot_is_written(tmp_path: Path) -> None:
    attr = _space(60)["attributes"][0]
    assert (attr["high"] - attr["low"]) / attr["granules"] == 1.0
    rows = [{"round": 0, "far_ms": 30.0, "local_ms": 10.0, "wait_ms": 15.0, "call_ms": 2.0}]
    path = tmp_path / "p.png"
    assert plot({"exactly_once": rows, "at_least_once": rows}, path)
    assert path.stat().st_size > 1000
