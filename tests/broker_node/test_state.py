import numpy as np
import pytest

from broker_node.exceptions import (
    BrokerError,
    DuplicateSubscriptionError,
    SubscriptionOwnerError,
    UnknownNeighbourError,
    UnknownSubscriptionError,
)
from broker_node.state import BrokerState
from dls.exceptions import IdIndexError
from dls.space import ContentSpace

SPACE = ContentSpace.from_spec({"attributes": [
    {"name": "x", "type": "numeric", "low": 0, "high": 256, "granules": 256}]})


def labels(*xs):
    return np.array(xs, dtype=np.uint64)


def adv(msgs):
    return {(m.to, m.kind): m.labels.tolist() for m in msgs}


@pytest.fixture(params=[{}, {"client_filter": "direct", "routing_filter": "direct"}])
def node(request):
    return BrokerState.for_space("B", ["A", "C"], SPACE, **request.param)


def test_first_subscription_is_advertised_to_every_neighbour(node):
    out = node.subscribe("c1", "s1", labels(3, 1, 2, 2))
    assert adv(out) == {("A", "advertise"): [1, 2, 3], ("C", "advertise"): [1, 2, 3]}
    assert node.subscription("s1")[1].tolist() == [1, 2, 3]


def test_clients_are_one_tuple_until_another_client_comes(node):
    assert node.clients == ()
    node.subscribe("c1", "s1", labels(1))
    node.client_index("c2")
    first = node.clients
    assert first == ("c1", "c2") and node.clients is first  # read again: not rebuilt
    node.subscribe("c1", "s2", labels(2))  # a known client changes nothing
    assert node.clients is first
    node.subscribe("c3", "s3", labels(3))
    assert node.clients == ("c1", "c2", "c3") and first == ("c1", "c2")


def test_room_made_ahead_changes_no_answer(node):
    node.expect_subscriptions(3)
    node.subscribe("c1", "s1", labels(1, 2))
    node.expect_subscriptions(0)
    assert node.subscription("s1")[1].tolist() == [1, 2]
    with pytest.raises(IdIndexError, match="expect: n must be a non-negative int, got -1"):
        node.expect_subscriptions(-1)
    assert len(node) == 1


def test_second_subscription_advertises_only_new_labels(node):
    node.subscribe("c1", "s1", labels(1, 2))
    out = node.subscribe("c2", "s2", labels(2, 3))
    assert adv(out) == {("A", "advertise"): [3], ("C", "advertise"): [3]}


def test_unsubscribe_withdraws_only_labels_nobody_else_holds(node):
    node.subscribe("c1", "s1", labels(1, 2))
    node.subscribe("c2", "s2", labels(2, 3))
    out = node.unsubscribe("c1", "s1")
    assert adv(out) == {("A", "withdraw"): [1], ("C", "withdraw"): [1]}
    assert node.unsubscribe("c2", "s2") and len(node) == 0


def test_neighbour_advertisement_is_forwarded_to_the_others_only(node):
    out = node.on_link("A", "advertise", labels(5, 6))
    assert adv(out) == {("C", "advertise"): [5, 6]}
    # A local subscription on 5 now goes to A only: C already has it.
    out = node.subscribe("c1", "s1", labels(5))
    assert adv(out) == {("A", "advertise"): [5]}
    # Withdrawal from A: C still needs 5 (local), loses 6.
    out = node.on_link("A", "withdraw", labels(5, 6))
    assert adv(out) == {("C", "withdraw"): [6]}


def test_link_replays_are_ignored(node):
    node.on_link("A", "advertise", labels(5))
    assert node.on_link("A", "advertise", labels(5)) == []
    assert node.on_link("A", "withdraw", labels(9)) == []
    node.on_link("A", "withdraw", labels(5))
    assert node.on_link("A", "withdraw", labels(5)) == []


def test_route_excludes_origin_client_and_neighbour(node):
    node.subscribe("c1", "s1", labels(7))
    node.subscribe("c2", "s2", labels(7))
    node.on_link("A", "advertise", labels(7))
    node.on_link("C", "advertise", labels(8))
    clients, nbrs = node.route_one(7, origin_client="c1")
    assert clients == ["c2"] and nbrs == ["A"]
    clients, nbrs = node.route_one(7, origin_node="A")
    assert clients == ["c1", "c2"] and nbrs == []
    clients, nbrs = node.route_one(8, origin_node="A")
    assert clients == [] and nbrs == ["C"]


