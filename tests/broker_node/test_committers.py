"""How a batch is committed, exactly or at least once (no broker: stand-in clients)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_node.committers import AtLeastOnce, ExactlyOnce, committer_for
from broker_node.config import NodeSettings
from broker_node.exceptions import BrokerError
from broker_node.metrics import Metrics


class Producer:
    """Records what it is given; serves delivery reports on poll/flush (or fails them)."""

    def __init__(self, *, full: int = 0, fail: bool = False) -> None:
        self.sent: list[tuple[str, Any, Any, int]] = []
        self.reports: list[tuple[Any, Message]] = []
        self.calls: list[Any] = []
        self.full, self.fail = full, fail

    def produce(self, topic: str, value: Any = None, headers: Any = None, partition: int = -1,
                on_delivery: Any = None, timestamp: int = 0, key: Any = None) -> None:
        if self.full:
            self.full -= 1
            raise BufferError("queue full")
        self.sent.append((topic, value, headers, partition))
        if on_delivery is not None:
            self.reports.append((on_delivery, Message(topic=topic, partition=partition)))

    def poll(self, timeout: float = 0) -> int:
        self.calls.append("poll")
        reports, self.reports = self.reports, []
        for callback, msg in reports:
            callback("broker down" if self.fail else None, msg)
        return 0

    def flush(self, timeout: float = 0) -> int:
        Producer.poll(self)  # serves the reports even where a test stubbed poll
        return 0

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send_offsets_to_transaction(self, offsets: Any, meta: Any, timeout: float) -> None:
        self.calls.append(("offsets", sorted((tp.topic, tp.partition, tp.offset)
                                             for tp in offsets)))

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append("commit")

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")

    def purge(self) -> None:
        self.calls.append("purge")
        self.reports = []

    def close(self) -> bool:
        self.calls.append("close")
        return True


class Consumer:
    """Records offset commits."""

    def __init__(self) -> None:
        self.commits: list[tuple[list[tuple[str, int, int]], bool]] = []

    def commit(self, offsets: Any, asynchronous: bool) -> None:
        self.commits.append((sorted((tp.topic, tp.partition, tp.offset) for tp in offsets),
                             asynchronous))

    def consumer_group_metadata(self) -> str:
        return "group"


def _settings(delivery: str, **kw: Any) -> NodeSettings:
    return NodeSettings(node="A", space=Path("space.json"), delivery=delivery,  # type: ignore[arg-type]
                        **kw)


def _alo(producer: Producer, consumer: Consumer | None = None, **kw: Any) -> AtLeastOnce:
    events: list[str] = []
    c = AtLeastOnce(producer, consumer, _settings("at_least_once", **kw),  # type: ignore[arg-type]
                    Metrics(), on_commit=lambda: events.append("settled"))
    c.events = events  # type: ignore[attr-defined]
    return c


def _in(offset: int, topic: str = "dls.node.A.publish") -> Message:
    return Message(topic=topic, partition=0, offset=offset, value=b"v")


def test_committer_for_picks_the_delivery_mode() -> None:
    for delivery, kind in (("exactly_once", ExactlyOnce), ("at_least_once", AtLeastOnce)):
        c = committer_for(_settings(delivery), Producer(), None, Metrics())  # type: ignore[arg-type]
        assert type(c) is kind
        assert c.transactional is (delivery == "exactly_once")


def test_at_least_once_holds_back_the_last_message_of_each_partition() -> None:
    p = Producer()
    c = _alo(p)
    for i in range(3):
        c.produce("t", b"t%d" % i, partition=0)
    c.produce("u", b"u0")  # no partition: partition 0
    c.produce("u", b"u1", partition=-1)
    c.produce("t", b"t-p1", partition=1)
    assert [v for _, v, _, _ in p.sent] == [b"t0", b"t1", b"u0"]
    assert c.held == {("t", 0): (b"t2", None), ("u", 0): (b"u1", None),
                      ("t", 1): (b"t-p1", None)}


def test_a_batch_is_committed_once_its_last_messages_are_acknowledged() -> None:
    p, consumer = Producer(), Consumer()
    c = _alo(p, consumer)
    c.produce("t", b"a")
    c.produce("t", b"b")
    p.reports.clear()
    c.commit([_in(7), _in(8)])  # b goes out with a callback, served by commit's poll
    assert [v for _, v, _, _ in p.sent] == [b"a", b"b"]
    assert consumer.commits == []  # acknowledged, but the commit interval has not passed
    c.idle()
    assert consumer.commits == [([("dls.node.A.publish", 0, 9)], True)]
    assert c.events == ["settled"]  # type: ignore[attr-defined]


def test_a_batch_waits_for_its_acknowledgements() -> None:
    p, consumer = Producer(), Consumer()
    c = _alo(p, consumer)
    c.produce("t", b"a")
    p.poll = lambda timeout=0: 0  # type: ignore[method-assign]  # nothing acknowledged yet
    c.commit([_in(3)])
    c.idle()
    assert consumer.commits == []
    del p.poll  # reports served again
    c.idle()
    assert consumer.commits == [([("dls.node.A.publish", 0, 4)], True)]


def test_finish_flushes_and_commits_synchronously() -> None:
    p, consumer = Producer(), Consumer()
    c = _alo(p, consumer)
    c.produce("t", b"a")
    p.poll = lambda timeout=0: 0  # type: ignore[method-assign]
    c.commit([_in(0)])
    c.finish()  # flush serves the report
    assert consumer.commits == [([("dls.node.A.publish", 0, 1)], False)]


def test_a_failed_delivery_stops_the_node() -> None:
    p, consumer = Producer(fail=True), Consumer()
    c = _alo(p, consumer)
    c.produce("t", b"a")
    with pytest.raises(BrokerError, match="delivery to t\\[0\\] failed: broker down") as err:
        c.commit([_in(0)])
    assert err.value.field == "delivery"
    assert consumer.commits == []


def test_a_full_queue_waits_for_room_and_is_counted() -> None:
    p = Producer(full=2)
    c = committer_for(_settings("exactly_once"), p, None, Metrics())  # type: ignore[arg-type]
    c.produce("t", b"a")
    assert [v for _, v, _, _ in p.sent] == [b"a"]
    assert c.metrics.queue_full_waits == 2
    assert p.calls == ["poll", "poll"]


def test_exactly_once_is_one_transaction_per_batch() -> None:
    p, consumer = Producer(), Consumer()
    seen: list[str] = []
    c = ExactlyOnce(p, consumer, _settings("exactly_once"), Metrics(),  # type: ignore[arg-type]
                    on_commit=lambda: seen.append("settled"),
                    on_abort=lambda: seen.append("dropped"))
    c.begin()
    c.produce("t", b"a")
    c.produce("t", b"b")
    assert [v for _, v, _, _ in p.sent] == [b"a", b"b"]  # nothing held back
    c.commit([_in(4), _in(5, "dls.node.A.subscribe")])
    assert p.calls == ["begin", ("offsets", [("dls.node.A.publish", 0, 5),
                                             ("dls.node.A.subscribe", 0, 6)]), "commit"]
    c.begin()
    c.abort(RuntimeError("boom"))
    assert p.calls[-2:] == ["begin", "abort"]
    assert seen == ["settled", "dropped"]
    assert consumer.commits == []  # offsets go in the transaction only


_SPREAD = st.lists(st.lists(st.tuples(st.integers(0, 3), st.binary(max_size=2)),
                            max_size=3, unique_by=lambda m: m[0]), max_size=12)


@settings(max_examples=150, deadline=None)
@given(runs=st.lists(_SPREAD, min_size=1, max_size=3),
       delivery=st.sampled_from(["exactly_once", "at_least_once"]))
def test_spread_sends_what_one_by_one_would_in_each_partitions_order(
        runs: list[list[list[tuple[int, bytes]]]], delivery: str) -> None:
    """produce_spread, run after run, equals produce() message by message."""
    p = Producer()
    c = committer_for(_settings(delivery), p, None, Metrics())  # type: ignore[arg-type]
    want: dict[int, list[Any]] = {}
    for r, run in enumerate(runs):
        values = [b"r%de%d" % (r, i) for i in range(len(run))]
        carried = [[("k", b"%d" % i)] for i in range(len(run))]
        spreads = [[(part, ("dls-clients", h)) for part, h in msgs] for msgs in run]
        c.produce_spread("shared", values, carried, spreads, 4)
        for value, carry, msgs in zip(values, carried, spreads, strict=True):
            for part, header in msgs:
                want.setdefault(part, []).append((value, [*carry, header]))
    got: dict[int, list[Any]] = {}
    for topic, value, headers, part in p.sent:
        assert topic == "shared"
        got.setdefault(part, []).append((value, headers))
    held = c.held if isinstance(c, AtLeastOnce) else {}
    for (_, part), (value, headers) in held.items():
        got.setdefault(part, []).append((value, headers))
    assert got == want
    if delivery == "at_least_once":  # exactly the last message of each partition is held
        assert {part for _, part in held} == set(want)


class ConfirmingConsumer(Consumer):
    """Answers commits through the callback, as the broker does, when told to."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[Any] = []

    def commit(self, offsets: Any, asynchronous: bool) -> Any:
        super().commit(offsets, asynchronous)
        if asynchronous:
            self.pending.append(offsets)
            return None
        return offsets

    def answer(self, committer: AtLeastOnce, err: Any = None) -> None:
        pending, self.pending = self.pending, []
        for offsets in pending:
            committer.offsets_committed(err, offsets)


