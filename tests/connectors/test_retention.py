"""connectors.retention: a gap that retention left under a reader is found, logged, counted."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from connectors.retention import GapWatch, RetentionGap, gap_before


class Watermarks:
    """Stands in for a consumer's cached watermarks: what librdkafka last fetched."""

    def __init__(self, low: int | None, fail: bool = False) -> None:
        self.low, self.fail, self.asked = low, fail, 0

    def get_watermark_offsets(self, tp: TopicPartition, cached: bool = False) -> Any:
        assert cached  # never a request to the broker
        self.asked += 1
        if self.fail:
            raise KafkaException(KafkaError(KafkaError._STATE))
        return self.low, 100


def _msgs(topic: str, offsets: list[int], partition: int = 0) -> list[Message]:
    return [Message(topic=topic, partition=partition, offset=o, value=b"x") for o in offsets]


def test_a_gap_names_the_partition_the_offsets_and_the_count() -> None:
    gap = RetentionGap("dls.deliver.alice", 0, 5, 10)
    assert gap.messages == 5
    text = gap.describe("client alice")
    assert text.startswith("client alice: dls.deliver.alice[0] offsets 5 to 9 were deleted")
    assert "up to 5 messages lost" in text and "at offset 10" in text


@pytest.mark.parametrize(("low", "got", "found"), [
    (10, 12, RetentionGap("t", 0, 5, 10)),  # the first offset left is past the expected one
    (3, 12, None),  # a jump over transaction markers or aborted records: no gap
    (None, 12, None),  # nothing cached yet
    (50, 12, RetentionGap("t", 0, 5, 12)),  # never past what was read
])
def test_gap_before_tells_a_gap_from_a_jump(low: int | None, got: int,
                                            found: RetentionGap | None,
                                            caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="connectors.retention"):
        assert gap_before(Watermarks(low), "t", 0, 5, got, "node A") == found
    assert ("t[0] offsets 5 to" in caplog.text) == (found is not None)


def test_no_jump_asks_nothing_and_a_failed_question_is_no_gap() -> None:
    quiet = Watermarks(10)
    assert gap_before(quiet, "t", 0, 5, 5, "node A") is None and quiet.asked == 0
    assert gap_before(Watermarks(10, fail=True), "t", 0, 5, 12, "node A") is None


def test_the_watch_counts_gaps_between_batches_per_partition() -> None:
    watch = GapWatch("client alice")
    wm = Watermarks(20)
    watch.batch(wm, _msgs("t", [0, 1, 2]) + _msgs("t", [7], partition=1))
    assert watch.lost == 0  # nothing expected yet
    watch.batch(wm, _msgs("t", [3, 4]) + _msgs("t", [25], partition=1))
    assert watch.lost == 12  # partition 1: offsets 8 to 19
    watch.moved(_msgs("t", [3])[0])  # a seek back to offset 3
    watch.batch(Watermarks(2), _msgs("t", [3, 4]))
    assert watch.lost == 12
    watch.moved(_msgs("t", [3])[0])
    watch.batch(Watermarks(30), _msgs("t", [40]))  # the seek went out of range: a gap
    assert watch.lost == 12 + 27
