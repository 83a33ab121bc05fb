"""docs/benchmarks.md's node tables are the committed results, rendered."""

from benchmarks import node_table


def test_the_page_says_what_the_results_say() -> None:
    page = node_table.PAGE.read_text()
    assert node_table.render(page, node_table._load(node_table.NODE),
                             node_table._load(node_table.ROUTE)) == page


def test_a_row_per_workload_with_its_ratios() -> None:
    params = {"n_subs": 100000, "n_clients": 1000, "fanout": 64}
    recs = [{"system": s, "metric": m, "value": v, "params": params} for s, m, v in [
        ("node", "throughput", 20000.0), ("quix", "throughput", 4000.0),
        ("passthrough", "throughput", 40000.0), ("node", "deliveries_per_event", 62.04),
        ("node", "ratio_vs_quix_paired_median", 5.01),
        ("node", "ratio_vs_passthrough_paired_median", 0.499),
        ("node", "subscribe_rate", 51234.0), ("node", "restart_to_routing_stopped", 9.84),
        ("node", "exact_mismatches", 0.0)]]
    assert node_table.node_rows(recs) == [
        "| 100,000 | 1,000 | 64 | 62.0 | 20,000 | 4,000 | 40,000 | 5.01 | 0.50 | 51,234 | "
        "9.8 / - | 0 |"]
    page = f"a\n{node_table.START}\nold\n{node_table.END}\nb"
    out = node_table.render(page, recs, None)
    assert out.startswith("a\n") and out.endswith("\nb") and "old" not in out
    assert "| 100,000 |" in out
