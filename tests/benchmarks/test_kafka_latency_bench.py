"""The latency bar's quick mode on a real broker: record shape only, no timing asserts."""

import json

import numpy as np
import pytest

from benchmarks import kafka as bk
from benchmarks import kafka_latency

NODE, PT = "dls-shared-p1", "passthrough-nontx"


@pytest.fixture(scope="module")
def probe(kafka_bootstrap, tmp_path_factory):
    """The node's maximum measured first, then two paired rounds at 25 % and 50 % of it."""
    out = tmp_path_factory.mktemp("kafka_latency") / "kafka_latency.json"
    assert kafka_latency.main(["--quick", "--bootstrap", kafka_bootstrap, "--rounds", "2",
                               "--out", str(out)]) == 0
    return out, json.loads(out.read_text())


def _runs(records, metric="latency_p99"):
    return [r for r in records if r["metric"] == metric]


def test_the_rates_are_fractions_of_the_measured_maximum(probe):
    out, records = probe
    (tput,) = [r for r in records if r["metric"] == "throughput"]
    assert tput["system"] == NODE and tput["params"]["phase"] == "maximum"
    assert json.loads(out.with_name("kafka_latency.meta.json").read_text())["max_rate"] \
        == pytest.approx(tput["value"])
    p99 = _runs(records)
    assert {r["system"] for r in p99} == {NODE, PT}
    assert {r["params"]["rate_fraction_of_max"] for r in p99} == {0.25, 0.5}
    for r in p99:
        assert r["params"]["rate_events_s"] == pytest.approx(
            r["params"]["rate_fraction_of_max"] * tput["value"])
        assert r["params"]["max_rate_measured"] is True
        assert r["params"]["shared_delivery_partitions"] == 1
    firsts = {(r["params"]["rate_fraction_of_max"], r["params"]["round"]): r["params"]["first"]
              for r in p99}
    assert firsts == {(f, 0): "node" for f in (0.25, 0.5)} | {(f, 1): "pt" for f in (0.25, 0.5)}
    assert len(p99) == 8


def test_every_round_sends_events_of_its_own(probe):
    """Both systems of a round get one fresh draw; no two rounds, and no round and the
    first window (the maximum's), share their events."""
    _, records = probe
    digest = {}
    for r in _runs(records):
        key = (r["params"]["rate_fraction_of_max"], r["params"]["round"])
        digest.setdefault(key, set()).add(r["params"]["events_digest"])
    assert all(len(d) == 1 for d in digest.values())  # node and passthrough alike
    per_round = [next(iter(d)) for d in digest.values()]
    assert len(set(per_round)) == len(per_round) == 4
    p = bk.prepare(bk.QUICK, bk.QUICK.n_events, bk.Recorder())
    first_window = bk.events_digest(p.workload.events, p.ev_labels)
    assert first_window not in per_round


def test_each_round_has_its_ratio_and_the_node_hit_rate(probe):
    _, records = probe
    p99 = {(r["system"], r["params"]["rate_fraction_of_max"], r["params"]["round"]): r["value"]
           for r in _runs(records)}
    hits = {(r["params"]["rate_fraction_of_max"], r["params"]["round"]): r["value"]
            for r in _runs(records, "route_cache_hit_rate") if "round" in r["params"]}
    assert len(hits) == 4 and all(0 <= h <= 1 for h in hits.values())
    rounds = _runs(records, "latency_p99_ratio_round")
    assert len(rounds) == 4
    for r in rounds:
        key = (r["params"]["rate_fraction_of_max"], r["params"]["round"])
        assert r["system"] == NODE and r["params"]["baseline"] == PT
        assert r["params"]["node_p99_ms"] == p99[(NODE, *key)]
        assert r["params"]["baseline_p99_ms"] == p99[(PT, *key)]
        assert r["value"] == pytest.approx(p99[(NODE, *key)] / p99[(PT, *key)])
        assert r["params"]["route_cache_hit_rate"] == hits[key]


