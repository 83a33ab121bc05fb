"""The raw-topic comparison's quick mode on a real broker: shape and counts, no timing asserts."""

import json

import pytest

from benchmarks import rawtopic

KEYS = {"benchmark", "system", "params", "metric", "value", "unit"}
MEASURED = ("bytes_read_per_event", "records_read_per_event", "client_cpu_per_event",
            "client_idle_cpu", "broker_bytes_out_per_event",
            "broker_bytes_out_to_clients_per_event", "latency_p50", "latency_p99",
            "latency_samples", "deliveries", "true_matches", "false_deliveries")


@pytest.fixture(scope="module")
def quick_run(kafka_bootstrap, tmp_path_factory):
    out = tmp_path_factory.mktemp("rawtopic") / "rawtopic.json"
    assert rawtopic.main(["--quick", "--bootstrap", kafka_bootstrap, "--out", str(out)]) == 0
    return out, json.loads(out.read_text())


def _value(records, system, metric, clients=None):
    [v] = [r["value"] for r in records if r["system"] == system and r["metric"] == metric
           and r["params"].get("clients") == clients]
    return v


def test_records_shape(quick_run):
    out, records = quick_run
    for r in records:
        assert set(r) == KEYS
        assert r["benchmark"] == "rawtopic" and isinstance(r["value"], float)
        assert r["params"]["n_clients"] == rawtopic.QUICK.n_clients
    for system in rawtopic.SYSTEMS:
        for metric in MEASURED:
            _value(records, system, metric)
    meta = json.loads(out.with_name("rawtopic.meta.json").read_text())
    assert set(meta["phases"]) == set(rawtopic.SYSTEMS)
    assert all(p["complete"] for p in meta["phases"].values())


def test_both_deliver_exactly_the_matches(quick_run):
    _, records = quick_run
    truth = _value(records, "dlsroute", "true_matches")
    assert truth > 0  # the quick workload matches often (g = 8)
    assert _value(records, "dlsroute", "deliveries") == truth
    assert _value(records, "dlsroute", "false_deliveries") == 0
    assert _value(records, "raw-topic", "deliveries") == truth
    # every raw client read every record; a dlsroute client its matches only
    assert _value(records, "raw-topic", "records_read_per_event") == rawtopic.QUICK.n_clients
    assert (_value(records, "dlsroute", "records_read_per_event")
            == truth / rawtopic.QUICK.events)


def test_extrapolation_is_per_client_cost_times_clients(quick_run):
    _, records = quick_run
    n = rawtopic.QUICK.n_clients
    for big in rawtopic.QUICK.extrapolate:
        for system in rawtopic.SYSTEMS:
            measured = _value(records, system, "bytes_read_per_event")
            assert _value(records, system, "bytes_read_per_event", big) == pytest.approx(
                measured / n * big)
    ratio = [r for r in records if r["metric"] == "bytes_read_ratio"
             and r["params"]["clients"] == n]
    assert len(ratio) == 1 and "bar_met" in ratio[0]["params"]