def test_batched_route_matches_route_one(node):
    rng = np.random.default_rng(0)
    for i in range(30):
        node.subscribe(f"c{i % 7}", f"s{i}", rng.integers(0, 256, 5).astype(np.uint64))
    node.on_link("A", "advertise", rng.integers(0, 256, 40).astype(np.uint64))
    ev = rng.integers(0, 256, 200).astype(np.uint64)
    r = node.route(ev)
    for e in range(len(ev)):
        clients, nbrs = node.route_one(int(ev[e]))
        assert [node.client_name(i) for i in r.clients_of(e).tolist()] == clients
        assert r.neighbours_of(e) == nbrs


@pytest.mark.parametrize("config", [{}, {"mode": "paper"},
                                    {"client_filter": "direct", "routing_filter": "direct"}])
def test_large_batch_route_with_origins_matches_route_one(config):
    """Batches big enough to skip an empty ERT by a scan, and to decode clients in several
    blocks, route as one event at a time does (which probes every filter)."""
    node = BrokerState.for_space("B", ["A", "C", "D"], SPACE, **config)
    rng = np.random.default_rng(1)
    for i in range(300):
        node.subscribe(f"c{i % 90}", f"s{i}", rng.integers(0, 256, 4).astype(np.uint64))
    node.on_link("A", "advertise", rng.integers(0, 256, 60).astype(np.uint64))
    node.on_link("D", "advertise", rng.integers(0, 256, 3).astype(np.uint64))
    n = 6000
    ev = rng.integers(0, 256, n).astype(np.uint64)
    oc = rng.integers(-1, 90, n)
    on = rng.integers(-1, 3, n)
    r = node.route(ev, oc, on)
    names = ["A", "C", "D"]
    for e in range(0, n, 7):
        clients, nbrs = node.route_one(
            int(ev[e]), origin_client=None if oc[e] < 0 else f"c{oc[e]}",
            origin_node=None if on[e] < 0 else names[on[e]])
        assert [node.client_name(i) for i in r.clients_of(e).tolist()] == clients
        assert r.neighbours_of(e) == nbrs
    assert not r.neighbours[:, 1].any()  # C advertised nothing


def test_repeated_identical_subscription_is_a_noop(node):
    node.subscribe("c1", "s1", labels(1, 2))
    assert node.subscribe("c1", "s1", labels(2, 1)) == []
    assert len(node) == 1


@pytest.mark.parametrize("client, labs, exc", [
    ("c1", (1, 3), DuplicateSubscriptionError),
    ("c2", (1, 2), DuplicateSubscriptionError),
])
def test_reused_id_with_other_content_is_refused(node, client, labs, exc):
    node.subscribe("c1", "s1", labels(1, 2))
    with pytest.raises(exc, match="'s1'"):
        node.subscribe(client, "s1", labels(*labs))


def test_bad_batch_changes_nothing(node):
    node.subscribe("c1", "s1", labels(1))
    before = node.stats()
    with pytest.raises(DuplicateSubscriptionError):
        node.subscribe_many(["c1", "c1"], ["s2", "s1"], [0, 1, 2], labels(4, 9))
    with pytest.raises(BrokerError, match="outside this node's label space"):
        node.subscribe_many(["c1"], ["s3"], [0, 2], labels(4, 1 << 20))
    with pytest.raises(BrokerError, match="has no labels"):
        node.subscribe_many(["c1", "c1"], ["s3", "s4"], [0, 1, 1], labels(4))
    assert node.stats() == before
    assert node.route_one(4) == ([], [])


