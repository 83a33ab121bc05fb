"""``dlsroute simulate``: a trace through an in-process overlay, bad ops reported and skipped."""

import json

from dlsroute.cli import main

SPACE_SPEC = {"attributes": [
    {"name": "price", "type": "numeric", "low": 0, "high": 100, "granules": 10},
    {"name": "sym", "type": "discrete", "values": ["A", "B"]}]}
LINE = {"nodes": ["A", "B", "C"], "links": [["A", "B"], ["B", "C"]]}


def write(tmp_path, name, content):
    p = tmp_path / name
    p.write_text(content if isinstance(content, str) else json.dumps(content))
    return p


def test_simulate_cli_end_to_end(tmp_path, capsys):
    ops = [
        {"op": "subscribe", "node": "A", "client": "c1", "id": "s1",
         "where": "price between 10 and 20"},
        {"op": "subscribe", "node": "C", "client": "c2", "id": "s2",
         "where": [{"attr": "sym", "op": "=", "value": "B"}]},
        {"op": "publish", "node": "B", "client": "p", "id": "e1",
         "attrs": {"price": 15, "sym": "B"}},
        {"op": "subscribe", "node": "A", "client": "c1", "id": "bad",
         "where": "price between 30 and 20"},
        {"op": "unsubscribe", "node": "A", "client": "c9", "id": "s1"},
        {"op": "publish", "node": "B", "client": "p", "id": "e2",
         "attrs": {"price": 500, "sym": "B"}},
        {"op": "unsubscribe", "node": "A", "client": "c1", "id": "s1"},
        {"op": "publish", "node": "C", "client": "p", "id": "e3",
         "attrs": {"price": 15, "sym": "A"}},
        {"op": "teleport"},
    ]
    lines = "\n".join(json.dumps(o) for o in ops) + "\n{not json\n"
    out = tmp_path / "out.jsonl"
    rc = main(["simulate", "--space", str(write(tmp_path, "s.json", SPACE_SPEC)),
               "--topology", str(write(tmp_path, "t.json", LINE)),
               "--ops", str(write(tmp_path, "o.jsonl", lines)), "--out", str(out)])
    assert rc == 0
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert records[0] == {"id": "e1", "delivered": [["A", "c1"], ["C", "c2"]],
                          "matched": [["A", "c1"], ["C", "c2"]]}
    assert records[1]["id"] == "e2" and "outside the domain" in records[1]["rejected"]
    assert records[2] == {"id": "e3", "delivered": [], "matched": []}
    summary = records[-1]["summary"]
    reasons = [r["reason"] for r in summary["rejected"]]
    assert len(reasons) == 5
    assert "inverted range" in reasons[0]
    assert "belongs to client 'c1', not 'c9'" in reasons[1]
    assert "outside the domain" in reasons[2]
    assert "unknown op 'teleport'" in reasons[3]
    assert "not valid JSON" in reasons[4]
    assert summary["forwarded_subscription_labels"] > 0
    assert summary["forwarded_unsubscription_labels"] > 0
    assert summary["deliveries"] == 2 and summary["false_positives"] == 0
    assert '"subscriptions": 2' in capsys.readouterr().out


def test_simulate_delivers_exactly_unless_told_to_route_by_label(tmp_path):
    ops = [{"op": "subscribe", "node": "A", "client": "c1", "id": "s1",
            "where": "price between 12 and 18"}]
    ops += [{"op": "publish", "node": "C", "client": "p", "id": f"e{i}",
             "attrs": {"price": p, "sym": "A"}} for i, p in enumerate([10, 11.9, 12, 15, 18.5])]
    lines = "\n".join(json.dumps(o) for o in ops) + "\n"
    args = ["simulate", "--space", str(write(tmp_path, "s.json", SPACE_SPEC)),
            "--topology", str(write(tmp_path, "t.json", LINE)),
            "--ops", str(write(tmp_path, "o.jsonl", lines))]
    summaries = {}
    for flag in ("--exact-delivery", "--no-exact-delivery"):
        out = tmp_path / f"out{flag}.jsonl"
        assert main([*args, "--out", str(out), flag]) == 0
        summaries[flag] = json.loads(out.read_text().splitlines()[-1])["summary"]
    on, off = summaries["--exact-delivery"], summaries["--no-exact-delivery"]
    assert on["matched"] == off["matched"] == 2  # 12 and 15
    assert on["deliveries"] == 2 and on["false_positives"] == 0
    assert on["edge_removed"] == 3  # 10, 11.9 and 18.5 share the subscription's cells
    assert off["deliveries"] == 5 and off["false_positives"] == 3 and off["edge_removed"] == 0
