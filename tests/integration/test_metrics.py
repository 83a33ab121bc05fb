"""A node's metrics page over HTTP on a real Kafka, parsed with prometheus_client's parser."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker_node.config import NodeSettings
from broker_node.service import NodeService
from connectors.client import Client
from tests.integration.test_nodes import collect_until
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

SPEC = {"attributes": [
    {"name": "sym", "type": "discrete", "values": ["AAPL", "IBM", "MSFT"]},
    {"name": "price", "type": "numeric", "low": 0, "high": 1000, "granules": 64},
]}
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def page(svc: NodeService) -> Samples:
    url = f"http://127.0.0.1:{svc.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - the node under test
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


@pytest.fixture
def pair(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
         ) -> Iterator[tuple[dict[str, NodeService], Path]]:
    """Nodes A and B, linked, each serving its metrics on a free port."""
    space = tmp_path / "space.json"
    space.write_text(json.dumps(SPEC))
    nodes: dict[str, NodeService] = {}
    threads: list[threading.Thread] = []
    errors: list[BaseException] = []
    for name, other in (("A", "B"), ("B", "A")):
        svc = NodeService(NodeSettings(node=name, neighbours=(other,), space=space,
                                       bootstrap=kafka_bootstrap, topic_prefix=topic_prefix,
                                       metrics_port=0))
        svc.start()
        nodes[name] = svc

        def run(svc: NodeService = svc) -> None:
            try:
                svc.run()
            except BaseException as exc:  # surfaced below
                errors.append(exc)
            finally:
                svc.close()

        threads.append(threading.Thread(target=run, name=f"node-{name}", daemon=True))
        threads[-1].start()
    yield nodes, space
    for svc in nodes.values():
        svc.stop()
    for t in threads:
        t.join(30)
        assert not t.is_alive()
    assert not errors, errors
    assert all(svc.metrics_port is None for svc in nodes.values())  # servers stopped


def test_metrics_page_of_a_node_with_a_neighbour(pair: tuple[dict[str, NodeService], Path],
                                                 kafka_bootstrap: str,
                                                 topic_prefix: str) -> None:
    nodes, space = pair
    alice = Client(kafka_bootstrap, "A", "alice", space, topic_prefix=topic_prefix)
    carol = Client(kafka_bootstrap, "B", "carol", space, topic_prefix=topic_prefix)
    bob = Client(kafka_bootstrap, "B", "bob", space, topic_prefix=topic_prefix)
    alice.subscribe("sym = IBM")
    carol.subscribe("price > 500")
    wait_for(lambda: len(nodes["A"].state.received_from("B")) > 0
             and len(nodes["B"].state.received_from("A")) > 0, what="advertisements")
    event = bob.publish({"sym": "IBM", "price": 12.5})
    last = bob.publish({"sym": "IBM", "price": 12.5})  # read up to it: nothing else came
    bob.flush()
    assert [d.event_id for d in collect_until(alice, last)] == [event]
    a = ("node", "A")
    wait_for(lambda: page(nodes["A"]).get(
        ("dls_client_deliveries_total", (("client", "alice"), a))) == 2,
        what="alice's deliveries counted")
    samples = page(nodes["A"])
    towards_b = (("neighbour", "B"), a)
    assert samples[("dls_ert_fill", towards_b)] > 0  # carol's labels
    assert 0 <= samples[("dls_ert_estimated_fpr", towards_b)] < 1
    assert samples[("dls_subscriptions", (a,))] == 1
    assert samples[("dls_clients", (a,))] == 1
    assert samples[("dls_events_in_total", (a,))] == 2
    assert samples[("dls_deliveries_total", (a,))] == 2
    assert samples[("dls_labels_advertised_total", (a,))] > 0
    # the node finds its clients by the label index: the client bank is not kept, and the
    # page shows it as it is (tests/broker_node/test_router_edge.py: once it is made)
    assert samples[("dls_client_filter_fill", (("client", "alice"), a))] == 0
    for c in (alice, carol, bob):
        c.close()
