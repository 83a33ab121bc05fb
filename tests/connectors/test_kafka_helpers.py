"""Kafka helpers that fail cleanly without a broker (no broker needed)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from connectors.exceptions import ConnectorError, ConnectorSettingError
from connectors.kafka import (
    check_message,
    committed_offsets,
    consume_batch,
    consumer_config,
    ensure_topics,
    is_fatal,
    next_offsets,
    offsets_to_commit,
    producer_config,
    watermark_offsets,
)


def test_ensure_topics_without_a_broker_names_it_and_the_timeout() -> None:
    # Nothing listens on port 1: every metadata attempt fails until the deadline.
    with pytest.raises(ConnectorError,
                       match=r"cannot read topic metadata from 127\.0\.0\.1:1 within 1\.5s"):
        ensure_topics("127.0.0.1:1", ["dls.x"], timeout=1.5)


@pytest.mark.parametrize("call, field, value", [
    (lambda: producer_config("  "), "bootstrap", "  "),
    (lambda: producer_config(None), "bootstrap", None),  # type: ignore[arg-type]
    (lambda: producer_config("h:1", transactional_id=""), "transactional_id", ""),
    (lambda: consumer_config("h:1", ""), "group_id", ""),
    (lambda: ensure_topics("h:1", ["t"], partitions=0), "partitions", 0),
    (lambda: ensure_topics("h:1", ["t"], replication=0), "replication", 0),
    (lambda: ensure_topics("h:1", ["t"], min_insync=0), "min_insync", 0),
    (lambda: ensure_topics("h:1", ["t"], replication=2, min_insync=3), "min_insync", 3),
    (lambda: ensure_topics("h:1", ["t"], replication=True), "replication", True),
    (lambda: consume_batch(None, 0, 1.0), "max_messages", 0),  # type: ignore[arg-type]
])
def test_bad_settings_are_connector_setting_errors(call: object, field: str,
                                                   value: object) -> None:
    """Raised before any client is made: a ConnectorError that is a ValueError too."""
    with pytest.raises(ConnectorSettingError) as err:
        call()  # type: ignore[operator]
    assert isinstance(err.value, ValueError) and isinstance(err.value, ConnectorError)
    assert (err.value.field, err.value.value) == (field, value)
    assert repr(value) in str(err.value) or field in str(err.value)


def test_next_offsets_is_one_past_the_last_message_of_each_partition() -> None:
    msgs = [Message(topic="a", partition=0, offset=4), Message(topic="b", partition=0, offset=9),
            Message(topic="a", partition=1, offset=0), Message(topic="a", partition=0, offset=5)]
    offsets = next_offsets(msgs)
    assert offsets == {("a", 0): 6, ("b", 0): 10, ("a", 1): 1}
    tps = offsets_to_commit(offsets)
    assert [(tp.topic, tp.partition, tp.offset) for tp in tps] == [
        ("a", 0, 6), ("b", 0, 10), ("a", 1, 1)]
    assert next_offsets([]) == {}


def test_next_offsets_of_one_partition_is_its_last_message() -> None:
    msgs = [Message(topic="a", partition=2, offset=o) for o in (7, 8, 9)]
    assert next_offsets(msgs) == {("a", 2): 10}
    assert next_offsets(iter(msgs)) == {("a", 2): 10}  # any iterable
    # the same partition number in another topic is another partition
    assert next_offsets([*msgs, Message(topic="b", partition=2, offset=0)]) == {
        ("a", 2): 10, ("b", 2): 1}


class _Coordinator:
    """A consumer stand-in whose ``committed`` fails ``fails`` times with ``code``."""

    def __init__(self, fails: int, code: int) -> None:
        self.fails, self.code, self.calls = fails, code, 0

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        self.calls += 1
        if self.calls <= self.fails:
            raise KafkaException(KafkaError(self.code))
        return partitions


def test_committed_offsets_waits_for_the_coordinator() -> None:
    parts = [TopicPartition("t", 0)]
    c = _Coordinator(2, KafkaError.NOT_COORDINATOR)
    assert committed_offsets(c, parts, timeout=5, retry_s=0.01) == parts  # type: ignore[arg-type]
    assert c.calls == 3


def test_committed_offsets_gives_up_on_other_errors_and_after_the_timeout() -> None:
    from connectors.exceptions import ConnectorError
    parts = [TopicPartition("t", 0)]
    c = _Coordinator(1, KafkaError.GROUP_AUTHORIZATION_FAILED)
    with pytest.raises(ConnectorError, match="reading committed offsets failed"):
        committed_offsets(c, parts, timeout=5, retry_s=0.01)  # type: ignore[arg-type]
    assert c.calls == 1
    c = _Coordinator(1000, KafkaError.COORDINATOR_LOAD_IN_PROGRESS)
    with pytest.raises(ConnectorError, match="reading committed offsets failed"):
        committed_offsets(c, parts, timeout=0.2, retry_s=0.05)  # type: ignore[arg-type]
    assert 1 < c.calls < 1000


class _Leaderless:
    """A consumer stand-in whose ``get_watermark_offsets`` fails ``fails`` times with
    ``code`` (None: answers nothing, as on a timeout), then gives ``(0, 7)``."""

    def __init__(self, fails: int, code: int | None) -> None:
        self.fails, self.code, self.calls = fails, code, 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float,
                              cached: bool) -> tuple[int, int] | None:
        assert not cached
        self.calls += 1
        if self.calls <= self.fails:
            if self.code is None:
                return None
            raise KafkaException(KafkaError(self.code))
        return 0, 7


@pytest.mark.parametrize("code", [KafkaError.NOT_LEADER_FOR_PARTITION,
                                  KafkaError.UNKNOWN_TOPIC_OR_PART, None])
def test_watermark_offsets_waits_for_a_new_partitions_leader(code: int | None) -> None:
    """Regression: a node starting right after its snapshot topic was created failed with
    NOT_LEADER_FOR_PARTITION from the first offsets request (seen under load)."""
    c = _Leaderless(2, code)
    tp = TopicPartition("t", 3)
    assert watermark_offsets(c, tp, timeout=5, retry_s=0.01) == (0, 7)  # type: ignore[arg-type]
    assert c.calls == 3


def test_watermark_offsets_gives_up_naming_the_partition() -> None:
    c = _Leaderless(1, KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(ConnectorError, match=r"offsets of t\[3\] failed"):
        watermark_offsets(c, TopicPartition("t", 3), timeout=5,  # type: ignore[arg-type]
                          retry_s=0.01)
    assert c.calls == 1
    c = _Leaderless(1000, KafkaError.NOT_LEADER_FOR_PARTITION)
    with pytest.raises(ConnectorError, match="NOT_LEADER"):
        watermark_offsets(c, TopicPartition("t", 3), timeout=0.2,  # type: ignore[arg-type]
                          retry_s=0.05)
    assert 1 < c.calls < 1000


def test_a_consumer_fatal_error_event_is_fatal_though_its_flag_is_not_set() -> None:
    """librdkafka's fenced static member arrives as code _FATAL with fatal() False."""
    for code in (KafkaError._FATAL, KafkaError.FENCED_INSTANCE_ID):
        err = KafkaError(code, "Static consumer fenced by other consumer")
        assert not err.fatal() and is_fatal(err)
        with pytest.raises(ConnectorError, match="fatal Kafka error at consumer"):
            check_message(Message(error=err))
    skipped = KafkaError(KafkaError._TRANSPORT, "broker down")
    assert not is_fatal(skipped) and check_message(Message(error=skipped)) is None


def test_check_replication_names_the_callers_fields() -> None:
    from connectors.replication import check_replication, topic_replication

    check_replication(None, None)
    check_replication(3, 2)
    check_replication(None, 2)  # the cluster's replication factor: not known here
    assert topic_replication(3, 3) == {"replication": 3, "min_insync": 3}
    with pytest.raises(ConnectorSettingError, match=r"min_insync_replicas \(4\) must not "
                       r"exceed replication_factor \(3\)") as err:
        check_replication(3, 4, names=("replication_factor", "min_insync_replicas"))
    assert (err.value.field, err.value.value) == ("min_insync_replicas", 4)
    with pytest.raises(ConnectorSettingError, match="replication_factor must be an integer "
                       ">= 1 or None, got '3'") as err:
        topic_replication("3", None,  # type: ignore[arg-type]
                          names=("replication_factor", "min_insync_replicas"))
    assert err.value.field == "replication_factor"
