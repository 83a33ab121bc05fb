"""How far a node has read its inputs, as its loop asks the broker (no broker: fakes)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message, TopicPartition

from broker_node.config import NodeSettings
from broker_node.service import NodeService
from connectors.serde import encode_label_unsubscription
from connectors.topics import Topics

SPEC = {"attributes": [{"name": "x", "type": "numeric", "low": 0, "high": 100,
                        "granules": 8}]}
T = Topics("dls")


class NodeConsumer:
    """The node's consumer: positions only. It always has a long-poll fetch in flight, so
    a question about where a topic ends would wait behind it (the broker answers one
    request of a connection at a time)."""

    def __init__(self, positions: dict[str, int]) -> None:
        self.positions = positions

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, 0, self.positions[tp.topic]) for tp in tps]

    def committed(self, tps: list[TopicPartition], timeout: float = 0) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, 0, -1001) for tp in tps]

    def get_watermark_offsets(self, *a: Any, **k: Any) -> tuple[int, int]:
        raise AssertionError("asked behind the node consumer's fetch")


class Ends:
    """The end reader: a consumer that never fetches."""

    def __init__(self, high: dict[str, int]) -> None:
        self.high = high
        self.asked: list[str] = []

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = 0,
                              cached: bool = False) -> tuple[int, int]:
        assert not cached  # the broker's end now, not the last fetch's
        self.asked.append(tp.topic)
        return 0, self.high[tp.topic]


@pytest.fixture
def svc(tmp_path: Path) -> NodeService:
    path = tmp_path / "space.json"
    path.write_text(json.dumps(SPEC))
    return NodeService(NodeSettings(node="A", neighbours=("B",), space=path,
                                    unsubscribe_grace_s=0))


def test_where_the_publish_topic_ends_is_asked_beside_the_fetch_not_behind_it(
        svc: NodeService) -> None:
    """Regression: the node asked its own consumer, whose long-poll fetch the question
    waited behind (up to fetch.wait.max.ms, every heartbeat_s while watermarks were
    wanted): the loop, and every delivery, stalled for it."""
    publish = T.node_publish("A")
    ends = Ends({publish: 40})
    svc._ends = ends  # type: ignore[assignment]  # noqa: SLF001
    svc.progress.local_want = True  # a cancelled subscription retires: watermarks wanted
    before = time.time()
    svc._check_inputs_read(NodeConsumer({publish: 39}))  # type: ignore[arg-type]  # noqa: SLF001
    assert ends.asked == [publish] and svc.progress.publish_passed == 0  # one short
    svc._next_check = 0.0  # noqa: SLF001
    svc._check_inputs_read(NodeConsumer({publish: 40}))  # type: ignore[arg-type]  # noqa: SLF001
    assert svc.progress.publish_passed >= int(before * 1000) - svc.progress.slack_ms


def test_an_overdue_unknown_cancellation_waits_until_the_subscribe_topic_is_read(
        svc: NodeService) -> None:
    subscribe = T.node_subscribe("A")
    ends = Ends({subscribe: 9_000})
    svc._ends = ends  # type: ignore[assignment]  # noqa: SLF001
    svc.controls.apply([Message(topic=T.node_unsubscribe("A"), partition=0, offset=0,
                                timestamp=(1, 5), value=encode_label_unsubscription("c", "s"))],
                       replay=False)
    svc._check_inputs_read(NodeConsumer({subscribe: 200}))  # type: ignore[arg-type]  # noqa: SLF001
    assert ends.asked == [subscribe]  # only while one is overdue; no watermark is wanted
    assert svc.controls.expired() == []  # its subscription may be in the backlog
    svc._next_check = 0.0  # noqa: SLF001
    svc._check_inputs_read(NodeConsumer({subscribe: 9_000}))  # type: ignore[arg-type]  # noqa: SLF001
    assert [d.value for d in svc.controls.expired()] == ["s"]
    svc._next_check = 0.0  # noqa: SLF001
    svc._check_inputs_read(NodeConsumer({subscribe: 9_000}))  # type: ignore[arg-type]  # noqa: SLF001
    assert ends.asked == [subscribe] * 2  # nothing waits: not asked again


def test_a_steady_stream_moves_the_watermark_though_the_end_is_never_reached(
        svc: NodeService) -> None:
    """Regression: only a position exactly at the end counted, seldom true while events
    keep coming, so a busy node's cancelled subscriptions stayed (retiring) for good."""
    publish = T.node_publish("A")
    ends = Ends({publish: 100})
    svc._ends = ends  # type: ignore[assignment]  # noqa: SLF001
    svc.progress.local_want = True
    first = time.time()
    svc._check_inputs_read(NodeConsumer({publish: 90}))  # type: ignore[arg-type]  # noqa: SLF001
    assert svc.progress.publish_passed == 0
    time.sleep(0.01)
    ends.high[publish] = 200  # more came meanwhile; the node read past the first end
    svc._next_check = 0.0  # noqa: SLF001
    svc._check_inputs_read(NodeConsumer({publish: 150}))  # type: ignore[arg-type]  # noqa: SLF001
    passed = svc.progress.publish_passed
    assert int(first * 1000) - svc.progress.slack_ms <= passed  # the first check's time
    assert passed <= int(time.time() * 1000) - svc.progress.slack_ms
    time.sleep(0.01)
    ends.high[publish] = 300
    svc._next_check = 0.0  # noqa: SLF001
    svc._check_inputs_read(NodeConsumer({publish: 250}))  # type: ignore[arg-type]  # noqa: SLF001
    assert svc.progress.publish_passed > passed  # the second one's


class Listing(Ends):
    """The end reader of a node with clients' own topics: it also lists the topics."""

    def list_topics(self, timeout: float = 0) -> Any:
        return type("Meta", (), {"topics": dict.fromkeys(self.high)})()


def test_a_clients_publish_topic_not_read_yet_holds_the_watermark_back(tmp_path: Path) -> None:
    """A client's topic made a moment ago is not assigned to the node's consumer yet; its
    events published before a cancellation must still find the cancelled subscription."""
    path = tmp_path / "space.json"
    path.write_text(json.dumps(SPEC))
    svc = NodeService(NodeSettings(node="A", neighbours=("B",), space=path,
                                   client_inputs=True))
    publish, own = T.node_publish("A"), T.client_input("A", "bob", "publish")
    other = T.client_input("B", "bob", "publish")  # another node's: not waited for
    ends = Listing({publish: 5, own: 3, other: 9})
    svc._ends = ends  # type: ignore[assignment]  # noqa: SLF001
    svc.progress.local_want = True
    consumer = NodeConsumer({publish: 5, own: -1001})  # bob's topic: not read, none committed
    svc._check_inputs_read(consumer)  # type: ignore[arg-type]  # noqa: SLF001
    assert sorted(ends.asked) == sorted([publish, own])
    assert svc.progress.publish_passed == 0
    before = time.time()
    svc._next_check = 0.0  # noqa: SLF001
    consumer.positions[own] = 3
    svc._check_inputs_read(consumer)  # type: ignore[arg-type]  # noqa: SLF001
    assert svc.progress.publish_passed >= int(before * 1000) - svc.progress.slack_ms
