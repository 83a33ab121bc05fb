"""Snapshots of a node's state: state -> snapshot -> bytes -> snapshot -> state is the same.

No broker: the control messages are built by hand, as the node reads them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Message
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from broker_node.config import NodeSettings
from broker_node.controls import Controls
from broker_node.exceptions import BrokerError
from broker_node.inbox import Inbox
from broker_node.metrics import Metrics
from broker_node.snapshot import (
    SnapshotData,
    capture,
    decode,
    encode,
    restore,
    state_digest,
    unusable,
)
from broker_node.state import BrokerState
from connectors.serde import (
    encode_label_subscription,
    encode_label_unsubscription,
    encode_link,
)
from connectors.topics import Topics
from dls.predicates import Subscription
from dls.space import ContentSpace

SPEC = {"attributes": [{"name": "x", "type": "numeric", "low": 0, "high": 100, "granules": 4},
                       {"name": "y", "type": "numeric", "low": 0, "high": 100, "granules": 4}]}
T = Topics("dls")
SUB, UNSUB, LINK = T.node_subscribe("A"), T.node_unsubscribe("A"), T.link("B", "A")


class Node:
    """The state and control memory of node A (neighbours B and C), without Kafka."""

    def __init__(self, path: Path, mode: str = "exact") -> None:
        self.space = ContentSpace.from_json(path)
        self.settings = NodeSettings(node="A", neighbours=("B", "C"), space=path, mode=mode)
        self.state = BrokerState.for_space("A", ["B", "C"], self.space, mode=mode)
        metrics = Metrics()
        self.controls = Controls(self.settings, self.state,
                                 Inbox("A", T, self.state, metrics), metrics)
        self.offset = 0

    @property
    def labels(self) -> np.ndarray:
        base = self.space.app_prefix
        return np.arange(base, base + self.space.label_space_size, dtype=np.uint64)

    def apply(self, ops: list[tuple]) -> None:
        """Apply ops (see :func:`ops`) as control messages, one batch per op."""
        for op in ops:
            self.offset += 1
            self.controls.apply([self.message(op)], replay=False)

    def message(self, op: tuple) -> Message:
        kind, ts = op[0], (1, 1000 + self.offset)
        if kind == "sub":
            _, client, sid, picks = op
            value = encode_label_subscription(client, sid, self.labels[list(picks)])
            return Message(topic=SUB, partition=0, offset=self.offset, timestamp=ts,
                           value=value)
        if kind == "subw":  # with its where, as the SDK writes it
            _, client, sid, where = op
            value = encode_label_subscription(
                client, sid, Subscription(self.space, where).labels(), where)
            return Message(topic=SUB, partition=0, offset=self.offset, timestamp=ts,
                           value=value)
        if kind == "unsub":
            _, client, sid = op
            return Message(topic=UNSUB, partition=0, offset=self.offset, timestamp=ts,
                           value=encode_label_unsubscription(client, sid))
        _, link, picks = op
        return Message(topic=LINK, partition=0, offset=self.offset, timestamp=ts,
                       value=encode_link("B", link, self.labels[list(picks)]))

    def routes(self) -> list[tuple[list[str], list[str]]]:
        """Where an event of each label goes, from no one and from each neighbour."""
        out = []
        for label in self.labels.tolist():
            for origin in (None, "B", "C"):
                clients, nodes = self.state.route_one(label, origin_node=origin)
                out.append((sorted(clients), sorted(nodes)))
        return out

    def edge(self) -> list[tuple[int, tuple[float, ...], int]]:
        """The exact check's verdict for each label and client (kind, bounds, sets)."""
        edge = self.controls.edge
        assert edge is not None
        out = []
        for label in self.labels.tolist():
            for v in edge.verdicts(label, ["ann", "bob", "cyd"]):
                rows = [tuple(x if x == x else None for x in r.ravel().tolist())
                        for r in edge.row_bounds(v.rows)]  # NaN (a general row): None
                b = tuple(sorted(rows, key=repr))
                out.append((v.kind, b, len(v.rows)))
        return out

    def memory(self) -> tuple[set[bytes], dict[str, tuple[str, int]]]:
        c = self.controls
        return (set(c.cancelled.old) | set(c.cancelled.new),
                {sid: (p.client, p.timestamp) for sid, p in c.pending.items()})


@pytest.fixture
def space_path(tmp_path: Path) -> Path:
    path = tmp_path / "space.json"
    path.write_text(json.dumps(SPEC))
    return path


IDS = st.sampled_from(["s1", "s2", "s3", "s4", "s5", "s6", "é\u2603", "a\0b", ""])
CLIENTS = st.sampled_from(["ann", "bob", "cyd"])
PICKS = st.sets(st.integers(0, 15), min_size=1, max_size=5).map(sorted)
WHERES = st.sampled_from(["x < 30", "x between 10 and 60 and y > 55", "y >= 50",
                          "x in (5, 50, 77)", "x > 25 and x < 75"])
