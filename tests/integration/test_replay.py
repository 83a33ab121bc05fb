"""The same trace on real Kafka gives simulate's `matched`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlsroute.tools.replay import replay_files
from dlsroute.tools.simulate import simulate_files

pytestmark = pytest.mark.integration

SPACE = {"attributes": [
    {"name": "price", "type": "numeric", "low": 0, "high": 100, "granules": 10},
    {"name": "sym", "type": "discrete", "values": ["A", "B", "C"]}]}
TOPO = {"nodes": ["A", "B", "C"], "links": [["A", "B"], ["B", "C"]]}
OPS = [
    {"op": "subscribe", "node": "A", "client": "c1", "id": "s1", "where": "price < 50"},
    {"op": "subscribe", "node": "C", "client": "c2", "id": "s2", "where": "sym in (B, C)"},
    {"op": "subscribe", "node": "B", "client": "c3", "id": "s3",
     "where": "price between 45 and 55 and sym = A"},
    {"op": "publish", "node": "B", "client": "p", "id": "e1", "attrs": {"price": 47, "sym": "A"}},
    {"op": "publish", "node": "A", "client": "p", "id": "e2", "attrs": {"price": 60, "sym": "C"}},
    {"op": "publish", "node": "C", "client": "c2", "id": "e3",
     "attrs": {"price": 10, "sym": "B"}},
    {"op": "subscribe", "node": "A", "client": "c1", "id": "bad", "where": "price > 500"},
    {"op": "unsubscribe", "node": "A", "client": "c1", "id": "s1"},
    {"op": "publish", "node": "C", "client": "p", "id": "e4", "attrs": {"price": 5, "sym": "A"}},
    {"op": "publish", "node": "C", "client": "p", "id": "e5", "attrs": {"price": 500, "sym": "A"}},
]


def write_inputs(tmp_path: Path) -> tuple[dict[str, Path], Path]:
    """The space, topology and trace files of these tests."""
    paths = {}
    for name, content in (("space.json", SPACE), ("topo.json", TOPO)):
        paths[name] = tmp_path / name
        paths[name].write_text(json.dumps(content))
    ops = tmp_path / "ops.jsonl"
    ops.write_text("\n".join(json.dumps(o) for o in OPS) + "\n")
    return paths, ops


@pytest.mark.parametrize("shared", [0, 2], ids=["topic-per-client", "shared-topic"])
def test_replay_matches_simulate(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path,
                                 shared: int):
    paths, ops = write_inputs(tmp_path)
    sim_out, real_out = tmp_path / "sim.jsonl", tmp_path / "real.jsonl"
    simulate_files(paths["space.json"], paths["topo.json"], ops, sim_out)
    replay_files(kafka_bootstrap, paths["space.json"], paths["topo.json"], ops, real_out,
                 topic_prefix=topic_prefix, shared_delivery_partitions=shared)
    sim = [json.loads(x) for x in sim_out.read_text().splitlines()][:-1]
    real = [json.loads(x) for x in real_out.read_text().splitlines()][:-1]
    assert [r["id"] for r in real] == [r["id"] for r in sim] == ["e1", "e2", "e3", "e4", "e5"]
    assert [r["matched"] for r in real] == [r["matched"] for r in sim], (real, sim)
    assert sim[0]["matched"] == [["A", "c1"], ["B", "c3"]]
    assert "rejected" in real[4] and "rejected" in sim[4]


def test_replay_attached_to_running_nodes(kafka_bootstrap: str, topic_prefix: str,
                                          tmp_path: Path) -> None:
    """Nodes started beforehand (as `dlsroute node` would run them) are only watched."""
    from broker_node.overlay import Topology
    from dls.space import ContentSpace
    from dlsroute.tools.local_network import LocalNetwork

    paths, ops = write_inputs(tmp_path)
    running = LocalNetwork(kafka_bootstrap, topic_prefix, paths["space.json"],
                           ContentSpace.from_spec(SPACE), Topology.from_spec(TOPO),
                           delivery="at_least_once", publish_delay_s=3.0, clock_skew_s=0.2)
    try:
        sim_out, real_out = tmp_path / "sim.jsonl", tmp_path / "real.jsonl"
        simulate_files(paths["space.json"], paths["topo.json"], ops, sim_out)
        replay_files(kafka_bootstrap, paths["space.json"], paths["topo.json"], ops, real_out,
                     topic_prefix=topic_prefix, attach=True, settle_timeout_s=30.0)
        running.check()
    finally:
        running.stop()
    sim = [json.loads(x) for x in sim_out.read_text().splitlines()][:-1]
    real = [json.loads(x) for x in real_out.read_text().splitlines()][:-1]
    assert [r["matched"] for r in real] == [r["matched"] for r in sim], (real, sim)
    assert sim[0]["matched"] == [["A", "c1"], ["B", "c3"]]
