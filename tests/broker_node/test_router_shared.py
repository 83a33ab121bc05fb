"""How a node groups deliveries for the shared delivery topic (no broker needed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_node.config import NodeSettings
from broker_node.service import NodeService
from connectors.topics import decode_clients, delivery_partition, encode_clients

SPEC = {"attributes": [{"name": "x", "type": "numeric", "low": 0, "high": 100,
                        "granules": 8}]}


def _service(tmp: Path, partitions: int, n_clients: int) -> NodeService:
    space = tmp / "space.json"
    space.write_text(json.dumps(SPEC))
    svc = NodeService(NodeSettings(node="A", space=space,
                                   shared_delivery_partitions=partitions))
    for i in range(n_clients):
        svc.state.client_index(f"client-{i}")
    return svc


@settings(max_examples=60, deadline=None)
@given(partitions=st.integers(1, 9), n_clients=st.integers(1, 40),
       data=st.data())
def test_every_delivery_once_in_its_clients_partition(tmp_path_factory, partitions: int,
                                                      n_clients: int,
                                                      data: st.DataObject) -> None:
    svc = _service(tmp_path_factory.mktemp("s"), partitions, n_clients)
    per_event = data.draw(st.lists(st.sets(st.integers(0, n_clients - 1)), max_size=12))
    offsets = np.zeros(len(per_event) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in per_event], out=offsets[1:])
    clients = np.array([c for cs in per_event for c in sorted(cs)], dtype=np.int64)
    events, parts, named = svc.router.shared_deliveries(offsets, clients)
    assert events == sorted(events)  # batch order
    names = svc.state.clients
    for e, want in enumerate(per_event):
        mine = [(p, v) for ev, p, v in zip(events, parts, named, strict=True) if ev == e]
        assert len({p for p, _ in mine}) == len(mine)  # one message per partition reached
        got: list[str] = []
        for part, value in mine:
            clients_named = decode_clients(value)
            assert value == encode_clients(c for c in value.decode().split(","))
            assert all(delivery_partition(c, partitions) == part for c in clients_named)
            got += sorted(clients_named)
        assert sorted(got) == sorted(names[c] for c in want)  # each exactly once
