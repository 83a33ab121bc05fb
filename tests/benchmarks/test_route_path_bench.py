"""benchmarks.route_path on a small workload: exact deliveries, with and without the peers."""

import json

import pytest

from benchmarks import node_table, route_path


@pytest.mark.parametrize("peers_up_to", [2_000, 1_000])
def test_the_node_loop_by_part_is_exact_with_and_without_the_peers(tmp_path, peers_up_to):
    out = tmp_path / "route_path.json"
    assert route_path.main(["--sizes", "2000", "--rounds", "1", "--events", "400",
                            "--peers-up-to", str(peers_up_to), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    (r,) = doc["records"]
    assert r["params"]["n_subs"] == 2_000 and r["params"]["n_clients"] == 100
    assert r["exact"] is True
    assert r["rounds"][0]["deliveries"] > 0
    assert set(r["node_parts_s"]) >= {"inbox", "match", "produce", "total"}
    (row,) = node_table.route_rows(doc)
    if peers_up_to >= 2_000:  # timed beside the node, compared on every round
        assert r["plans_events_per_s"] > 0 and r["brute_events_per_s"] > 0
        assert "sample" not in r and row.endswith("| yes |")
    else:  # not timed: brute force checks a sample of events
        assert r["plans_events_per_s"] is None and r["brute_events_per_s"] is None
        assert r["sample"]["deliveries"] == r["sample"]["brute_deliveries"] > 0
        assert "| – | – |" in row and row.endswith(f"| yes ({route_path.SAMPLE} events) |")
