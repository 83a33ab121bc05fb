"""benchmarks.node's quick run on a real broker: the records' shape and exactness, no timings.

The quixstreams router runs in its own venv (``.cache/bench/quix-venv``, made on first use:
about a minute); ``DLS_BENCH_NO_PEER=1`` leaves it out, and its checks are skipped, saying so.
"""

import json
import os

import numpy as np
import pytest

from benchmarks import node
from benchmarks.quotes import QuotesParams, generate

KEYS = {"benchmark", "system", "params", "metric", "value", "unit"}
NO_PEER = os.environ.get("DLS_BENCH_NO_PEER") == "1"
QUICK = node.QUICK_SIZES[0]


@pytest.fixture(scope="module")
def quick_run(kafka_bootstrap, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "node.json"
    code = node.main(["--quick", "--bootstrap", kafka_bootstrap, "--out", str(out)])
    meta = json.loads(out.with_name("node.meta.json").read_text())
    return code, json.loads(out.read_text()), meta, out


def _one(records, system, metric):
    rows = [r for r in records if r["system"] == system and r["metric"] == metric]
    assert len(rows) == 1, (system, metric, rows)
    return rows[0]


def _systems():
    return [s for s in node.SYSTEMS if s != "quix" or not NO_PEER]


def test_quick_run_is_exact(quick_run):
    code, records, meta, _ = quick_run
    assert meta["exact_mismatches"] == 0
    assert code == 0
    for system in _systems():
        if system == "passthrough":
            continue
        r = _one(records, system, "exact_mismatches")
        assert r["value"] == 0.0, r["params"]["examples"]
        # every event of every round is checked in the quick run (the node's also those
        # routed after each of its two restarts)
        restarts = 2 * node.RESTART_EVENTS if system == "node" else 0
        assert r["params"]["checked_events"] == node.QUICK.rounds * QUICK.n_events + restarts


def test_a_restarted_node_routes_again_exactly(quick_run):
    """Stopped, then killed: each time started again, it routes fresh events (checked
    above with the rounds' events) once it has its subscriptions back."""
    _, records, _, _ = quick_run
    for how in ("stopped", "killed"):
        r = _one(records, "node", f"restart_to_routing_{how}")
        assert r["unit"] == "s" and r["value"] > 0
        assert r["params"]["deliveries_per_event"] > 0


def test_quick_records_shape(quick_run):
    _, records, _, _ = quick_run
    assert isinstance(records, list) and records
    for r in records:
        assert set(r) == KEYS
        assert r["benchmark"] == "node"
        assert isinstance(r["value"], float)
        p = r["params"]
        assert (p["n_subs"], p["n_clients"], p["fanout"], p["n_events"]) == (
            QUICK.n_subs, QUICK.n_clients, QUICK.fanout, QUICK.n_events)


def test_quick_metrics_present(quick_run):
    _, records, _, _ = quick_run
    systems = _systems()
    medians = {}
    for system in systems:
        rounds = [r for r in records if r["system"] == system
                  and r["metric"] == "throughput_round"]
        assert [r["params"]["round"] for r in rounds] == list(range(node.QUICK.rounds))
        assert len({r["params"]["event_seed"] for r in rounds}) == node.QUICK.rounds
        assert all(r["value"] > 0 and r["unit"] == "events/s" for r in rounds)
        med = _one(records, system, "throughput")
        assert med["value"] == pytest.approx(float(np.median([r["value"] for r in rounds])))
        medians[system] = med["value"]
    # the order of the systems rotates from round to round
    orders = {tuple(r["params"]["order"]) for r in records
              if r["metric"] == "throughput_round" and r["system"] == "node"}
    assert len(orders) == min(node.QUICK.rounds, len(systems))
    for other in systems[1:]:
        ratio = _one(records, "node", f"ratio_vs_{other}")
        assert ratio["value"] == pytest.approx(medians["node"] / medians[other])
        _one(records, "node", f"ratio_vs_{other}_paired_median")
    acks = _one(records, "node", "subscribe_acks")
    assert acks["value"] == QUICK.n_subs
    assert _one(records, "node", "subscribe_rate")["value"] > 0
    # the last acknowledgement comes after the commit of the last subscription
    assert _one(records, "node", "subscribe_rate_to_commit")["value"] >= \
        _one(records, "node", "subscribe_rate")["value"]
    hits = [r["params"]["route_cache_hit_rate"] for r in records
            if r["system"] == "node" and r["metric"] == "throughput_round"]
    assert all(0.0 <= h <= 1.0 for h in hits)


def test_quick_deliveries_per_event_match_brute_force(quick_run):
    _, records, _, _ = quick_run
    expected = _one(records, "brute_force", "deliveries_per_event")["value"]
    assert expected > 1.0
    for system in _systems():
        if system == "passthrough":
            continue
        # every event is in the sample in the quick run: the same mean
        got = _one(records, system, "deliveries_per_event")["value"]
        assert got == pytest.approx(expected, rel=1e-9), system


def test_quick_meta_and_plot(quick_run):
    _, _, meta, out = quick_run
    assert meta["machine"]["cpu_count"] >= 1
    assert meta["versions"]["confluent_kafka"]
    assert "dlsroute node --config" in meta["node_process"]
    assert "shared_delivery_partitions = 1" in meta["node_toml"]
    if NO_PEER:
        assert "peer_skipped" in meta
    else:
        assert meta["peer_versions"]["quixstreams"] == node.QUIX_VERSION
    assert out.with_name("node.png").stat().st_size > 0
    assert out.with_name("node.log").read_text()


@pytest.mark.skipif(not NO_PEER, reason="the peer runs (DLS_BENCH_NO_PEER is not 1)")
def test_peer_left_out_says_so(quick_run):
    _, records, _, _ = quick_run
    assert not [r for r in records if r["system"] == "quix"]


# -- no Kafka ----------------------------------------------------------------------------------
def test_parse_sizes():
    assert [x.fanout for x in node.parse_sizes("100000")] == [64, 380]
    assert node.parse_sizes("100000@380") == [node.FULL_SIZES[2]]
    assert node.parse_sizes("10000,1000000") == [node.FULL_SIZES[0], node.FULL_SIZES[3]]
    (custom,) = node.parse_sizes("50000@100", n_events=7)
    assert (custom.n_subs, custom.n_clients, custom.fanout, custom.n_events) == (
        50_000, 1_000, 100.0, 7)
    assert node.parse_sizes("2000")[0] == QUICK


def test_rate_leaves_out_the_first_commit():
    samples = [(0.0, 0), (1.0, 100), (1.5, 200), (2.0, 300)]
    r = node.rate_of(samples, 300)
    assert (r.events, r.seconds, r.first_commit, r.commits) == (200, 1.0, 100, 3)
    assert r.rate == 200.0
    one = node.rate_of([(0.0, 0), (0.5, 300)], 300)  # one commit: from the start
    assert (one.events, one.seconds) == (300, 0.5)


def test_labels_cache_is_keyed_by_the_workload():
    a = generate(QuotesParams(2_000, 100, 16))
    b = generate(QuotesParams(2_000, 100, 16, seed=1))
    assert node.labels_cache_path(a) == node.labels_cache_path(generate(a.params))
    assert node.labels_cache_path(a) != node.labels_cache_path(b)
