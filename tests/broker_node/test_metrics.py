"""The node's metrics page: prometheus_client's format, parsed back (no broker needed)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker_node.metrics import DeliveryTally, Metrics, MetricsServer, node_registry
from broker_node.state import ADVERTISE, BrokerState
from dls.mapping import event_label
from dls.space import ContentSpace

SPEC = {"attributes": [{"name": "x", "type": "numeric", "low": 0, "high": 100,
                        "granules": 8}]}


def _samples(page: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(page) for s in f.samples}


@pytest.fixture
def space(tmp_path: Path) -> ContentSpace:
    path = tmp_path / "space.json"
    path.write_text(json.dumps(SPEC))
    return ContentSpace.from_json(path)


def test_tally_counts_deliveries_per_client() -> None:
    tally = DeliveryTally()
    a = tally.add_plans(np.array([0, 2, 2, 3]), np.array([0, 3, 1]))  # {0,3}, {}, {1}
    assert a == 0
    tally.count(np.array([0, 0, 1, 2]))
    assert tally.totals().tolist() == [2, 1, 0, 2]
    b = tally.add_plans(np.array([0, 1]), np.array([4]))
    assert b == 3
    tally.count(np.array([3, 2]))
    tally.forget(keep_from=b)  # plans 0-2 counted, then dropped; plan 3 is slot 0 now
    tally.count(np.array([0]))
    assert tally.totals().tolist() == [2, 2, 0, 2, 2]
    assert tally.add_plans(np.array([0, 1]), np.array([0])) == 1
    tally.count(np.array([1, 0]))
    assert tally.totals().tolist() == [3, 2, 0, 2, 3]
    c = tally.add_plans(np.array([0, 1]), np.array([2]))
    assert c == 2
    tally.count(np.array([c, 0]))
    tally.release(c)  # plan c used no more: counted, then dropped; plans 0 and 1 stay
    assert tally.add_plans(np.array([0, 1]), np.array([1])) == c  # its slot again
    tally.count(np.array([1, c]))
    assert tally.totals().tolist() == [4, 3, 1, 2, 4]
    tally.forget()
    assert tally.add_plans(np.array([0, 1]), np.array([3])) == 0  # numbered from 0 again
    tally.count(np.array([0]))
    assert tally.totals().tolist() == [4, 3, 1, 3, 4]


def test_the_page_of_a_node_with_neighbours_parses(space: ContentSpace) -> None:
    state = BrokerState.for_space("A", ["B", "C"], space)
    label = event_label(space, {"x": 10})
    state.subscribe("alice", "s1", [label])
    state.on_link("B", ADVERTISE, [label])
    metrics = Metrics(events_in=5, deliveries=3)
    slot = metrics.per_client.add_plans(np.array([0, 1]), np.array([0]))
    metrics.per_client.count(np.array([slot] * 3))
    page = generate_latest(node_registry("A", metrics, state)).decode()
    got = _samples(page)
    node = (("node", "A"),)
    assert got[("dls_events_in_total", node)] == 5
    assert got[("dls_deliveries_total", node)] == 3
    assert got[("dls_subscriptions", node)] == 1
    assert got[("dls_clients", node)] == 1
    assert got[("dls_state_bytes", node)] == state.memory_bytes() > 0
    for n in ("B", "C"):
        for gauge in ("dls_ert_fill", "dls_ert_estimated_fpr"):
            assert (gauge, (("neighbour", n), ("node", "A"))) in got
    assert got[("dls_ert_fill", (("neighbour", "B"), ("node", "A")))] > 0
    assert got[("dls_ert_fill", (("neighbour", "C"), ("node", "A")))] == 0
    assert got[("dls_client_deliveries_total", (("client", "alice"), ("node", "A")))] == 3
    names = {f.name for f in text_string_to_metric_families(page)}
    want = {f"dls_{c}" for c in Metrics().counters()} | {"dls_client_deliveries"}
    assert want <= names  # every counter, named dls_<name>_total on the page


@pytest.mark.parametrize("client_filter", ["cbf", "direct"])
def test_client_filter_fill_comes_from_the_state(space: ContentSpace,
                                                 client_filter: str) -> None:
    state = BrokerState.for_space("A", [], space, client_filter=client_filter)
    base = space.app_prefix
    state.subscribe("alice", "s1", np.array([base, base + 1, base + 2], dtype=np.uint64))
    state.subscribe("bob", "s2", np.array([base + 3], dtype=np.uint64))
    state.client_index("carol")  # known, no subscription: an empty filter
    fill = state.client_fill()
    assert fill.shape == (3,) and fill[2] == 0
    assert fill[0] > fill[1] > 0  # three labels set more than one
    if client_filter == "direct":  # a label is one position of the label space
        assert fill[1] == 1 / space.label_space_size
    got = _samples(generate_latest(node_registry("A", Metrics(), state)).decode())
    for i, name in enumerate(("alice", "bob", "carol")):
        assert got[("dls_client_filter_fill", (("client", name), ("node", "A")))] == fill[i]
    state.unsubscribe("alice", "s1")
    assert state.client_fill()[0] == 0


def test_the_server_serves_its_registry_and_stops(space: ContentSpace) -> None:
    state = BrokerState.for_space("A", ["B"], space)
    registry = node_registry("A", Metrics(batches=2), state)
    with MetricsServer(registry, "127.0.0.1", 0, "A") as server:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - local test server
            page = r.read().decode()
    assert _samples(page)[("dls_batches_total", (("node", "A"),))] == 2
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=2)  # noqa: S310


def test_a_lap_adds_the_seconds_since_to_its_part_of_the_loop(space: ContentSpace) -> None:
    metrics = Metrics()
    t0 = time.perf_counter()
    t1 = metrics.lap("process", t0 - 2.0)  # as if the part began two seconds ago
    assert t1 >= t0 and 2.0 <= metrics.loop_process_seconds < 3.0
    assert metrics.lap("commit", t1) >= t1 and metrics.loop_commit_seconds >= 0
    assert metrics.loop_consume_seconds == metrics.loop_settle_seconds == 0
    page = generate_latest(node_registry("A", metrics, BrokerState.for_space("A", [], space)))
    got = _samples(page.decode())
    assert got[("dls_loop_process_seconds_total", (("node", "A"),))] == (
        metrics.loop_process_seconds)
    with pytest.raises(AttributeError):
        metrics.lap("nap", t1)  # no such part
