"""The quick side-by-side run: every system, no missed delivery, exact ones exact."""

import json

from benchmarks.baselines import quickcompare


def test_tiny_run(tmp_path):
    out = tmp_path / "q.json"
    systems = "bruteforce,rtree,mics,mics-cell,dls,dls-direct,dls-paper"
    assert quickcompare.main(["--n", "600", "--d", "2", "--g", "16", "--clients", "20",
                              "--events", "200", "--batch", "250", "--repeats", "1",
                              "--systems", systems, "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    by = {(r["system"], r["metric"]): r["value"] for r in records}
    assert {r["system"] for r in records} == set(systems.split(","))
    for s in systems.split(","):
        assert by[(s, "false_negatives")] == 0
        assert by[(s, "matching_time")] > 0 and by[(s, "bytes_per_subscription")] > 0
    for s in ("bruteforce", "rtree", "mics"):
        assert by[(s, "false_positive_rate")] == 0
        assert by[(s, "forwarded")] == 0 or s == "mics"
    assert by[("mics", "forwarded")] == by[("mics-cell", "forwarded")] > 0
    assert by[("dls", "forwarded")] == by[("dls-direct", "forwarded")] > 0
    # Cells decide the deliveries of cell-level MICS and of the direct DLS bank alike.
    assert by[("mics-cell", "false_positive_rate")] == by[("dls-direct",
                                                           "false_positive_rate")]
