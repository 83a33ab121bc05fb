"""The topic-lookup benchmark's quick mode: its records (no broker; nothing is sent)."""

import json

import pytest

from benchmarks import topic_lookup

KEYS = {"benchmark", "system", "params", "metric", "value", "unit"}


def test_quick_run_records_every_layout_at_every_count(tmp_path):
    out = tmp_path / "topic_lookup.json"
    assert topic_lookup.main(["--quick", "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert records and all(set(r) == KEYS for r in records)
    meta = json.loads(out.with_name("topic_lookup.meta.json").read_text())
    assert meta["benchmark"] == "topic_lookup" and meta["quick"] is True
    counts = topic_lookup.QUICK.topic_counts
    times = {(r["system"], r["params"].get("order"), r["params"]["topics"]): r["value"]
             for r in records if r["metric"] == "produce_time"}
    assert set(times) == ({("topic-per-client", o, n) for o in ("round-robin", "newest",
                                                               "oldest") for n in counts}
                          | {("shared-topic", None, n) for n in counts})
    assert all(t > 0 for t in times.values())
    ratios = {r["params"]["topics"]: r["value"] for r in records
              if r["metric"] == "produce_time_ratio"}
    for n in counts:  # the ratio is of the two times recorded beside it
        assert ratios[n] == pytest.approx(times[("topic-per-client", "round-robin", n)]
                                          / times[("shared-topic", None, n)])
    assert out.with_suffix(".png").exists()
