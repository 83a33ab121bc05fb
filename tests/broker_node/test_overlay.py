import json

import pytest

from broker_node.exceptions import TopologyError
from broker_node.overlay import Overlay, Topology
from dls.space import ContentSpace
from dlsroute.cli import main

SPACE_SPEC = {"attributes": [
    {"name": "price", "type": "numeric", "low": 0, "high": 100, "granules": 10},
    {"name": "sym", "type": "discrete", "values": ["A", "B"]}]}
LINE = {"nodes": ["A", "B", "C"], "links": [["A", "B"], ["B", "C"]]}


@pytest.mark.parametrize("spec, fragment", [
    ({"nodes": ["A", "B"], "links": [["A", "B"], ["B", "A"]]}, "closes a cycle"),
    ({"nodes": ["A", "B", "C"], "links": [["A", "B"], ["B", "C"], ["C", "A"]]},
     "closes a cycle"),
    ({"nodes": ["A"], "links": [["A", "A"]]}, "self-link on node 'A'"),
    ({"nodes": ["A", "B"], "links": [["A", "Z"]]}, "unknown node 'Z'"),
    ({"nodes": ["A", "B"], "links": []}, "not connected"),
    ({"nodes": ["A", "A"], "links": []}, "duplicate node 'A'"),
    ({"nodes": [], "links": []}, "non-empty list"),
])
def test_bad_topologies(spec, fragment):
    with pytest.raises(TopologyError, match=fragment):
        Topology.from_spec(spec)


@pytest.mark.parametrize("name, ok", [
    ("node-1_b", True), ("-", True), ("_", True), ("", False), ("a b", False),
    ("a.b", False), ("é", False), ("٣", False), (3, False)])
def test_node_names_follow_the_wire_contract(name, ok):
    """Node names are topic-name parts: connectors.topics.NAME_PATTERN decides."""
    spec = {"nodes": [name], "links": []}
    if ok:
        assert Topology.from_spec(spec).nodes == (name,)
    else:
        with pytest.raises(TopologyError, match="node names must be non-empty"):
            Topology.from_spec(spec)


def test_aggregation_saves_link_traffic():
    net = Overlay(ContentSpace.from_spec(SPACE_SPEC), Topology.from_spec(LINE))
    net.subscribe("A", "c1", "s1", "price < 50")
    first = net.stats.forwarded_subscription_labels
    net.subscribe("A", "c2", "s2", "price < 45")  # covered: nothing new to advertise
    assert net.stats.forwarded_subscription_labels == first
    assert net.publish("C", "p", {"price": 45, "sym": "A"}) == (
        [("A", "c1"), ("A", "c2")], [("A", "c1")])


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


def test_cli_reports_bad_space_clearly(tmp_path, capsys):
    rc = main(["labels", "--space", str(write(tmp_path, "s.json", {"attributes": []})),
               "--where", "x > 1"])
    assert rc == 2
    assert "attributes must be a non-empty list" in capsys.readouterr().err


def test_labels_cli(tmp_path, capsys):
    space = write(tmp_path, "s.json", SPACE_SPEC)
    assert main(["labels", "--space", str(space), "--where", "price < 10 and sym = B"]) == 0
    assert capsys.readouterr().out.split() == ["1", "0000-1"]
    assert main(["labels", "--space", str(space), "--event",
                 '{"price": 99, "sym": "A"}']) == 0
    assert capsys.readouterr().out.split() == ["18", "1001-0"]


def test_replay_group_option_is_checked_before_anything_runs(tmp_path, capsys):
    rc = main(["replay", "--bootstrap", "127.0.0.1:1", "--space", "s.json", "--topology",
               "t.json", "--ops", "o.jsonl", "--out", str(tmp_path / "o"), "--attach",
               "--group", "A-without-equals"])
    assert rc == 2
    assert "--group must be NODE=GROUP, got 'A-without-equals'" in capsys.readouterr().err
