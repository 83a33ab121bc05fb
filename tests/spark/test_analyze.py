"""``dlsroute analyze``: label-set sizes, quantisation and Bloom false-positive rates."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from connectors.topics import Topics
from dls.predicates import Subscription
from dls.space import ContentSpace
from dlsroute.cli import main
from spark.analyze import (
    AnalyzeError,
    FilterSize,
    analyze,
    bloom_fpr,
    parse_filter_sizes,
    read_raw,
    subscription_volumes,
)
from spark.workload import WorkloadSpec, generate, write_files, write_kafka

SPACE = {"attributes": [{"name": "x", "type": "numeric", "low": 0, "high": 100,
                         "granules": 10}],
         "filters": {"client": {"m": 64, "k": 2}, "routing": {"m": 1024, "k": 3}}}


# -- without Spark -----------------------------------------------------------------------------
def test_bloom_fpr_is_the_textbook_formula() -> None:
    assert bloom_fpr(1000, 7, 0) == 0.0
    assert math.isclose(bloom_fpr(1000, 3, 100), (1 - math.exp(-0.3)) ** 3)
    assert math.isclose(float(bloom_fpr(9586, 7, 1000)), 0.01, rel_tol=0.02)  # m for 1% FPR


def test_filter_sizes_parse_and_refuse_with_the_value() -> None:
    assert parse_filter_sizes("4096, 65536:7,") == [FilterSize(4096), FilterSize(65536, 7)]
    for bad in ("big", "0", "64:0", "64:65", "1:2:3"):
        with pytest.raises(AnalyzeError) as info:
            parse_filter_sizes(bad)
        assert info.value.field == "filter_sizes" and bad in str(info.value)


def test_volumes_of_uniform_breakpoint_and_discrete_attributes() -> None:
    space = ContentSpace.from_spec({"attributes": [
        {"name": "x", "type": "numeric", "low": 0, "high": 100, "granules": 10},
        {"name": "t", "type": "numeric", "low": 30, "high": 45, "breakpoints": [35, 40]},
        {"name": "s", "type": "discrete", "values": ["a", "b", "c", "d"]}]})
    # x: [5, 25] covers 20 of cells 0..2 (30); t: [36, 41] covers 5 of [35, 45) (10);
    # s: 2 of 4 values, both cells
    sub = Subscription(space, "x between 5 and 25 and t between 36 and 41 and s in (a, c)")
    box, cells = subscription_volumes(space, sub)
    assert math.isclose(box, (20 / 100) * (5 / 15) * (2 / 4))
    assert math.isclose(cells, (30 / 100) * (10 / 15) * (2 / 4))
    whole, whole_cells = subscription_volumes(space, Subscription(space, []))
    assert whole == whole_cells == 1.0


# -- on Spark ----------------------------------------------------------------------------------
def _jsonl(path: Path, records: list[object]) -> str:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records)
                    + "\n\n", encoding="utf-8")
    return str(path)


def test_hand_computed_sample(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    space = ContentSpace.from_spec(SPACE)
    subs = _jsonl(tmp_path / "subs.jsonl", [
        {"node": "A", "client": "c1", "id": "s1", "where": "x between 0 and 10"},  # cells 0, 1
        {"node": "A", "client": "c1", "id": "s2",
         "where": [{"attr": "x", "op": "between", "low": 20, "high": 25}]},  # cell 2
        {"node": "A", "client": "c2", "id": "s3", "where": "x >= 12 and x < 20"},  # cell 1
        {"node": "A", "client": "c2", "id": "s4", "where": "y > 3"},  # unknown attribute
        "not json",
    ])
    events = _jsonl(tmp_path / "events.jsonl", [
        {"node": "A", "client": "p", "id": "e1", "attrs": {"x": 5}},    # s1
        {"node": "A", "client": "p", "id": "e2", "attrs": {"x": 15}},   # s3; s1 by label only
        {"node": "A", "client": "p", "id": "e3", "attrs": {"x": 22}},   # s2
        {"node": "A", "client": "p", "id": "e4", "attrs": {"x": 28}},   # s2 by label only
        {"node": "A", "client": "p", "id": "e5", "attrs": {"x": 500}},  # outside the domain
    ])
    r = analyze(spark, space, read_raw(spark, subs), read_raw(spark, events),
                filter_sizes=[FilterSize(32, 2)])
    assert r["subscriptions"]["used"] == 3 and r["subscriptions"]["rejected"] == 2
    assert any("'y'" in reason for reason in r["subscriptions"]["rejected_reasons"])
    assert r["events"]["used"] == 4 and r["events"]["rejected"] == 1
    assert "500" in r["events"]["rejected_reasons"][0]
    assert r["label_set_size"]["histogram"] == [[1, 2], [2, 1]]
    assert r["label_set_size"]["mean"] == pytest.approx(4 / 3)
    assert r["distinct_labels"] == 3 and r["label_space_size"] == 10
    assert r["clients"] == 2
    assert r["distinct_labels_per_client"] == {"mean": 2.0, "max": 3}
    q = r["quantisation_fp"]
    # volumes: s1 10/20, s2 5/10, s3 8/10 of their cells
    assert q["volume_mean"] == pytest.approx((0.5 + 0.5 + 0.2) / 3)
    assert q["volume_pooled"] == pytest.approx(1 - (0.10 + 0.05 + 0.08) / (0.2 + 0.1 + 0.1))
    # label-matched pairs: s1 (e1, e2), s2 (e3, e4), s3 (e2); exact: e1, e3, e2
    assert q["label_matched_pairs"] == 5 and q["exact_pairs"] == 3
    assert q["events_pooled"] == pytest.approx(2 / 5)
    assert q["events_mean"] == pytest.approx((0.5 + 0.5 + 0.0) / 3)
    bloom = {(b["filter"], b["holds"]): b for b in r["bloom"]}
    assert bloom[("space client", "client")]["m"] == 64
    c = bloom[("m=32", "client")]
    expected = ((1 - math.exp(-2 * 3 / 32)) ** 2 + (1 - math.exp(-2 * 1 / 32)) ** 2) / 2
    assert c["k"] == 2 and c["expected_fpr"] == pytest.approx(expected)
    assert bloom[("m=32", "all")]["expected_fpr"] == pytest.approx((1 - math.exp(-6 / 32)) ** 2)


def test_or_strings_and_optional_attributes(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    space = ContentSpace.from_spec({"attributes": [
        {"name": "x", "type": "numeric", "low": 0, "high": 100, "granules": 10},
        {"name": "n", "type": "string", "breakpoints": ["M"], "optional": True}]})
    subs = _jsonl(tmp_path / "subs.jsonl", [
        {"node": "A", "client": "c1", "id": "s1", "where": "(x < 10) or n prefix Z"},
        {"node": "A", "client": "c1", "id": "s2", "where": {"any": [
            [{"attr": "n", "op": "missing"}]]}},
    ])
    events = _jsonl(tmp_path / "events.jsonl", [
        {"node": "A", "client": "p", "id": "e1", "attrs": {"x": 5}},             # s1, s2
        {"node": "A", "client": "p", "id": "e2", "attrs": {"x": 50, "n": "Zed"}},  # s1
        {"node": "A", "client": "p", "id": "e3", "attrs": {"x": 50, "n": "Q"}},  # s1 by label
    ])
    r = analyze(spark, space, read_raw(spark, subs), read_raw(spark, events))
    assert r["subscriptions"]["used"] == 2
    s1 = Subscription(space, "(x < 10) or n prefix Z")
    s2 = Subscription(space, "n missing")
    assert r["label_set_size"]["mean"] == (len(s1.labels()) + len(s2.labels())) / 2
    q = r["quantisation_fp"]
    assert q["volume_mean"] is None  # no box to measure
    # label-matched pairs: s1 (e1, e2, e3), s2 (e1); exact: e1, e2 for s1, e1 for s2
    assert q["label_matched_pairs"] == 4 and q["exact_pairs"] == 3


def test_nothing_usable_and_bad_sources_are_refused(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    space = ContentSpace.from_spec(SPACE)
    subs = _jsonl(tmp_path / "s.jsonl", [{"node": "A", "client": "c", "id": "s",
                                          "where": "x > 500"}])
    with pytest.raises(AnalyzeError) as info:
        analyze(spark, space, read_raw(spark, subs))
    assert info.value.field == "subscriptions" and "can match nothing" in str(info.value)
    with pytest.raises(AnalyzeError) as info:
        read_raw(spark, str(tmp_path / "missing"))
    assert info.value.field == "source"
    with pytest.raises(AnalyzeError) as info:
        read_raw(spark, "kafka:t")
    assert info.value.field == "bootstrap"


def test_command_on_a_generated_workload(spark, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Volume and event estimates of the quantisation FP rate agree on uniform data."""
    spec = WorkloadSpec(distribution="uniform", d=2, g=16, n_subs=600, n_events=3000,
                        n_clients=20, seed=5)
    write_files(generate(spark, spec), tmp_path / "w", "parquet")
    out, png = tmp_path / "a.json", tmp_path / "a.png"
    rc = main(["analyze", "--space", str(tmp_path / "w" / "space.json"),
               "--subscriptions", str(tmp_path / "w" / "subscriptions"),
               "--events", str(tmp_path / "w" / "events"), "--filter-sizes", "512,4096:4",
               "--out", str(out), "--plot", str(png)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "labels per subscription" in text and "m=4096" in text
    r = json.loads(out.read_text())
    assert r["subscriptions"]["used"] == 600 and r["events"]["used"] == 3000
    # 1..3 cells per attribute
    assert r["label_set_size"]["min"] >= 1 and r["label_set_size"]["max"] <= 9
    q = r["quantisation_fp"]
    assert 0.3 < q["volume_pooled"] < 0.9
    assert q["events_pooled"] == pytest.approx(q["volume_pooled"], abs=0.03)
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    rc = main(["analyze", "--space", str(tmp_path / "w" / "space.json"),
               "--subscriptions", str(tmp_path / "w" / "subscriptions"),
               "--filter-sizes", "huge"])
    assert rc == 2 and "huge" in capsys.readouterr().err


def test_reads_raw_topics(spark, kafka_bootstrap: str, topic_prefix: str) -> None:  # type: ignore[no-untyped-def]
    spec = WorkloadSpec(d=2, g=8, n_subs=200, n_events=100, n_clients=4)
    topics = Topics(topic_prefix)
    write_kafka(generate(spark, spec), kafka_bootstrap, topics,
                kinds=("subscriptions", "events"))
    space = ContentSpace.from_spec({"attributes": [
        {"name": f"a{i}", "type": "numeric", "low": 0, "high": 2**20 - 1, "granules": 8}
        for i in range(2)]})
    r = analyze(spark, space,
                read_raw(spark, f"kafka:{topics.raw_subscriptions}", bootstrap=kafka_bootstrap),
                read_raw(spark, f"kafka:{topics.raw_events}", bootstrap=kafka_bootstrap))
    assert r["subscriptions"]["used"] == 200 and r["subscriptions"]["rejected"] == 0
    assert r["events"]["used"] == 100 and r["clients"] == 4
