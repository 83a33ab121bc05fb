"""The resize benchmark's quick mode: its records, and what they must show."""

import json

from benchmarks import resize

KEYS = {"benchmark", "system", "params", "metric", "value", "unit"}


def test_quick_run_records_rebuilds_that_bring_the_rate_back(tmp_path):
    out = tmp_path / "resize.json"
    assert resize.main(["--quick", "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert records and all(set(r) == KEYS for r in records)
    assert json.loads(out.with_name("resize.meta.json").read_text())["benchmark"] == "resize"
    by = {(r["system"], r["metric"]): r for r in records}
    rebuilds = [r for r in records if r["metric"] == "rebuild_s"]
    assert rebuilds and all(r["params"]["rate_after"] < r["params"]["rate_before"]
                            for r in rebuilds)
    assert (by[("client_bank", "false_positive_rate")]["value"]
            < by[("client_bank-fixed", "false_positive_rate")]["value"])
    for system in ("ert", "client_bank"):
        assert by[(system, "forced_rebuild_s")]["value"] > 0
        assert by[(system, "position_table_s")]["value"] > 0
