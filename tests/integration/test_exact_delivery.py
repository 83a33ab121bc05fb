"""Exact delivery at the client's node, on a real Kafka: the edge removes the network's
false positives before they are written, on both delivery layouts; off, they reach the
client (the paper's behaviour), which shows the test can fail."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from connectors.client import Client
from tests.integration.test_nodes import SHARED_PARTITIONS, Net, _net, collect_until, settled
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

# price cells are 1000/64 = 15.625 wide: 25 and 55 cut cells 1 and 3; cell 2 is interior
WHERE = "sym = IBM and price between 25 and 55"
EVENTS = [("IBM", 20.0), ("IBM", 24.9), ("IBM", 25.0), ("IBM", 40.0), ("IBM", 55.0),
          ("IBM", 55.1), ("IBM", 62.0), ("AAPL", 40.0), ("IBM", 500.0)]


# a general row at the edge (OR, !=): 40 is excluded, 500 matches by the second alternative
WHERE_ANY = "(sym = IBM and price between 25 and 55 and price != 40) or price > 499"


def _matches(sym: str, price: float) -> bool:
    return sym == "IBM" and 25 <= price <= 55


def _matches_any(sym: str, price: float) -> bool:
    return (_matches(sym, price) and price != 40) or price > 499


# Published last by every test, in a cell the edge checks (cut at 25) and a match of both
# wheres: the node writes a run's checked events after its others and keeps the order of
# events otherwise, and every topic on the way has one partition, so once it is delivered
# everything published before it has been delivered or dropped for good.
LAST = ("IBM", 30.0)


def _until(client: Client, last: str) -> list[str]:
    """Ids delivered to ``client`` (false positives too) before ``last``, which must come."""
    return [d.event_id for d in collect_until(client, last, include_false_positives=True)]


def _run(net: Net, where: str = WHERE, matches: Any = _matches) -> tuple[list[str], int, int]:
    """alice at C subscribes; bob at A publishes EVENTS; what reaches alice's topic."""
    alice = net.client("C", "alice")
    bob = net.client("A", "bob")
    alice.subscribe(where)
    wait_for(settled(net, "C", 1), what="C's subscription")
    wait_for(lambda: len(net.nodes["A"].state.received_from("B")) > 0, what="A's routes")
    ids = {bob.publish({"sym": s, "price": p}): (s, p) for s, p in EVENTS}
    last = bob.publish(dict(zip(("sym", "price"), LAST, strict=True)))
    bob.flush()
    want = sorted(i for i, e in ids.items() if matches(*e))
    got = _until(alice, last)
    fp = alice.false_positives
    alice.close()
    bob.close()
    return sorted(set(got) & set(want)), len(got), fp


@pytest.fixture(params=["topics", "shared"])
def layout(request: pytest.FixtureRequest) -> dict[str, object]:
    if request.param == "shared":
        return {"delivery": "at_least_once", "shared_delivery_partitions": SHARED_PARTITIONS}
    return {}


@pytest.fixture
def exact(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path,
          layout: dict[str, object]) -> Iterator[Net]:
    yield from _net(kafka_bootstrap, topic_prefix, tmp_path, ("A", "B", "C"), **layout)


@pytest.fixture
def by_label(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> Iterator[Net]:
    yield from _net(kafka_bootstrap, topic_prefix, tmp_path, ("A", "B", "C"),
                    exact_delivery=False)


def test_the_clients_node_delivers_exactly_its_matches(exact: Net) -> None:
    matched, delivered, fp = _run(exact)
    assert len(matched) == sum(_matches(*e) for e in EVENTS) == 3
    assert (delivered, fp) == (3, 0)
    c = exact.nodes["C"].metrics
    assert c.edge_removed >= 4  # 20, 24.9, 55.1, 62.0 share alice's boundary cells
    assert c.edge_checked >= 6 and c.edge_unreadable == 0
    assert exact.nodes["A"].metrics.edge_checked == 0  # a transit node reads no value
    # the metrics page says the same, per client (the only client at C is alice)
    page = generate_latest(exact.nodes["C"].registry).decode()
    got = {(s.name, s.labels.get("client")): s.value
           for f in text_string_to_metric_families(page) for s in f.samples}
    assert got[("dls_client_deliveries_total", "alice")] == 3 + 1  # and the last one
    assert got[("dls_client_edge_removed_total", "alice")] == c.edge_removed
    # found by the label index: the client bank is not kept, its estimate is that of nothing
    assert got[("dls_client_filter_estimated_fpr", "alice")] == 0


def test_without_the_check_the_filters_false_positives_reach_the_client(
        by_label: Net) -> None:
    matched, delivered, fp = _run(by_label)
    assert len(matched) == 3
    assert fp >= 4 and delivered == 3 + fp


def test_a_subscription_without_a_where_is_delivered_by_label(exact: Net) -> None:
    """A raw writer may send labels alone: the edge cannot check them, so it does not."""
    from confluent_kafka import Producer

    from connectors.serde.messages import encode_label_subscription
    from connectors.topics import Topics
    from dls.predicates import Subscription

    writer = Producer({"bootstrap.servers": exact.bootstrap})
    labels = Subscription(exact.space, WHERE).labels()
    writer.produce(Topics(exact.prefix).node_subscribe("C"),
                   encode_label_subscription("carol", "raw-1", labels))
    writer.flush(10)
    carol = exact.client("C", "carol")
    bob = exact.client("A", "bob")
    wait_for(settled(exact, "C", 1), what="carol's labels")
    wait_for(lambda: len(exact.nodes["A"].state.received_from("B")) > 0, what="A's routes")
    outside = bob.publish({"sym": "IBM", "price": 20.0})  # alice's boundary cell, no match
    last = bob.publish(dict(zip(("sym", "price"), LAST, strict=True)))
    bob.flush()
    assert _until(carol, last) == [outside]
    assert exact.nodes["C"].metrics.edge_unchecked == 1  # carol's one subscription
    carol.close()
    bob.close()


def test_a_general_subscription_is_checked_exactly_too(exact: Net) -> None:
    matched, delivered, fp = _run(exact, WHERE_ANY, _matches_any)
    assert len(matched) == sum(_matches_any(*e) for e in EVENTS) == 3
    assert (delivered, fp) == (3, 0)
    c = exact.nodes["C"].metrics
    assert c.edge_removed >= 5 and c.edge_unchecked == 0