def test_a_batch_is_durable_once_the_broker_confirms_its_commit() -> None:
    """What a node reports about a batch waits for this (docs: acknowledged means committed)."""
    p, consumer = Producer(), ConfirmingConsumer()
    c = _alo(p, consumer, commit_interval_s=60)
    c.begin()
    c.produce("t", b"a")
    c.commit([_in(7)])
    assert (c.batch, c.durable, c.waiting) == (1, 0, False)
    c.need(1)  # the batch applied a subscription: commit it without waiting 60 s
    assert c.waiting
    c.idle()
    assert consumer.commits == [([("dls.node.A.publish", 0, 8)], True)]
    assert c.durable == 0  # asked, not confirmed
    consumer.answer(c)
    assert (c.durable, c.waiting) == (1, False)


def test_without_need_a_busy_node_keeps_its_commit_interval() -> None:
    p, consumer = Producer(), ConfirmingConsumer()
    c = _alo(p, consumer, commit_interval_s=60)
    for offset in (1, 2, 3):
        c.begin()
        c.produce("t", b"x")
        c.commit([_in(offset)])
    assert consumer.commits == []  # busy (never idle) and the interval not passed
    c.begin()
    c.produce("t", b"y")
    c.need(c.batch)
    c.commit([_in(4)])  # its own callback is served only by a later poll
    c.begin()
    c.commit([_in(5)])  # batch 4's commit is asked already: 5 waits for the interval
    assert consumer.commits == [([("dls.node.A.publish", 0, 5)], True)]
    consumer.answer(c)
    assert c.durable == 4 and not c.waiting