def test_the_median_ratio_against_the_bar(probe):
    _, records = probe
    medians = _runs(records, "latency_p99_ratio_median")
    assert sorted(r["params"]["rate_fraction_of_max"] for r in medians) == [0.25, 0.5]
    for m in medians:
        frac = m["params"]["rate_fraction_of_max"]
        rounds = sorted((r for r in _runs(records, "latency_p99_ratio_round")
                         if r["params"]["rate_fraction_of_max"] == frac),
                        key=lambda r: r["params"]["round"])
        assert m["params"]["rounds"] == 2
        assert m["params"]["ratios"] == [round(r["value"], 4) for r in rounds]
        assert m["params"]["route_cache_hit_rates"] == [
            round(r["params"]["route_cache_hit_rate"], 4) for r in rounds]
        assert m["value"] == pytest.approx(float(np.median([r["value"] for r in rounds])))
        assert m["params"]["bar"] == bk.BAR_P99_RATIO == 1.5
        assert m["params"]["met"] is (m["value"] <= 1.5)


def test_no_absolute_bar_is_left(probe):
    out, records = probe
    assert not [r for r in records if "bar_ms" in r["params"]]
    assert not [r for r in _runs(records) if "met" in r["params"]]
    log = out.with_name("kafka_latency.log").read_text()
    assert "20 ms" not in log
    assert log.count("median of 2 paired rounds") == 2 and "route cache hits" in log


def test_every_run_is_split_at_the_forwarder(probe):
    _, records = probe
    runs = {(r["system"], r["params"]["rate_fraction_of_max"], r["params"]["round"])
            for r in _runs(records)}
    for system, frac, rnd in runs:
        metrics = {r["metric"]: r["value"] for r in records
                   if r["system"] == system and r["params"].get("round") == rnd
                   and r["params"].get("rate_fraction_of_max") == frac}
        for m in ("latency_p50", "latency_p99", "latency_p999", "to_forwarder_p50",
                  "to_forwarder_p99", "after_forwarder_p50", "after_forwarder_p99",
                  "gc_time", "gc_longest"):
            assert m in metrics, (system, frac, rnd, m)
        assert metrics["latency_p50"] <= metrics["latency_p99"] <= metrics["latency_p999"]
        assert metrics["gc_time"] >= 0


def test_a_given_maximum_is_not_measured(kafka_bootstrap, tmp_path):
    out = tmp_path / "kl.json"
    assert kafka_latency.main(["--quick", "--bootstrap", kafka_bootstrap, "--max-rate",
                               "4000", "--fractions", "0.5", "--rounds", "1",
                               "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert not [r for r in records if r["metric"] == "throughput"]
    p99 = _runs(records)
    assert {r["params"]["rate_events_s"] for r in p99} == {2000.0}
    assert {r["params"]["max_rate_measured"] for r in p99} == {False}
    (m,) = _runs(records, "latency_p99_ratio_median")
    assert m["params"]["rounds"] == 1 and m["params"]["met"] is (m["value"] <= 1.5)


@pytest.mark.parametrize(("ratios", "median", "met"), [
    ([1.2, 1.6, 1.4], 1.4, True), ([1.6, 1.0, 1.7], 1.6, False), ([1.5], 1.5, True)])
def test_the_met_flag_follows_the_median(ratios, median, met):
    rec = bk.Recorder()
    paired = kafka_latency._Ratios(ratios, [0.5] * len(ratios))
    kafka_latency._record_rate(rec, NODE, PT, {"rate_events_s": 1000.0,
                                               "rate_fraction_of_max": 0.5}, paired)
    (r,) = rec.records
    assert r["value"] == pytest.approx(median) and r["params"]["met"] is met
    assert ("NOT met" in rec.lines[-1]) is not met


def test_bad_options_are_refused(capsys):
    for args in (["--fractions", "fast"], ["--fractions", "0"], ["--fractions", "1.5"],
                 ["--fractions", "0.5,0.5"],
                 ["--max-rate", "-5"], ["--max-rate", "x"], ["--rounds", "0"]):
        with pytest.raises(SystemExit):
            kafka_latency.main(args)
    err = capsys.readouterr().err
    assert "'fast'" in err and "'-5'" in err and "'0.5,0.5'" in err and "--rounds" in err
