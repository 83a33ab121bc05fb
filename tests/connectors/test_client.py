"""``Client`` construction; no broker needed (Kafka clients connect lazily)."""

from __future__ import annotations

from connectors.client import Client
from dls.space import ContentSpace

SPEC = {"attributes": [{"name": "price", "type": "numeric", "low": 0, "high": 100,
                        "granules": 8}]}


def test_the_consumer_group_is_per_client_and_network() -> None:
    space = ContentSpace.from_spec(SPEC)
    default = Client("127.0.0.1:1", "A", "alice", space)
    other = Client("127.0.0.1:1", "A", "alice", space, topic_prefix="t1")
    given = Client("127.0.0.1:1", "A", "alice", space, topic_prefix="t1", group_id="mine")
    try:
        assert default._group == "dls-sdk-alice"  # unchanged for the default network
        assert other._group == "t1-sdk-alice"
        assert given._group == "mine"
    finally:
        for c in (default, other, given):
            c.close()
