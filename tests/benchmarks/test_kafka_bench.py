"""The Kafka benchmark's quick mode on a real broker: record shape only, no timing asserts."""

import argparse
import json

import numpy as np
import pytest

from benchmarks import kafka

KEYS = {"benchmark", "system", "params", "metric", "value", "unit"}


@pytest.fixture(scope="module")
def quick_run(kafka_bootstrap, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "kafka.json"
    assert kafka.main(["--quick", "--bootstrap", kafka_bootstrap, "--out", str(out),
                       "--no-plot"]) == 0
    return out, json.loads(out.read_text())


def test_quick_records_shape(quick_run):
    _, records = quick_run
    assert isinstance(records, list) and records
    for r in records:
        assert set(r) == KEYS
        assert r["benchmark"] == "kafka"
        assert isinstance(r["params"], dict)
        assert isinstance(r["value"], float)
        for k in ("distribution", "d", "g", "n_subs", "n_clients", "n_events"):
            assert k in r["params"], (k, r)
        assert r["params"]["n_subs"] == kafka.QUICK.n_subs
        assert r["params"]["n_clients"] == kafka.QUICK.n_clients


def test_quick_metrics_present(quick_run):
    _, records = quick_run
    metrics = {(r["system"], r["metric"]) for r in records}
    for system in ("dls", "passthrough", "passthrough-fanout", "passthrough-nontx"):
        assert (system, "throughput") in metrics
        assert (system, "delivery_throughput") in metrics
    for m in ("load_time", "load_topic_setup_time", "recovery_time", "throughput_ratio",
              "throughput_ratio_vs_fanout", "deliveries_per_event", "node_time_share",
              "latency_p50", "latency_p99", "latency_samples", "events_per_transaction"):
        assert ("dls", m) in metrics, m
    assert ("passthrough", "latency_p99") in metrics
    for m in ("load_time", "throughput", "throughput_ratio_vs_passthrough-nontx",
              "latency_p99"):
        assert ("dls-alo", m) in metrics, m
    assert ("passthrough-nontx", "latency_p99") in metrics
    for m in ("load_time", "throughput", "messages_per_event", "deliveries_per_event",
              "latency_p99"):
        assert ("dls-shared", m) in metrics, m
        assert ("dls-shared-eos", m) in metrics, m
        for parts in kafka.QUICK.shared_partitions[1:]:
            assert (f"dls-shared-p{parts}", m) in metrics, m
            assert (f"dls-shared-p{parts}-eos", m) in metrics, m
    for r in records:
        if r["metric"] == "latency_p99":
            assert {"batch_size", "poll_timeout_s", "rate_events_s", "event_draw",
                    "events_digest"} <= set(r["params"])
            # the absolute 20 ms bar is gone: the bar is a ratio (benchmarks.kafka_latency)
            assert not {"bar_ms", "met"} & set(r["params"])
        if r["metric"] == "throughput":
            assert {"batch_size", "poll_timeout_s", "transactional"} <= set(r["params"])


def test_quick_paired_rounds_and_like_for_like_latency(quick_run):
    """Shared-topic nodes: a paired ratio over alternating rounds, and the passthrough of
    the same kind measured at the node's latency rate."""
    _, records = quick_run
    names = ["dls-shared", *(f"dls-shared-p{n}" for n in kafka.QUICK.shared_partitions[1:])]
    for name in names:
        for system, base in ((name, "passthrough-nontx"), (f"{name}-eos", "passthrough")):
            paired = [r for r in records if r["system"] == system
                      and r["metric"] == "throughput_ratio_paired_median"]
            assert len(paired) == 1, system
            pp = paired[0]["params"]
            assert pp["baseline"] == base and pp["rounds"] == kafka.QUICK.paired_rounds
            assert paired[0]["value"] == pytest.approx(float(np.median(pp["ratios"])), abs=1e-4)
            # each round: passthrough, node, node without its route cache; order rotated
            runs = [base, system, f"{system}-nocache"]
            orders = [r["params"]["order"] for r in records if r["system"] == system
                      and r["metric"] == "throughput_round"]
            assert orders == [runs[i:] + runs[:i] for i in range(kafka.QUICK.paired_rounds)]
            nocache = [r for r in records if r["system"] == f"{system}-nocache"]
            assert {r["metric"] for r in nocache} == {
                "throughput_round", "route_cache_hit_rate", "throughput_ratio_paired_median"}
            # without the cache only repeats within one batch reuse a plan; with it, the
            # plans of earlier events' labels: fresh events meet some of them, never all
            # (replaying the first window's events, the rounds hit 100 %)
            cold = [r["value"] for r in nocache if r["metric"] == "route_cache_hit_rate"]
            warm = [r["value"] for r in records if r["system"] == system
                    and r["metric"] == "route_cache_hit_rate" and "round" in r["params"]]
            assert len(cold) == len(warm) == kafka.QUICK.paired_rounds
            assert max(cold) < 0.5 and 0 < min(warm) and max(warm) < 1
            assert pp["route_cache_hit_rates"] == [round(x, 4) for x in warm]
            assert len([r for r in records if r["system"] == base
                        and r["metric"] == "throughput_round"
                        and r["params"]["rate_of"] == system]) == kafka.QUICK.paired_rounds
            node_rate = next(r["params"]["rate_events_s"] for r in records
                             if r["system"] == system and r["metric"] == "latency_p99")
            floor = [r for r in records if r["system"] == base and r["metric"] == "latency_p99"
                     and r["params"].get("rate_of") == system]
            assert len(floor) == 1 and floor[0]["params"]["rate_events_s"] == node_rate
    assert all(r["params"].get("gc_freeze") is True for r in records
               if r["metric"] == "throughput")


def test_quick_rounds_route_fresh_events(quick_run):
    """Every run of every paired round, and every latency run, sends events of its own:
    never the first window's (whose labels the route cache has seen) nor another run's."""
    _, records = quick_run
    p = kafka.prepare(kafka.QUICK, kafka.QUICK.n_events + kafka.QUICK.profile_events,
                      kafka.Recorder())
    n = kafka.QUICK.n_events
    first_window = kafka.events_digest(p.workload.events[:n], p.ev_labels[:n])
    rounds = [r for r in records if r["metric"] == "throughput_round"]
    assert len(rounds) == 3 * 2 * len(kafka.QUICK.shared_partitions) * kafka.QUICK.paired_rounds
    digests = [r["params"]["events_digest"] for r in rounds]
    draws = [r["params"]["event_draw"] for r in rounds]
    assert len(set(digests)) == len(set(draws)) == len(rounds)
    assert first_window not in digests
    runs = {(r["system"], r["params"]["event_draw"], r["params"]["events_digest"])
            for r in records if r["metric"] == "latency_p99"}
    assert len({d for _, d, _ in runs}) == len({g for _, _, g in runs}) == len(runs) > 1
    assert first_window not in {g for _, _, g in runs}
    hits = [r for r in records if r["metric"] == "route_cache_hit_rate"
            and "event_draw" in r["params"] and "round" not in r["params"]]
    assert hits and {r["system"] for r in hits} <= {r["system"] for r in records
                                                    if r["system"].startswith("dls")}


def test_fresh_events_are_new_draws_of_the_same_workload():
    p = kafka.prepare(kafka.QUICK, 2_000, kafka.Recorder())
    a_events, a_labels = kafka.fresh_events(p, 2_000, "round 0")
    b_events, b_labels = kafka.fresh_events(p, 2_000, "round 1")
    again = kafka.fresh_events(p, 2_000, "round 0")
    assert np.array_equal(again[0], a_events) and np.array_equal(again[1], a_labels)
    assert a_events.shape == b_events.shape == p.workload.events.shape
    assert a_events.min() >= 0 and a_events.max() <= p.workload.params.domain_high
    # other points and (mostly) other labels than each other and the first window
    for other_events, other_labels in ((b_events, b_labels), (p.workload.events, p.ev_labels)):
        assert not (a_events == other_events).all(axis=1).any()
        assert (a_labels == other_labels).mean() < 0.01
    a_values, a_headers = kafka.encode_events(kafka.QUICK, a_events, a_labels, "p0-e")
    b_values, _ = kafka.encode_events(kafka.QUICK, b_events, b_labels, "p0-e")
    assert not set(a_values) & set(b_values) and not set(a_values) & set(p.ev_values)
    assert dict(a_headers[7])["dls-event-id"] == b"p0-e7"
    assert kafka.events_digest(a_events, a_labels) != kafka.events_digest(b_events, b_labels)


def test_quick_side_files(quick_run):
    out, records = quick_run
    meta = json.loads(out.with_name("kafka.meta.json").read_text())
    assert meta["benchmark"] == "kafka" and meta["quick"] is True
    assert meta["n_records"] == len(records)
    assert meta["machine"]["cpu_count"] >= 1
    assert meta["wall_time_s"] > 0
    assert "throughput ratio" in out.with_name("kafka.log").read_text()
    assert "cProfile" in out.with_name("kafka.profile.log").read_text()


def test_quick_shared_topic_groups_deliveries(quick_run):
    """On the shared topic an event is written at most once per partition."""
    _, records = quick_run
    shared = {r["metric"]: r for r in records if r["system"] == "dls-shared"}
    parts = shared["throughput"]["params"]["shared_delivery_partitions"]
    assert parts == kafka.QUICK.shared_partitions[0]
    assert shared["messages_per_event"]["value"] <= parts
    assert shared["messages_per_event"]["value"] <= shared["deliveries_per_event"]["value"]
    assert shared["latency_p99"]["params"]["watched_partitions"] <= parts


def test_quick_one_partition_writes_each_event_once(quick_run):
    """With one shared partition every event is one Kafka message, whatever its fan-out."""
    _, records = quick_run
    if 1 not in kafka.QUICK.shared_partitions[1:]:
        pytest.skip("the quick preset measures no one-partition shared topic")
    one = {r["metric"]: r for r in records if r["system"] == "dls-shared-p1"}
    assert one["throughput"]["params"]["shared_delivery_partitions"] == 1
    assert one["messages_per_event"]["value"] <= 1.0
    # some events reach several clients, each still one message (these subscriptions carry
    # labels only: the node delivers by label, exactly, no filter false positive added)
    assert one["deliveries_per_event"]["value"] > one["messages_per_event"]["value"]


def test_shared_partition_counts_option() -> None:
    assert kafka._partition_counts("4,1") == (4, 1)
    assert kafka._partition_counts("0") == ()
    for bad in ("4,x", "-1", "4,4", "0,2"):
        with pytest.raises(argparse.ArgumentTypeError, match="shared partitions"):
            kafka._partition_counts(bad)


def test_quick_plot(quick_run, tmp_path):
    _, records = quick_run
    png = tmp_path / "kafka.png"
    assert kafka.plot(records, png) and png.stat().st_size > 0


# -- the PNG, from synthetic records (no Kafka) ----------------------------------------------
def _r(system, metric, value, **params):
    return {"benchmark": "kafka", "system": system, "metric": metric, "value": float(value),
            "unit": "", "params": params}


def _paired_node(system="dls-shared-p1-eos", median=0.6, window_ratio=2.9):
    """An exactly-once shared node whose first window looks faster than its passthrough
    while its paired rounds say it is slower (what issue 18 saw)."""
    base = "passthrough"
    recs = [_r(system, "throughput", 90_000, transactional=True),
            _r(system, f"throughput_ratio_vs_{base}", window_ratio),
            _r(system, "throughput_ratio_paired_median", median, baseline=base,
               ratios=[median - 0.1, median, median + 0.1]),
            _r(f"{system}-nocache", "throughput_ratio_paired_median", median / 2,
               baseline=base, ratios=[median / 2] * 3)]
    for k in range(3):
        recs += [_r(system, "throughput_round", 60_000 + k, round=k),
                 _r(f"{system}-nocache", "throughput_round", 30_000, round=k),
                 _r(base, "throughput_round", 100_000, round=k, rate_of=system)]
    return recs


def _window_node():
    return [_r("passthrough", "throughput", 100_000, transactional=True),
            _r("dls", "throughput", 1_000, transactional=True),
            _r("dls", "throughput_ratio", 0.01)]


def _latency(system, base, p99s, base_p99, rate=20_000.0):
    return ([_r(system, "latency_p99", v, rate_events_s=rate, rate_fraction_of_max=0.5)
             for v in p99s]
            + [_r(base, "latency_p99", base_p99, rate_events_s=rate,
                  rate_fraction_of_max=0.5, rate_of=system)])


def _bar_heights(ax):
    return sorted(round(p.get_height(), 6) for p in ax.patches)


def test_plot_shows_paired_medians_not_first_windows():
    import matplotlib.pyplot as plt

    records = _window_node() + _paired_node()
    nodes = {n.system: n for n in kafka.plot_bars(records)}
    assert nodes["dls-shared-p1-eos"].ratio == 0.6 and nodes["dls-shared-p1-eos"].paired
    assert nodes["dls-shared-p1-eos"].rate == 60_001 and \
        nodes["dls-shared-p1-eos"].baseline_rate == 100_000
    assert nodes["dls"].ratio == 0.01 and not nodes["dls"].paired
    fig = kafka.plot_figure(records)
    try:
        ratio_ax, rate_ax = fig.axes  # no latency phase: no latency panel
        assert _bar_heights(ratio_ax) == [0.01, 0.3, 0.6]  # 2.9 (first window) is not drawn
        assert _bar_heights(rate_ax) == [30_000, 60_001, 100_000]
        for ax in fig.axes:
            assert all(label.get_rotation() == 30 for label in ax.get_xticklabels())
    finally:
        plt.close(fig)


def test_plot_panels_follow_the_phases_run():
    import matplotlib.pyplot as plt

    only_window = kafka.plot_figure(_window_node())
    with_latency = kafka.plot_figure(
        _window_node() + _paired_node()
        + _latency("dls-shared-p1-eos", "passthrough", [150.0, 90.0], 120.0))
    try:
        assert len(only_window.axes) == 1
        assert len(with_latency.axes) == 3
        assert _bar_heights(with_latency.axes[2]) == [90.0, 120.0]  # the best p99, its floor
    finally:
        plt.close(only_window)
        plt.close(with_latency)
    assert kafka.plot_figure([]) is None


def test_profile_parts_name_functions_that_exist() -> None:
    """Each node part the profile sums is a function defined in the file it names."""
    import ast
    from pathlib import Path

    from benchmarks.kafka import PROFILE_PARTS

    root = Path(__file__).resolve().parents[2]
    for label, name, how in PROFILE_PARTS:
        if how.endswith(".py"):
            tree = ast.parse((root / how).read_text())
            defined = {n.name for n in ast.walk(tree)
                       if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
            assert name in defined, (label, how)
