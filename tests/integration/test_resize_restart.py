"""Filters that resized themselves survive a restart on a real Kafka.

Node A (its neighbour B does not run: the test writes B's link control) has filters far too
small for what it is given, so it rebuilds them larger while it runs; it is restarted from
its snapshot and must keep the sizes, the state and every route it owes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from broker_node.recovery import read_snapshot, recover
from broker_node.resize import CLIENTS, FilterResizer
from broker_node.service import NodeService
from broker_node.snapshot import state_digest
from connectors.kafka import consumer_config
from dls.space import ContentSpace
from tests.integration.test_recovery import Node, Writer

pytestmark = pytest.mark.integration

TINY = {"attributes": [{"name": "x", "type": "numeric", "low": 0, "high": 100, "granules": 8},
                       {"name": "y", "type": "numeric", "low": 0, "high": 100, "granules": 8}],
        "filters": {"client": {"m": 64, "k": 3}, "routing": {"m": 64, "k": 3}}}


def _tiny_node(bootstrap: str, prefix: str, tmp_path: Path) -> Node:
    # A snapshot after every batch that changed something: the last one covers all.
    # exact delivery off: the client bank routes (with the label index it is not kept)
    node = Node(bootstrap, prefix, tmp_path, snapshot_every_messages=1, exact_delivery=False)
    node.space_path.write_text(json.dumps(TINY))
    node.space = ContentSpace.from_json(node.space_path)
    return node


def _misses(svc: NodeService) -> list[tuple[int, str]]:
    """(label, recipient) the exact tables want and the filters do not route to."""
    state = svc.state
    owed: dict[int, set[str]] = {}
    for sid in state._registry.codes:
        client, labels = state.subscription(sid)
        for label in labels.tolist():
            owed.setdefault(label, set()).add(client)
    for label in state.received_from("B").tolist():
        owed.setdefault(label, set()).add("B")
    out = []
    for label, who in owed.items():
        clients, nodes = state.route_one(label)
        out += [(label, w) for w in sorted(who - set(clients) - set(nodes))]
    return out


def _replayed(node: Node, **kw: object) -> NodeService:
    """The state rebuilt from every control message (no snapshot), with settings ``kw``."""
    s = node.settings(snapshot_every_messages=0, **kw)
    svc = NodeService(s, node.space)
    reader = Consumer(consumer_config(s.bootstrap, s.consumer_group))
    try:
        recover(s, reader, svc.control_topics, svc.state, svc.controls)
    finally:
        reader.close()
    return svc


def test_a_node_restarted_after_its_filters_grew_keeps_their_sizes_and_routes(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    node = _tiny_node(kafka_bootstrap, topic_prefix, tmp_path)
    w = Writer(kafka_bootstrap, topic_prefix, node.space)
    first = node.started()
    for _ in range(4):
        w.subscribe(15)
        w.link("advertise", 10)
        w.flush()
    node.run_until(first, w.written)
    grown = FilterResizer.sizes(first.state)
    assert first.state.resizer.rebuilds.get(CLIENTS, 0) >= 1, grown
    assert first.state.resizer.rebuilds.get("ert:B", 0) >= 1, grown
    assert grown[CLIENTS][0] > 64 and grown["ert:B"][0] > 64
    assert _misses(first) == []
    routes = node.routes(first)
    first.close()

    s = node.settings()
    _, data, why = read_snapshot(s, s.topics().node_snapshot("A"))
    assert data is not None, why
    assert data.filters[CLIENTS][0] > 64  # the snapshot holds the grown sizes
    again = node.started()
    try:
        restored = FilterResizer.sizes(again.state)
        assert sum(data.covered.values()) == w.written  # no tail
        assert restored == grown  # made that size at once, not back to the spec's
        assert again.state.resizer.rebuilds == {}
        assert state_digest(again.state) == state_digest(first.state)
        assert node.routes(again) == routes  # false positives included
        assert _misses(again) == []
    finally:
        again.close()
    # The setting reaches the node: off, the replayed state keeps the spec's sizes.
    fixed = _replayed(node, resize_filters=False)
    assert FilterResizer.sizes(fixed.state) == {CLIENTS: [64, 3], "ert:B": [64, 3]}
    assert state_digest(fixed.state) == state_digest(first.state)
    grows = _replayed(node)
    assert grows.state.resizer.rebuilds.get(CLIENTS, 0) >= 1
    assert _misses(grows) == [] and _misses(fixed) == []
    assert len(grows.state) == len(first.state)