def test_a_batch_with_a_replay_keeps_the_old_subscription_and_adds_the_new_ones(node):
    node.subscribe("c1", "s1", labels(1, 2))
    node.subscribe_many(["c2", "c1", "c3"], ["s2", "s1", "s3"], [0, 1, 3, 4],
                        labels(5, 2, 1, 7))
    assert len(node) == 3
    assert node.subscription("s1")[0] == "c1"
    assert node.subscription("s1")[1].tolist() == labels(1, 2).tolist()
    assert node.subscription("s2")[0] == "c2" and node.subscription("s3")[0] == "c3"
    assert node.subscription("s3")[1].tolist() == labels(7).tolist()
    node.unsubscribe_many(["c1", "c3", "c2"], ["s1", "s3", "s2"])
    assert len(node) == 0 and node._registry.batches == {}
    node.subscribe_many(["c1", "c1"], ["s1", "s2"], [0, 1, 2], labels(1, 2))  # ids free again
    assert len(node) == 2


def test_unknown_or_foreign_unsubscription_is_refused_and_changes_nothing(node):
    node.subscribe("c1", "s1", labels(1))
    with pytest.raises(UnknownSubscriptionError, match="'nope'"):
        node.unsubscribe("c1", "nope")
    with pytest.raises(SubscriptionOwnerError, match="belongs to client 'c1', not 'c2'"):
        node.unsubscribe("c2", "s1")
    with pytest.raises(UnknownSubscriptionError):
        node.unsubscribe_many(["c1", "c1"], ["s1", "nope"])
    assert len(node) == 1 and node.route_one(1) == (["c1"], [])


def test_unknown_neighbour(node):
    with pytest.raises(UnknownNeighbourError):
        node.on_link("Z", "advertise", labels(1))


def test_bulk_equals_one_by_one():
    rng = np.random.default_rng(3)
    subs = [rng.integers(0, 256, rng.integers(1, 6)).astype(np.uint64) for _ in range(200)]
    a = BrokerState.for_space("B", ["A"], SPACE)
    b = BrokerState.for_space("B", ["A"], SPACE)
    bulk = BrokerState.for_space("B", ["A"], SPACE)
    for i, s in enumerate(subs):
        a.subscribe(f"c{i % 9}", f"s{i}", s)
    offsets = np.cumsum([0] + [len(s) for s in subs])
    bulk.subscribe_many([f"c{i % 9}" for i in range(200)], [f"s{i}" for i in range(200)],
                        offsets, np.concatenate(subs))
    assert a.advertised_to("A").tolist() == bulk.advertised_to("A").tolist()
    ids = [f"s{i}" for i in range(0, 200, 3)]
    for sid in ids:
        a.unsubscribe(a.subscription(sid)[0], sid)
    bulk.unsubscribe_many([bulk.subscription(s)[0] for s in ids], ids)
    assert a.advertised_to("A").tolist() == bulk.advertised_to("A").tolist()
    ev = np.arange(256, dtype=np.uint64)
    ra, rb = a.route(ev), bulk.route(ev)
    assert ra.offsets.tolist() == rb.offsets.tolist()
    assert ra.clients.tolist() == rb.clients.tolist()
    del b


def test_sparse_tables_without_a_known_space():
    node = BrokerState("B", ["A"])
    out = node.subscribe("c", "s", labels(2**63 + 5, 7))
    assert adv(out) == {("A", "advertise"): [7, 2**63 + 5]}
    assert node.route_one(2**63 + 5) == (["c"], [])
    assert adv(node.unsubscribe("c", "s")) == {("A", "withdraw"): [7, 2**63 + 5]}


def test_labels_of_another_space_match_nothing(node):
    node.subscribe("c1", "s1", labels(7))
    node.on_link("A", "advertise", labels(7))
    r = node.route(labels(7, 1 << 40, 7))
    assert [r.clients_of(e).tolist() for e in range(3)] == [[0], [], [0]]
    assert r.neighbours.tolist() == [[True, False], [False, False], [True, False]]


@pytest.mark.parametrize("config", [{}, {"client_filter": "direct", "routing_filter": "direct"}])
def test_app_id_space_uses_offset_tables(config):
    space = ContentSpace.from_spec({"attributes": SPACE.to_spec()["attributes"], "app_id": 9})
    node = BrokerState.for_space("B", ["A"], space, **config)
    base = space.app_prefix
    node.subscribe("c1", "s1", labels(base + 3))
    assert node.route_one(base + 3) == (["c1"], [])
    assert node.route_one(3) == ([], [])
