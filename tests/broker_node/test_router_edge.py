"""The router's exact check without a broker: cached plans name the edge's rows, and a
row freed and given to another subscription is never read through an old plan.

The producer records what it is given (tests/broker_node/test_router.py's)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker_node.metrics import OTHERS, client_estimated_fpr, node_registry
from broker_node.service import NodeService
from connectors.serde import encode_label_subscription, encode_raw_event
from connectors.topics import (
    HEADER_CLIENTS,
    HEADER_EVENT_ID,
    HEADER_LABEL,
    HEADER_ORIGIN,
    decode_clients,
)
from dls.exact_row import RowLayout
from dls.mapping import event_label
from dls.predicates import Subscription
from dls.space import ContentSpace
from tests.broker_node.test_router import _node

SPEC = {"attributes": [{"name": "x", "type": "numeric", "low": 0, "high": 100,
                        "granules": 8}]}  # cells 12.5 wide


class _Node:
    def __init__(self, tmp_path: Path, cache: float = 1.0, partitions: int = 0,
                 spec: dict[str, Any] | None = None, slices: int = 1) -> None:
        space_file = tmp_path / "space.json"
        space_file.write_text(json.dumps(spec or SPEC))
        self.space = ContentSpace.from_json(space_file)
        self.svc: NodeService = _node(space_file, cache=cache, partitions=partitions,
                                      delivery="exactly_once", index_slices=slices)
        assert self.svc.router.edge is not None
        self.edge = self.svc.router.edge
        self.n = 0

    def subscribe(self, client: str, sid: str, where: str) -> None:
        sub = Subscription(self.space, where)
        self.svc.state.subscribe(client, sid, sub.labels().tolist())
        self.edge.add(client, sid, sub)

    def send_subscription(self, client: str, sid: str, where: str, *, row: bool) -> None:
        """Subscribe as the SDK does: a LabelSubscription on the node's subscribe topic
        (``row``: with the compiled row, as the SDK sends a simple one; else the where
        text alone, which the node reads)."""
        sub = Subscription(self.space, where)
        self.n += 1
        value = encode_label_subscription(client, sid, sub.labels(), str(sub),
                                          RowLayout(self.space).of(sub) if row else None)
        self.svc.process([Message(topic="dls.node.A.subscribe", partition=0, offset=self.n,
                                  value=value)])

    def publish(self, xs: list[Any]) -> list[tuple[str, Any]]:
        """Publish events of these x values (or attributes); the (topic, x) of each
        delivery made (the event's number for events given as attributes)."""
        sent = self.svc.committer.producer.sent  # type: ignore[union-attr]
        start, msgs = len(sent), []
        for x in xs:
            self.n += 1
            attrs = x if isinstance(x, dict) else {"x": x}
            label = event_label(self.space, attrs)
            value = encode_raw_event("A", "pub", f"e{self.n}", attrs)
            msgs.append(Message(topic="dls.node.A.publish", partition=0, offset=self.n,
                                value=value, headers=[
                                    (HEADER_LABEL, label.to_bytes(8, "big")),
                                    (HEADER_ORIGIN, b"A/pub"),
                                    (HEADER_EVENT_ID, b"e%d" % self.n)]))
        self.svc.process(msgs)
        self.svc.router.removed_later.settle()  # as the node's loop does when idle
        value_x = {m.value(): (i if isinstance(x, dict) else x)
                   for i, (m, x) in enumerate(zip(msgs, xs, strict=True))}
        out = []
        for topic, v, headers, _ in sent[start:]:
            if topic == "dls.deliver":  # the shared topic: the clients in a header
                out += [(f"dls.deliver.{c}", value_x[v])
                        for c in decode_clients(dict(headers)[HEADER_CLIENTS])]
            elif topic.startswith("dls.deliver."):
                out.append((topic, value_x[v]))
        return sorted(out)


@settings(max_examples=60, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(ranges=st.lists(st.tuples(st.sampled_from(["ann", "bob", "cy"]),
                                 st.integers(0, 199), st.integers(0, 30)),
                       min_size=1, max_size=8),
       xs=st.lists(st.one_of(st.integers(0, 100).map(float),
                             st.floats(0, 100, allow_nan=False)), min_size=1, max_size=30),
       slices=st.sampled_from([0, 1, 2, 8]), then=st.sampled_from([None, 1, 4]))
def test_a_sliced_index_delivers_what_brute_force_does(tmp_path: Path, ranges, xs,
                                                       slices, then) -> None:
    """Ranges a few slices wide and values on slice and cell edges (cells 12.5 wide, a
    slice 12.5 / ``slices``; 0: as the index chooses): each event goes to exactly the
    clients it matches, before and after the index is sliced ``then`` ways."""
    (here := tmp_path / uuid.uuid4().hex).mkdir()  # one node per example
    node = _Node(here, slices=slices)
    assert node.edge.index is not None
    assert node.edge.index.sliced_column == (0 if slices > 1 else -1)
    for n, (client, lo, width) in enumerate(ranges):
        node.subscribe(client, f"s{n}", f"x between {lo / 2} and {(lo + width) / 2}")
    want = sorted((f"dls.deliver.{c}", x) for x in xs
                  for c in {c for c, lo, w in ranges if lo / 2 <= x <= (lo + w) / 2})
    assert node.publish(xs) == want
    if then and slices != 1:
        node.edge.index.labels.reslice(then)
        assert node.edge.index.sliced_column == (0 if then > 1 else -1)
        assert node.publish(xs) == want


@pytest.mark.parametrize("partitions", [0, 1, 3])
def test_the_router_delivers_exactly_and_checks_a_run_at_once(tmp_path: Path,
                                                             partitions: int) -> None:
    node = _Node(tmp_path, partitions=partitions)
    node.subscribe("ann", "s1", "x between 20 and 60")
    node.subscribe("bob", "s2", "x > 55")
    xs = [19.0, 20.0, 30.0, 55.0, 56.0, 60.0, 61.0, 62.4, 99.0]
    got = node.publish(xs)
    want = sorted([("dls.deliver.ann", x) for x in xs if 20 <= x <= 60]
                  + [("dls.deliver.bob", x) for x in xs if x > 55])
    assert got == want
    m = node.svc.metrics
    # cell 1 (12.5-25): ann cuts it (19 out, 20 in), bob does not hold it; cell 4
    # (50-62.5): ann cuts it (61, 62.4 out), bob cuts it (55 out); 30 and 99 are interior
    assert m.edge_checked == 7 and m.edge_unreadable == 0
    assert m.edge_removed == 1 + 2 + 1
    assert m.deliveries == len(want)
    assert m.per_client.totals().sum() == len(want)
    again = node.publish(xs)  # the same labels: every plan from the cache, same result
    assert again == want
    assert m.route_cache_hits >= len(xs)


def test_a_reused_row_is_never_read_through_an_old_entry(tmp_path: Path) -> None:
    node = _Node(tmp_path)
    node.subscribe("ann", "s1", "x between 20 and 60")
    assert node.publish([61.0]) == []  # cell 4: ann's row is checked, 61 is out
    # ann's row is freed and given to bob's subscription, which holds 61; ann's entries
    # in the index stay (retired) until a compaction: they must deliver nothing
    node.edge.remove("ann", "s1")
    node.edge.add("bob", "s9", Subscription(node.space, "x between 55 and 70"))
    assert node.publish([61.0, 30.0]) == [("dls.deliver.bob", 61.0)]
    node.edge.remove("bob", "s9")
    node.edge.add("ann", "s2", Subscription(node.space, "x between 25 and 35"))
    assert node.publish([61.0, 30.0]) == [("dls.deliver.ann", 30.0)]


def test_an_unreadable_value_goes_by_label_and_is_counted(tmp_path: Path) -> None:
    node = _Node(tmp_path)
    node.subscribe("ann", "s1", "x between 20 and 60")
    label = event_label(node.space, {"x": 61.0})
    sent = node.svc.committer.producer.sent  # type: ignore[union-attr]
    node.svc.process([Message(topic="dls.node.A.publish", partition=0, offset=1,
                              value=b"not a RawEvent", headers=[
                                  (HEADER_LABEL, label.to_bytes(8, "big")),
                                  (HEADER_ORIGIN, b"A/pub"), (HEADER_EVENT_ID, b"e1")])])
    assert [t for t, *_ in sent] == ["dls.deliver.ann"]
    assert node.svc.metrics.edge_unreadable == 1


def _page(svc: NodeService) -> dict[tuple[str, str], float]:
    """The node's metrics page, parsed: (sample name, client) -> value."""
    page = generate_latest(svc.registry).decode()
    return {(s.name, s.labels.get("client", "")): s.value
            for f in text_string_to_metric_families(page) for s in f.samples}


def test_the_page_shows_per_client_deliveries_removals_and_filter_rates(
        tmp_path: Path) -> None:
    node = _Node(tmp_path)
    node.subscribe("ann", "s1", "x between 20 and 60")
    node.subscribe("bob", "s2", "x > 55")
    # cy is routed by cell 7 (its labels) but its subscription does not hold it: the
    # index lists it under none of its labels, so 95 is not even a candidate for it
    high = Subscription(node.space, "x > 90").labels()
    node.svc.state.subscribe("cy", "s3", high.tolist())
    node.edge.add("cy", "s3", Subscription(node.space, "x < 10"), high)
    xs = [19.0, 20.0, 30.0, 55.0, 56.0, 61.0, 95.0]
    for _ in range(2):  # the second time from cached plans: counted per use
        node.publish(xs)
    got = _page(node.svc)
    # per round: ann gets 20, 30, 55, 56 and loses 19, 61; bob gets 56, 61, 95 and loses
    # 55; cy neither gets nor loses anything
    assert got[("dls_client_deliveries_total", "ann")] == 2 * 4
    assert got[("dls_client_edge_removed_total", "ann")] == 2 * 2
    assert got[("dls_client_deliveries_total", "bob")] == 2 * 3
    assert got[("dls_client_edge_removed_total", "bob")] == 2 * 1
    assert got[("dls_client_deliveries_total", "cy")] == 0
    assert got[("dls_client_edge_removed_total", "cy")] == 0
    assert got[("dls_edge_removed_total", "")] == 2 * 3
    assert ("dls_client_deliveries_total", OTHERS) not in got  # three clients: all shown
    # the index found the clients: the client bank was not kept, and the page shows it as
    # it is (empty) rather than make it for a scrape
    state = node.svc.state
    assert not state.client_fill().any()
    assert got[("dls_client_filter_estimated_fpr", "ann")] == 0
    state.defer_client_bank(False)
    state.route(np.array([0], dtype=np.uint64))  # a route by the bank: made from the registry
    got, fill, k = _page(node.svc), state.client_fill(), state.config.client_k
    for i, name in enumerate(state.clients):
        assert got[("dls_client_filter_estimated_fpr", name)] == fill[i] ** k > 0


def test_clients_past_the_bound_share_one_series(tmp_path: Path) -> None:
    node = _Node(tmp_path)
    for c in ("ann", "bob", "cy", "dee"):
        node.subscribe(c, f"{c}1", "x between 20 and 60")
    node.subscribe("bob", "bob2", "x > 0")
    node.publish([19.0, 30.0, 61.0])  # ann, cy, dee: 1 each and 2 removed; bob: 3
    page = generate_latest(node_registry("A", node.svc.metrics, node.svc.state,
                                         client_series=2)).decode()
    got = {(s.name, s.labels["client"]): s.value
           for f in text_string_to_metric_families(page) for s in f.samples
           if "client" in s.labels}
    # the busiest two: bob (3 + 0), then ann (1 + 2; the first known of the ties)
    shown = {c for (_, c) in got}
    assert shown == {"ann", "bob", OTHERS}
    assert got[("dls_client_deliveries_total", OTHERS)] == 2
    assert got[("dls_client_edge_removed_total", OTHERS)] == 4
    fpr = client_estimated_fpr(node.svc.state, node.svc.state.client_fill())
    assert got[("dls_client_filter_estimated_fpr", OTHERS)] == max(fpr[2], fpr[3])


OPS_SPEC = {"attributes": [
    {"name": "x", "type": "numeric", "low": 0, "high": 100, "granules": 8},
    {"name": "q", "type": "numeric", "low": 0, "high": 10, "granules": 2, "optional": True},
    {"name": "sym", "type": "string", "breakpoints": ["G", "N", "T"]},
    {"name": "user", "type": "hashed", "buckets": 4, "optional": True}]}


@pytest.mark.parametrize("partitions", [0, 3])
def test_every_operator_through_the_router(tmp_path: Path, partitions: int) -> None:
    """General rows (OR, prefix, !=, exists/missing, hashed) beside a simple one."""
    node = _Node(tmp_path, partitions=partitions, spec=OPS_SPEC)
    wheres = {"ann": 'sym prefix "GO" or (x > 30 and q missing)',
              "bob": 'user != alice and x between 20 and 60 and sym >= "N"',
              "cy": "q exists and x not in (50, 51)", "dee": "x between 20 and 60"}
    for c, w in wheres.items():
        node.subscribe(c, f"{c}1", w)
    events = [{"x": 31.0, "sym": "GOLD"}, {"x": 31.0, "sym": "GA", "q": 1.0},
              {"x": 12.0, "sym": "GOA", "user": "bob"}, {"x": 50.0, "sym": "NZ", "q": 3.0},
              {"x": 51.5, "sym": "Q", "user": "alice", "q": 9.0}, {"x": 19.9, "sym": "N"},
              {"x": 60.0, "sym": "Z", "user": "carol"}, {"x": 99.0, "sym": "", "q": 0.0}]
    subs = {c: Subscription(node.space, w) for c, w in wheres.items()}
    want = sorted((f"dls.deliver.{c}", i) for i, e in enumerate(events)
                  for c, sub in subs.items() if sub.matches(e))
    assert node.publish(events) == want
    assert node.svc.metrics.edge_unreadable == 0
    assert node.svc.metrics.edge_removed > 0
