"""The fastbloom-rs counting filter adapter, and the filter micro-benchmark's quick run."""

import json

import numpy as np
import pytest

from benchmarks import filters
from benchmarks.baselines.cbf_peer import PeerCountingBloomFilter
from dls.cbf import CountingBloomFilter


def test_counting_add_remove_contains():
    f = PeerCountingBloomFilter(1024, 5)
    assert f.counting and f.deletable and f.memory_bytes() == 512
    f.add(7)
    f.add(7)
    f.add(2**64 - 1)  # the top of the label range maps to a distinct int64
    assert f.contains(7) and 2**64 - 1 in f and 8 not in f
    f.remove(7)
    assert 7 in f  # a second copy is still there
    f.remove(7)
    assert 7 not in f
    f.remove(2**64 - 1)
    assert not f.contains(2**64 - 1)


def test_batches_agree_with_single_calls():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2**62, size=300).astype(np.uint64)
    probe = rng.integers(0, 2**62, size=3000).astype(np.uint64)
    a, b = PeerCountingBloomFilter(4096, 4), PeerCountingBloomFilter(4096, 4)
    a.add_many(labels)
    for x in labels.tolist():
        b.add(x)
    assert a.contains_many(labels).all()
    assert (a.contains_many(probe) == np.array([b.contains(x) for x in probe.tolist()])).all()
    a.remove_many(labels[:150])
    for x in labels[:150].tolist():
        b.remove(x)
    assert (a.contains_many(probe) == b.contains_many(probe)).all()
    assert a.contains_many(labels[150:]).all()


def test_saturated_counters_are_decremented_unlike_dls():
    """16 removals after 20 additions: the peer forgets the label, dls.cbf keeps it."""
    peer = PeerCountingBloomFilter(1024, 3)
    ours = CountingBloomFilter.with_params(1024, 3)
    for _ in range(20):
        peer.add(42)
        ours.add(42)
    for _ in range(16):
        peer.remove(42)
        ours.remove(42)
    assert 42 not in peer  # a false negative: 4 copies are still "inserted"
    assert 42 in ours


def test_same_fpr_ballpark_at_equal_m_and_k():
    rng = np.random.default_rng(1)
    m, k = 1 << 14, 7
    n = round(m * np.log(2) / k)
    members, absent = filters.draw_labels(rng, n, 40000)
    peer, ours = PeerCountingBloomFilter(m, k), CountingBloomFilter.with_params(m, k)
    peer.add_many(members)
    ours.add_many(members)
    theory = (1 - np.exp(-k * n / m)) ** k
    for f in (peer, ours):
        assert f.contains_many(members).all()
        assert float(np.mean(f.contains_many(absent))) < 2.5 * theory


@pytest.mark.parametrize(("m", "k", "match"), [(100, 3, "multiple of 16"),
                                               (0, 3, "multiple of 16"),
                                               (1024, 0, "k must be")])
def test_bad_parameters(m, k, match):
    with pytest.raises(ValueError, match=match):
        PeerCountingBloomFilter(m, k)


def test_bad_labels():
    f = PeerCountingBloomFilter(1024, 3)
    with pytest.raises(ValueError, match="label must be in"):
        f.add(-1)
    with pytest.raises(ValueError, match="labels must be non-negative"):
        f.add_many(np.array([1, -2]))
    assert not f.contains(1)


def test_quick_micro_benchmark(tmp_path):
    out = tmp_path / "filters.json"
    assert filters.main(["--quick", "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert (tmp_path / "filters.meta.json").exists()
    systems = {r["system"] for r in records}
    assert systems == {"dls-cbf", "fastbloom-rs"}
    by = {(r["system"], r["metric"]): r for r in records}
    for s in systems:
        for metric in ("insert_batch_time", "insert_single_time", "query_batch_time",
                       "query_single_time", "delete_batch_time", "delete_single_time"):
            assert by[(s, metric)]["value"] > 0 and by[(s, metric)]["unit"] == "ns/op"
        assert by[(s, "false_negatives")]["value"] == 0
        assert by[(s, "memory_bytes")]["value"] == 4096 // 2
        assert 0 < by[(s, "false_positive_rate")]["value"] < 0.05
        assert set(by[(s, "memory_bytes")]) == {"benchmark", "system", "params", "metric",
                                                "value", "unit"}
    assert by[("dls-cbf", "resident_bytes")]["value"] == 4096


def test_settings_refuse_bad_m():
    with pytest.raises(ValueError, match="multiple of 16"):
        filters.FilterSettings(ms=(1000,))
