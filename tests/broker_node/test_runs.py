"""broker_node.runs: a batch as runs of one kind, and a transaction committed between two
runs once it has been open for its share of the timeout."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka import Message

from broker_node.committers import AtLeastOnce, ExactlyOnce
from broker_node.config import NodeSettings
from broker_node.metrics import Metrics
from broker_node.runs import (
    CONTROL_RUN_BYTES,
    EVENT_RUN_EVENTS,
    TIMEOUT_SHARE,
    checkpoint,
    runs,
)
from broker_node.service import NodeService
from connectors.serde import encode_label_subscription
from tests.broker_node.test_committers import Consumer, Producer, _settings

SUB, PUB = "dls.node.A.subscribe", "dls.node.A.publish"


def _msg(topic: str, offset: int, size: int = 10) -> Message:
    return Message(topic=topic, partition=0, offset=offset, value=b"x" * size)


def _kinds(msgs: list[Message]) -> list[tuple[bool, list[int]]]:
    return [(event, [m.offset() for m in run])
            for event, run in runs(msgs, lambda m: m.topic() == PUB)]


def test_runs_follow_the_kind_of_consecutive_messages() -> None:
    msgs = [_msg(SUB, 0), _msg(SUB, 1), _msg(PUB, 2), _msg(PUB, 3), _msg(SUB, 4), _msg(PUB, 5)]
    assert _kinds(msgs) == [(False, [0, 1]), (True, [2, 3]), (False, [4]), (True, [5])]
    assert _kinds([]) == []


def test_a_run_of_control_messages_is_cut_by_the_bytes_of_its_values() -> None:
    third = CONTROL_RUN_BYTES // 3
    msgs = [_msg(SUB, i, third) for i in range(7)] + [_msg(SUB, 7, 2 * CONTROL_RUN_BYTES)]
    msgs += [_msg(PUB, 8, 2 * CONTROL_RUN_BYTES), _msg(PUB, 9, 2 * CONTROL_RUN_BYTES)]
    assert _kinds(msgs) == [(False, [0, 1, 2]), (False, [3, 4, 5]), (False, [6]), (False, [7]),
                            (True, [8, 9])]  # events are not cut by size


def test_a_run_of_events_is_cut_by_its_count() -> None:
    n = EVENT_RUN_EVENTS
    msgs = [_msg(PUB, i) for i in range(2 * n + 3)] + [_msg(SUB, 2 * n + 3)]
    assert [(event, len(run)) for event, run in runs(msgs, lambda m: m.topic() == PUB)] == [
        (True, n), (True, n), (True, 3), (False, 1)]


def test_each_message_is_asked_about_once_in_order() -> None:
    asked: list[int] = []
    msgs = [_msg(SUB, 0), _msg(PUB, 1), _msg(SUB, 2)]
    list(runs(msgs, lambda m: asked.append(m.offset()) or m.topic() == PUB))
    assert asked == [0, 1, 2]


def _eos(age: float) -> tuple[ExactlyOnce, Producer]:
    p = Producer()
    c = ExactlyOnce(p, Consumer(), _settings("exactly_once", transaction_timeout_ms=10_000),  # type: ignore[arg-type]
                    Metrics())
    c.begin()
    c.opened -= age
    return c, p


def test_a_transaction_open_past_its_share_is_committed_and_another_begun() -> None:
    msgs = [_msg(SUB, 10), _msg(SUB, 11), _msg(PUB, 12)]
    young, p = _eos(TIMEOUT_SHARE * 10 - 0.5)
    assert not checkpoint(young, msgs, 2, "A") and p.calls == ["begin"]
    old, p = _eos(TIMEOUT_SHARE * 10 + 0.5)
    assert not checkpoint(old, msgs, 0, "A")  # nothing done yet: nothing to commit
    assert checkpoint(old, msgs, 2, "A")
    assert p.calls == ["begin", ("offsets", [(SUB, 0, 12)]), "commit", "begin"]
    assert old.batch == 2 and time.monotonic() - old.opened < 1.0


def test_without_a_transaction_or_a_consumer_nothing_is_committed() -> None:
    alo = AtLeastOnce(Producer(), Consumer(), _settings("at_least_once"), Metrics())  # type: ignore[arg-type]
    alo.begin()
    alo.opened -= 1000
    assert not checkpoint(alo, [_msg(SUB, 0)], 1, "A")
    p = Producer()
    offline = ExactlyOnce(p, None, _settings("exactly_once"), Metrics())  # type: ignore[arg-type]
    offline.begin()
    offline.opened -= 1000
    assert not checkpoint(offline, [_msg(SUB, 0)], 1, "A") and p.calls == ["begin"]


@pytest.fixture
def space(tmp_path: Path) -> Path:
    path = tmp_path / "space.json"
    path.write_text(json.dumps({"attributes": [{"name": "x", "type": "numeric", "low": 0,
                                                "high": 1023, "granules": 1024}]}))
    return path


def test_process_commits_between_runs_once_the_transaction_is_old(space: Path) -> None:
    """An event, then subscriptions, then an event: the batch's transaction is old after
    the first run, which is committed alone; the rest goes in a new transaction."""
    svc = NodeService(NodeSettings(node="A", space=space, shared_delivery_partitions=1,
                                   transaction_timeout_ms=4_000))
    p, consumer = Producer(), Consumer()
    svc.connect(p, consumer)  # type: ignore[arg-type]
    assert svc.committer is not None
    labels = np.arange(5, dtype=np.uint64)
    sub = [Message(topic=SUB, partition=0, offset=i,
                   value=encode_label_subscription("c0", f"s{i}", labels)) for i in range(3)]
    ev: Any = [Message(topic=PUB, partition=0, offset=i, value=b"{}",
                       headers=[("dls-label", (3).to_bytes(8, "big")),
                                ("dls-origin", b"A/pub"), ("dls-event-id", f"e{i}".encode())])
               for i in range(2)]
    svc.committer.begin()
    svc.committer.opened -= 100  # as if the batch had been open for 100 s
    svc.process([ev[0], *sub, ev[1]])
    assert len(svc.state) == 3
    commits = [c for c in p.calls if c == "commit" or isinstance(c, tuple)]
    assert commits == [("offsets", [(PUB, 0, 1)]), "commit"]
    assert p.calls[-1] == "begin" and svc.committer.batch == 2  # the loop commits the rest
    delivered = [dict(h)["dls-event-id"] for t, _, h, _ in p.sent if t == "dls.deliver"]
    assert delivered == [b"e1"]  # e0 came before the subscriptions


def test_a_batch_of_more_events_than_a_run_commits_between_its_runs(space: Path) -> None:
    """Events alone, more than a run holds: routed run by run, and a transaction open too
    long is committed between two (the restart of a fenced node would read them again)."""
    svc = NodeService(NodeSettings(node="A", space=space, shared_delivery_partitions=1,
                                   transaction_timeout_ms=4_000))
    p, consumer = Producer(), Consumer()
    svc.connect(p, consumer)  # type: ignore[arg-type]
    assert svc.committer is not None
    svc.process([Message(topic=SUB, partition=0, offset=0, value=encode_label_subscription(
        "c0", "s0", np.arange(5, dtype=np.uint64)))])
    n = EVENT_RUN_EVENTS + 5
    ev: Any = [Message(topic=PUB, partition=0, offset=i, value=b"{}",
                       headers=[("dls-label", (3).to_bytes(8, "big")),
                                ("dls-origin", b"A/pub"), ("dls-event-id", f"e{i}".encode())])
               for i in range(n)]
    svc.committer.begin()
    svc.committer.opened -= 100  # as if the batch had been open for 100 s
    svc.process(ev)
    commits = [c for c in p.calls if c == "commit" or isinstance(c, tuple)]
    assert commits == [("offsets", [(PUB, 0, EVENT_RUN_EVENTS)]), "commit"]
    delivered = [dict(h)["dls-event-id"] for t, _, h, _ in p.sent if t == "dls.deliver"]
    assert delivered == [f"e{i}".encode() for i in range(n)]  # each once, in order
