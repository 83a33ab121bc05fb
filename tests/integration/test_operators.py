"""Every operator and attribute type end to end on a real Kafka: delivered equals matched.

Three nodes in a line; clients at C and B subscribe with ``!=``, ``not in``, ``prefix``,
``exists`` / ``missing``, OR, string ranges and hashed values; a publisher at A sends events
drawn around the subscriptions' edges, optional attributes often absent. Each client must
receive exactly the events its subscriptions match (the brute force of
``tests/dls/test_operators.py`` decides). With exact delivery on, no false positive reaches a
client's topic; with it off, the clients' SDK filter still gives exact results.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dls.predicates import Subscription
from tests.dls.test_operators import brute
from tests.integration.test_nodes import Net, settled
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

SPEC = {"attributes": [
    {"name": "price", "type": "numeric", "low": 0, "high": 100, "granules": 8},
    {"name": "sym", "type": "discrete", "values": ["A", "B", "C"], "optional": True},
    {"name": "name", "type": "string", "breakpoints": ["B", "Ga", "N"]},
    {"name": "user", "type": "hashed", "buckets": 5, "optional": True},
]}
SUBS: dict[str, list[Any]] = {
    "carol": [  # at C
        {"any": [[{"attr": "price", "op": "!=", "value": 50},
                  {"attr": "name", "op": "prefix", "value": "G"}],
                 [{"attr": "sym", "op": "missing"}, {"attr": "price", "op": "<", "value": 20}]]},
        [{"attr": "user", "op": "in", "values": ["u1", "u7"]},
         {"attr": "name", "op": "between", "low": "B", "high": "Gz"}],
    ],
    "dave": [  # at B
        [{"attr": "sym", "op": "not in", "values": ["A"]}, {"attr": "user", "op": "exists"},
         {"attr": "price", "op": ">=", "value": 25}],
        [{"attr": "user", "op": "!=", "value": "u2"}, {"attr": "name", "op": ">", "value": "N"}],
    ],
}
AT = {"carol": "C", "dave": "B"}
PRICES = [0, 10, 12.5, 19.9, 20, 25, 37.5, 50, 62.5, 99]
NAMES = ["", "A", "B", "Fz", "G", "Ga", "Gz", "H", "N", "Na", "z"]
USERS = ["u1", "u2", "u7", "x", "never-seen"]


def _events(n: int, seed: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        ev: dict[str, Any] = {"price": rnd.choice(PRICES), "name": rnd.choice(NAMES)}
        if rnd.random() < 0.6:
            ev["sym"] = rnd.choice(["A", "B", "C"])
        if rnd.random() < 0.6:
            ev["user"] = rnd.choice(USERS)
        out.append(ev)
    return out


def _alternatives(where: Any) -> list[list[dict[str, Any]]]:
    return where["any"] if isinstance(where, dict) else [where]


@pytest.fixture(params=[True, False], ids=["exact", "by-label"])
def net(request: pytest.FixtureRequest, kafka_bootstrap: str, topic_prefix: str,
        tmp_path: Path) -> Iterator[Net]:
    space_path = tmp_path / "space.json"
    space_path.write_text(json.dumps(SPEC))
    n = Net(kafka_bootstrap, topic_prefix, space_path, exact_delivery=request.param)
    for name in ("A", "B", "C"):
        n.start(name)
    yield n
    for name in list(n.nodes):
        if n.threads[name].is_alive():
            n.stop(name)
    assert not n.errors, n.errors


def test_every_operator_is_delivered_exactly(net: Net) -> None:
    clients = {cid: net.client(AT[cid], cid) for cid in SUBS}
    for cid, wheres in SUBS.items():
        for where in wheres:
            clients[cid].subscribe(where)
    wait_for(settled(net, "C", 2), what="C's subscriptions")
    wait_for(settled(net, "B", 2), what="B's subscriptions")
    # A must have heard of every label, carol's (via B) as well as dave's
    wanted = set(np.concatenate([Subscription(net.space, w).labels() for ws in SUBS.values()
                                 for w in ws]).tolist())
    wait_for(lambda: wanted <= set(net.nodes["A"].state.received_from("B").tolist()),
             what="A's routes to every subscription")
    bob = net.client("A", "bob")
    events = _events(120, seed=16)
    ids = {bob.publish(ev): ev for ev in events}
    bob.flush()
    exact = net.settings["exact_delivery"]
    for cid, client in clients.items():
        want = sorted(i for i, ev in ids.items()
                      if any(brute(_alternatives(w), ev) for w in SUBS[cid]))
        got = [d for d in client.deliveries(timeout=0.5, max_idle=6.0,
                                            include_false_positives=True)]
        matched = sorted(d.event_id for d in got if d.subscriptions)
        assert matched == want, cid
        assert len(want) >= 10, cid  # the draw exercises the subscriptions
        if exact:
            assert client.false_positives == 0 and len(got) == len(want), cid
        client.close()
    if exact:
        removed = net.nodes["C"].metrics.edge_removed + net.nodes["B"].metrics.edge_removed
        assert removed > 0
    bob.close()
