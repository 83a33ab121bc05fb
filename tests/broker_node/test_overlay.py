import pytest

from broker_node.exceptions import TopologyError
from broker_node.overlay import Overlay, Topology
from dls.space import ContentSpace

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
