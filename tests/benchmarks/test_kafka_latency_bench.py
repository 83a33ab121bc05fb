"""The latency probe's quick mode on a real broker: record shape only, no timing asserts."""

import json

import pytest

from benchmarks import kafka_latency


@pytest.fixture(scope="module")
def probe(kafka_bootstrap, tmp_path_factory):
    out = tmp_path_factory.mktemp("kafka_latency") / "kafka_latency.json"
    assert kafka_latency.main(["--quick", "--bootstrap", kafka_bootstrap, "--rates", "1500",
                               "--rounds", "2", "--out", str(out)]) == 0
    return out, json.loads(out.read_text())


def test_both_forwarders_alternate_at_the_same_rate(probe):
    _, records = probe
    p99 = [r for r in records if r["metric"] == "latency_p99"]
    assert {r["system"] for r in p99} == {"dls-shared-p1", "passthrough-nontx"}
    assert {r["params"]["rate_events_s"] for r in p99} == {1500.0}
    node_first = {r["params"]["round"]: r["params"]["first"] for r in p99}
    assert node_first == {0: "node", 1: "pt"}
    assert len(p99) == 4


def test_every_run_is_split_at_the_forwarder(probe):
    _, records = probe
    runs = {(r["system"], r["params"]["round"]) for r in records}
    for system, rnd in runs:
        metrics = {r["metric"]: r["value"] for r in records
                   if r["system"] == system and r["params"]["round"] == rnd}
        for m in ("latency_p50", "latency_p99", "latency_p999", "to_forwarder_p50",
                  "to_forwarder_p99", "after_forwarder_p50", "after_forwarder_p99",
                  "gc_time", "gc_longest"):
            assert m in metrics, (system, rnd, m)
        assert metrics["latency_p50"] <= metrics["latency_p99"] <= metrics["latency_p999"]
        assert metrics["gc_time"] >= 0


def test_side_files(probe):
    out, _ = probe
    meta = json.loads(out.with_name("kafka_latency.meta.json").read_text())
    assert meta["benchmark"] == "kafka_latency" and meta["rounds"] == 2
    assert out.with_name("kafka_latency.log").read_text().count("median p99") == 2


def test_bad_rates_are_refused():
    with pytest.raises(SystemExit):
        kafka_latency.main(["--rates", "fast"])
    with pytest.raises(SystemExit):
        kafka_latency.main(["--rates", "-5"])