OPS = st.lists(st.one_of(
    st.tuples(st.just("sub"), CLIENTS, IDS, PICKS),
    st.tuples(st.just("subw"), CLIENTS, IDS, WHERES),
    st.tuples(st.just("unsub"), CLIENTS, IDS),
    st.tuples(st.just("link"), st.sampled_from(["advertise", "withdraw"]), PICKS)),
    max_size=40)


def _round_trip(node: Node, path: Path) -> Node:
    """Node A snapshotted, encoded, decoded and restored into a fresh node."""
    data = capture(node.state, node.controls, group="g", covered={SUB: node.offset})
    again = decode(encode(data))
    fresh = Node(path)
    assert unusable(again, fresh.state, "g") is None
    restore(again, fresh.state, fresh.controls)
    return fresh


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=OPS, after=OPS)
@example(before=[("subw", "ann", "s1", "x < 30"), ("subw", "ann", "s4", "x in (5, 50, 77)"),
                 ("subw", "ann", "s3", "x < 30"), ("subw", "ann", "s2", "x in (5, 50, 77)")],
         after=[])  # general rows restored after a cache of them was made: none is lost
def test_a_restored_state_is_the_state_and_stays_so(space_path: Path, before: list[tuple],
                                                     after: list[tuple]) -> None:
    node = Node(space_path)
    node.apply(before)
    fresh = _round_trip(node, space_path)
    assert state_digest(fresh.state) == state_digest(node.state)
    assert fresh.routes() == node.routes()
    assert fresh.memory()[0] == node.memory()[0]
    assert fresh.memory()[1].keys() == node.memory()[1].keys()
    assert fresh.state.clients == node.state.clients  # the same bank order
    assert fresh.edge() == node.edge()  # the exact check too
    # The memories act the same on what comes next (a reused cancelled id, a subscription
    # that a waiting unsubscription cancels).
    fresh.offset = node.offset
    node.apply(after)
    fresh.apply(after)
    assert state_digest(fresh.state) == state_digest(node.state)
    assert fresh.routes() == node.routes()
    assert fresh.edge() == node.edge()


def test_the_digest_tells_states_apart(space_path: Path) -> None:
    a, b = Node(space_path), Node(space_path)
    a.apply([("sub", "ann", "s1", [1, 2])])
    b.apply([("sub", "ann", "s1", [1, 3])])
    assert state_digest(a.state) != state_digest(b.state)
    b.apply([("unsub", "ann", "s1"), ("sub", "ann", "s2", [1, 2])])
    assert state_digest(a.state) != state_digest(b.state)  # same labels, other id
    a.apply([("link", "advertise", [7])])
    c = Node(space_path)
    c.apply([("sub", "ann", "s1", [1, 2])])
    assert state_digest(a.state) != state_digest(c.state)


def test_the_digest_ignores_the_order_things_happened_in(space_path: Path) -> None:
    ops = [("sub", "ann", "s1", [1, 2]), ("sub", "bob", "s2", [2, 5]),
           ("link", "advertise", [2, 9]), ("sub", "cyd", "s3", [9])]
    a, b = Node(space_path), Node(space_path)
    a.apply(ops)
    b.apply(ops[::-1])
    assert a.state.clients != b.state.clients
    assert state_digest(a.state) == state_digest(b.state)


def test_a_large_snapshot_is_arrays_not_records(space_path: Path) -> None:
    node = Node(space_path)
    n = 20_000
    rng = np.random.default_rng(1)
    labels = node.labels[rng.integers(0, 16, size=3 * n)]
    node.state.subscribe_many([f"c{i % 7}" for i in range(n)], [f"s{i}" for i in range(n)],
                              np.arange(0, 3 * n + 1, 3), labels)
    data = capture(node.state, node.controls, group="g", covered={})
    raw = encode(data)
    # ids, one byte per label (16 labels: narrowed), one byte of length and of client each
    assert len(raw) < 20 * n
    fresh = Node(space_path)
    restore(decode(raw), fresh.state, fresh.controls)
    assert state_digest(fresh.state) == state_digest(node.state)


