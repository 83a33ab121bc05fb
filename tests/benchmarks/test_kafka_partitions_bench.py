"""The partition-count benchmark on a real broker: record shape only, no timing asserts."""

import json

from benchmarks import kafka_partitions


def _kp_topics(bootstrap):
    from connectors.kafka import admin

    return {t for t in admin(bootstrap).list_topics(timeout=30).topics if t.startswith("kp")}


def test_quick_run_records(kafka_bootstrap, tmp_path):
    before = _kp_topics(kafka_bootstrap)
    out = tmp_path / "kp.json"
    assert kafka_partitions.main(["--quick", "--bootstrap", kafka_bootstrap, "--out", str(out),
                                  "--topics", "20", "2", "--rate", "500",
                                  "--seconds", "1"]) == 0
    records = json.loads(out.read_text())
    systems = {r["system"] for r in records}
    assert systems == {"20-topics", "2-topics"}
    for r in records:
        assert set(r) == {"benchmark", "system", "params", "metric", "value", "unit"}
        assert r["benchmark"] == "kafka_partitions"
    samples = {r["system"]: r["value"] for r in records if r["metric"] == "latency_samples"}
    # 500 msgs/s for 1 s; the receiver reads 10 of 20 topics (about half) or both of 2.
    assert 100 <= samples["20-topics"] <= 500
    assert 350 <= samples["2-topics"] <= 520
    assert _kp_topics(kafka_bootstrap) <= before  # its topics are deleted
    meta = json.loads(out.with_name("kp.meta.json").read_text())
    assert meta["benchmark"] == "kafka_partitions" and meta["n_records"] == len(records)
