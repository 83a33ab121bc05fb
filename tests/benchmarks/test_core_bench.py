"""The core benchmark's quick mode, its workload generator and the brute-force baseline."""

import json

import numpy as np
import pytest

from benchmarks import core
from benchmarks.baselines.bruteforce import BruteForceMatcher
from benchmarks.workload import (
    WorkloadParams,
    attr_names,
    cell_value_bounds,
    generate,
    space_spec,
)
from dls.predicates import Subscription
from dls.space import ContentSpace

KEYS = {"benchmark", "system", "params", "metric", "value", "unit"}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "core.json"
    assert core.main(["--quick", "--out", str(out), "--no-plot"]) == 0
    return out, json.loads(out.read_text())


def test_quick_records_shape(quick_run):
    out, records = quick_run
    assert isinstance(records, list) and records
    for r in records:
        assert set(r) == KEYS
        assert isinstance(r["params"], dict)
        assert isinstance(r["value"], float)
        for k in ("distribution", "d", "g", "n_subs", "n_clients", "n_events"):
            assert k in r["params"], (k, r)
    systems = {r["system"] for r in records}
    assert systems == {"dls", "dls-direct", "bruteforce"}
    metrics = {(r["system"], r["metric"]) for r in records}
    for system in ("dls", "dls-direct"):
        for m in ("insert_time", "delete_time", "matching_time", "forwarded_labels",
                  "false_negatives", "false_positive_rate", "client_bank_bytes",
                  "speedup_vs_bruteforce"):
            assert (system, m) in metrics
    assert ("bruteforce", "matching_time") in metrics
    assert ("dls", "mapping_time") in metrics
    meta = json.loads(out.with_name("core.meta.json").read_text())
    assert meta["machine"]["cpu_count"] >= 1
    assert meta["machine"]["numpy"] == np.__version__


def test_quick_no_false_negatives(quick_run):
    _, records = quick_run
    fns = [r for r in records if r["metric"] == "false_negatives"]
    assert {r["system"] for r in fns} == {"dls", "dls-direct"}
    assert all(r["value"] == 0 for r in fns)
    for r in records:
        if r["metric"] == "false_positive_rate":
            assert 0.0 <= r["value"] <= 1.0


def test_forwarded_equals_withdrawn(quick_run):
    _, records = quick_run
    for system in ("dls", "dls-direct"):
        fwd = [r["value"] for r in records
               if r["system"] == system and r["metric"] == "forwarded_labels_total"]
        wd = [r["value"] for r in records
              if r["system"] == system and r["metric"] == "withdrawn_labels_total"]
        assert fwd == wd and fwd[0] > 0


@pytest.mark.parametrize("dist", ["uniform", "zipf"])
def test_workload_is_seeded_and_in_domain(dist):
    p = WorkloadParams(dist, 3, 16, 2_000, 10, 300, seed=7)
    a, b = generate(p), generate(p)
    for x, y in ((a.lo, b.lo), (a.hi, b.hi), (a.owners, b.owners), (a.events, b.events)):
        assert np.array_equal(x, y)
    high = p.domain_high
    assert a.lo.min() >= 0 and a.hi.max() <= high and (a.hi >= a.lo).all()
    assert (a.hi - a.lo).max() <= 2 * high / 16
    assert a.events.min() >= 0 and a.events.max() <= high
    assert a.owners.min() >= 0 and a.owners.max() < 10


def test_zipf_cells_follow_the_truncated_law():
    g = 16
    first, last = cell_value_bounds(g)
    space = ContentSpace.from_spec(space_spec(1, g))
    attr = space.attributes[0]
    # every cell's integer range maps exactly onto that cell
    assert np.array_equal(attr.cells(first), np.arange(g))
    assert np.array_equal(attr.cells(last), np.arange(g))
    assert (first[1:] == last[:-1] + 1).all()
    w = generate(WorkloadParams("zipf", 1, g, 200_000, 10, 10, zipf_s=1.2))
    freq = np.bincount(attr.cells(w.lo[:, 0]), minlength=g) / 200_000
    want = np.arange(1, g + 1, dtype=float) ** -1.2
    want /= want.sum()
    assert np.abs(freq - want).max() < 0.01


@pytest.mark.parametrize("d", [1, 2, 3])
def test_bruteforce_agrees_with_subscription_matches(d):
    rng = np.random.default_rng(d)
    p = WorkloadParams("uniform", d, 8, 300, 7, 200, seed=d)
    w = generate(p)
    # Sharpen the test: put some events exactly on box bounds.
    ev = w.events.copy()
    ev[:50] = w.lo[rng.integers(0, 300, 50)]
    ev[50:100] = w.hi[rng.integers(0, 300, 50)]
    space = ContentSpace.from_spec(space_spec(d, 8))
    names = attr_names(d)
    subs = [Subscription(space, [{"attr": n, "op": "between", "low": int(w.lo[i, j]),
                                  "high": int(w.hi[i, j])} for j, n in enumerate(names)])
            for i in range(len(w.lo))]
    bf = BruteForceMatcher(d, 7, capacity=4)  # small capacity: exercises growth
    bf.add(w.lo[:100], w.hi[:100], w.owners[:100])
    bf.add(w.lo[100:], w.hi[100:], w.owners[100:])
    offsets, clients = bf.match(ev)
    for e in range(len(ev)):
        event = {n: int(ev[e, j]) for j, n in enumerate(names)}
        mask = np.array([s.matches(event) for s in subs])
        assert np.array_equal(bf.match_mask(ev[e]), mask)
        want = np.unique(w.owners[mask])
        assert np.array_equal(clients[offsets[e]:offsets[e + 1]], want)


def test_bruteforce_remove_rows():
    w = generate(WorkloadParams("uniform", 2, 8, 500, 5, 50))
    bf = BruteForceMatcher(2, 5)
    bf.add(w.lo, w.hi, w.owners)
    drop = np.arange(0, 500, 3)
    bf.remove_rows(drop)
    keep = np.setdiff1d(np.arange(500), drop)
    ref = BruteForceMatcher(2, 5)
    ref.add(w.lo[keep], w.hi[keep], w.owners[keep])
    assert len(bf) == len(keep)
    for a, b in zip(bf.match(w.events), ref.match(w.events), strict=True):
        assert np.array_equal(a, b)
    bf.remove_prefix(100)
    assert len(bf) == len(keep) - 100
    assert np.array_equal(bf.owners, w.owners[keep][100:])
