"""The Spark benchmark's quick mode on a real Kafka: records, checks and side files."""

import json

import pytest

from benchmarks import spark as bench

KEYS = {"benchmark", "system", "params", "metric", "value", "unit"}


@pytest.fixture(scope="module")
def quick_run(kafka_bootstrap, tmp_path_factory, spark):
    del spark  # the session's SparkSession, active: the run uses it and leaves it up
    out = tmp_path_factory.mktemp("bench") / "spark.json"
    assert bench.main(["--quick", "--bootstrap", kafka_bootstrap, "--out", str(out)]) == 0
    return out, json.loads(out.read_text())


def test_quick_records(quick_run):
    out, records = quick_run
    assert records and all(set(r) == KEYS and r["benchmark"] == "spark" for r in records)
    got = {(r["system"], r["metric"], r["params"].get("kind")): r for r in records}
    for kind, n in (("events", bench.QUICK.n_events), ("subscriptions", bench.QUICK.n_subs)):
        for system in ("passthrough", "dls-mapping"):
            r = got[(system, "throughput", kind)]
            assert r["unit"] == "rows/s" and r["value"] > 0 and r["params"]["n_rows"] == n
            assert got[(system, "plan_time", kind)]["value"] > 0
        ratio = got[("dls-mapping", "throughput_ratio", kind)]
        assert ratio["params"]["bar"] == 0.7
        assert ratio["params"]["met"] == (ratio["value"] >= 0.7)
        labels = got[("dls-mapping", "labels_throughput", kind)]
        assert labels["unit"] == "labels/s"
        # every raw row became one node message, none a dead letter
        rows = got[("dls-mapping", "output_rows", kind)]
        assert rows["value"] == rows["params"]["expected"] == n * bench.QUICK.rounds
    sub_labels = got[("dls-mapping", "labels_throughput", "subscriptions")]["params"]["labels"]
    assert bench.QUICK.n_subs <= sub_labels <= 27 * bench.QUICK.n_subs  # 1..3 cells, d=3
    assert got[("dls-mapping", "dead_letters", None)]["value"] == 0
    meta = json.loads(out.with_name("spark.meta.json").read_text())
    assert meta["quick"] is True and meta["n_records"] == len(records)
    assert meta["labels"] == sub_labels and meta["deleted_topics"] >= 6
    assert out.with_name("spark.png").read_bytes()[:4] == b"\x89PNG"