def test_a_failed_commit_is_asked_again_and_nothing_counts_as_durable_meanwhile() -> None:
    p, consumer = Producer(), ConfirmingConsumer()
    c = _alo(p, consumer, commit_interval_s=0.05)
    c.begin()
    c.produce("t", b"a")
    c.commit([_in(7)])
    c.need(1)
    c.idle()
    consumer.answer(c, err="COORDINATOR_NOT_AVAILABLE")
    assert c.durable == 0 and c.waiting
    time.sleep(0.06)  # failed commits are asked again after commit_interval_s
    c.idle()
    assert len(consumer.commits) == 2 and consumer.commits[1][0] == [("dls.node.A.publish", 0, 8)]
    consumer.answer(c)
    assert c.durable == 1


def test_a_batch_that_consumed_nothing_is_durable_once_those_before_it_are() -> None:
    p, consumer = Producer(), ConfirmingConsumer()
    c = _alo(p, consumer, commit_interval_s=60)
    c.begin()
    c.commit([_in(3)])
    c.begin()
    c.produce("t", b"heartbeat")
    c.commit([])  # a heartbeat-only batch
    c.need(2)
    c.idle()
    assert c.durable == 0  # the batch before it is not confirmed
    consumer.answer(c)
    assert c.durable == 2


def test_finish_confirms_what_it_commits_synchronously() -> None:
    p, consumer = Producer(), ConfirmingConsumer()
    c = _alo(p, consumer, commit_interval_s=60)
    c.begin()
    c.produce("t", b"a")
    c.commit([_in(1)])
    c.finish()
    assert consumer.commits[-1] == ([("dls.node.A.publish", 0, 2)], False)
    assert c.durable == 1


def test_exactly_once_batches_are_durable_when_their_transaction_commits() -> None:
    c = ExactlyOnce(Producer(), Consumer(), _settings("exactly_once"),  # type: ignore[arg-type]
                    Metrics())
    c.begin()
    c.need(1)
    assert c.durable == 0 and c.waiting
    c.commit([_in(1)])
    assert c.durable == 1 and not c.waiting