def test_capture_reads_the_client_names_once(space_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Once per snapshot, not once per subscription: when each read built a tuple of every
    name, a snapshot cost subscriptions x clients."""
    node = Node(space_path)
    node.apply([("subw", c, f"s{i}", "x < 30") for i, c in
                enumerate(["ann", "bob", "cyd"] * 20)])
    assert node.controls.edge is not None  # the exact check's rows are captured too
    reads = []
    names = BrokerState.clients.fget
    assert names is not None
    monkeypatch.setattr(BrokerState, "clients",
                        property(lambda st: reads.append(1) or names(st)))
    data = capture(node.state, node.controls, group="g", covered={})
    assert len(data) == 60 and len(reads) == 1
    fresh = Node(space_path)
    restore(decode(encode(data)), fresh.state, fresh.controls)
    assert fresh.edge() == node.edge()


def test_an_empty_state_round_trips(space_path: Path) -> None:
    node = Node(space_path)
    fresh = _round_trip(node, space_path)
    assert len(fresh.state) == 0 and fresh.state.clients == ()
    assert state_digest(fresh.state) == state_digest(node.state)


def test_a_long_cancelled_key_of_an_older_snapshot_is_known_after_a_restore(
        space_path: Path) -> None:
    """Snapshots taken before routed keys were bounded hold long keys as they were."""
    node = Node(space_path)
    long_id = "s" * 2_000
    node.controls.cancelled.add(b"ann\x00" + long_id.encode())  # as the old code kept it
    fresh = Node(space_path)
    restore(decode(encode(capture(node.state, node.controls, group="g", covered={}))),
            fresh.state, fresh.controls)
    assert ("ann", long_id) in fresh.controls.cancelled
    assert ("ann", "s1") not in fresh.controls.cancelled


def _data(**kw: object) -> SnapshotData:
    base: dict[str, object] = dict(
        node="A", group="g", neighbours=("B", "C"), covered={}, clients=(), sub_ids=[],
        sub_clients=np.zeros(0, np.int64), offsets=np.zeros(1, np.int64),
        labels=np.zeros(0, np.uint64))
    return SnapshotData(**{**base, **kw})  # type: ignore[arg-type]


def test_a_snapshot_that_does_not_fit_the_node_is_not_used(space_path: Path) -> None:
    node = Node(space_path)
    assert unusable(_data(node="Z"), node.state, "g") is not None
    assert unusable(_data(), node.state, "other-group") is not None
    outside = _data(clients=("ann",), sub_ids=["s"], sub_clients=np.zeros(1, np.int64),
                    offsets=np.array([0, 1]), labels=node.labels[-1:] + np.uint64(1))
    assert "outside" in (unusable(outside, node.state, "g") or "")
    node.apply([("sub", "ann", "s1", [1])])
    assert "not empty" in (unusable(_data(), node.state, "g") or "")
    paper = Node(space_path, mode="paper")
    assert "paper" in (unusable(_data(), paper.state, "g") or "")


def test_a_link_state_of_a_former_neighbour_is_dropped(space_path: Path) -> None:
    node = Node(space_path)
    data = _data(received={"Z": node.labels[:2], "B": node.labels[2:4]})
    restore(decode(encode(data)), node.state, node.controls)
    assert node.state.received_from("B").tolist() == node.labels[2:4].tolist()


@pytest.mark.parametrize("cut", [0, 5, 12, -1])
def test_a_cut_or_foreign_stream_is_refused(space_path: Path, cut: int) -> None:
    node = Node(space_path)
    node.apply([("sub", "ann", "s1", [1, 2])])
    raw = encode(capture(node.state, node.controls, group="g", covered={}))
    with pytest.raises(BrokerError) as err:
        decode(raw[:cut] if cut else b"PK\x03\x04" + raw[4:])
    assert err.value.field == "snapshot"


def test_a_waiting_unsubscription_keeps_its_message(space_path: Path) -> None:
    """Its grace may run out after the restart: its dead letter names where it was read."""
    node = Node(space_path)
    msg = Message(topic=UNSUB, partition=0, offset=41, timestamp=(1, 1234),
                  value=encode_label_unsubscription("ann", "late"),
                  headers=[("trace", b"\x00\xff"), ("x", b"")])
    node.controls.apply([msg], replay=False)
    fresh = _round_trip(node, space_path)
    got = fresh.controls.pending["ann", "late"]
    assert (got.client, got.timestamp) == ("ann", 1234)
    assert (got.msg.topic(), got.msg.partition(), got.msg.offset()) == (UNSUB, 0, 41)
    assert got.msg.value() == msg.value() and got.msg.headers() == msg.headers()


def test_the_order_rules_memory_survives_a_restart(space_path: Path) -> None:
    """A cancelled subscription still retiring, and the link numbers applied, come back.

    Without them a restart would either keep the subscription forever (its unsubscription
    lies below the snapshot's offsets) or answer neighbours' acknowledgements from zero.
    """
    node = Node(space_path)
    node.apply([("sub", "ann", "s1", [1, 2]), ("sub", "bob", "s2", [3])])
    node.controls.retire("ann", "s1", 5_000)
    node.controls.progress.on_link_seq("B", 77)
    fresh = _round_trip(node, space_path)
    assert fresh.controls.retiring == {"s1": ("ann", 5_000)}
    assert fresh.controls.progress.applied_seq["B"] == 77
    assert len(fresh.state) == 2
    fresh.controls.progress.publish_caught_up(10.0**9)
    for n in ("B", "C"):
        fresh.controls.progress.on_heartbeat(n, 10**12, 0)
    fresh.controls.finalize()
    assert len(fresh.state) == 1 and fresh.controls.retiring == {}
