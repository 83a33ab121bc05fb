"""spark.retention: raw records retention deleted before the mapping job read them.

Real Kafka, real Spark (the session fixture): a query runs once on a checkpoint, more raw
events come, their first ones are deleted with ``DeleteRecords`` (as retention would), and
then the command stops before Spark starts, naming the gap, unless told to go on, and the
query told to go on reads what is left.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.errors import StreamingQueryException

from connectors.kafka import consume_batch, consumer_config, producer_config
from connectors.serde import SERDE
from connectors.topics import Topics
from dls.space import ContentSpace
from dlsroute.cli import main as dlsroute_main
from spark.retention import checkpoint_gaps, checkpoint_starts
from spark.stream import input_rows, prepare_topics, start_query
from tests.spark.test_map_cli import SPEC

pytestmark = pytest.mark.integration


def _events(bootstrap: str, topic: str, ids: range) -> None:
    p = Producer(producer_config(bootstrap))
    for i in ids:
        p.produce(topic, json.dumps({"node": "A", "client": "feed", "id": f"e{i}",
                                     "attrs": {"price": 1.0 * i}}).encode())
    p.flush(30)


def _run(spark: Any, space: ContentSpace, bootstrap: str, topics: Topics, checkpoint: Path,
         **options: Any) -> Any:
    q = start_query(spark, space, bootstrap, topics=topics, checkpoint=checkpoint, once=True,
                    **options)
    try:
        q.awaitTermination(180)
    except StreamingQueryException:
        pass  # q.exception() says it
    return q


def _published(bootstrap: str, topics: Topics) -> list[str]:
    reader = Consumer(consumer_config(bootstrap, f"{topics.prefix}-check"))
    try:
        tp = TopicPartition(topics.node_publish("A"), 0, 0)
        _, high = reader.get_watermark_offsets(tp, timeout=10)
        reader.assign([tp])
        got: list[Any] = []
        for _ in range(60):
            if len(got) >= high:
                break
            got += consume_batch(reader, 100, 0.5)
        return [SERDE.decode(m.value())[1]["id"] for m in got]
    finally:
        reader.close()


def test_a_checkpoint_behind_retention_stops_the_command_or_goes_on_when_told(
        spark: Any, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path,
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    space_path = tmp_path / "space.json"
    space_path.write_text(json.dumps(SPEC))
    space = ContentSpace.from_json(space_path)
    topics, checkpoint = Topics(topic_prefix), tmp_path / "ck"
    prepare_topics(kafka_bootstrap, topics, ["A"])
    _events(kafka_bootstrap, topics.raw_events, range(3))
    q = _run(spark, space, kafka_bootstrap, topics, checkpoint)
    assert q.exception() is None and input_rows(q) == 3
    assert checkpoint_starts(checkpoint)[(topics.raw_events, 0)] == 3
    _events(kafka_bootstrap, topics.raw_events, range(3, 10))  # while the job is away
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    done = admin.delete_records([TopicPartition(topics.raw_events, 0, 7)])  # 3..6 deleted
    next(iter(done.values())).result(10)

    with caplog.at_level(logging.ERROR, logger="spark"):
        (gap,) = checkpoint_gaps(checkpoint, kafka_bootstrap)
    assert (gap.topic, gap.partition, gap.start, gap.first) == (topics.raw_events, 0, 3, 7)
    assert f"spark-map: {topics.raw_events}[0] offsets 3 to 6 were deleted" in caplog.text
    # The command stops before Spark starts, naming the gap and the way on.
    args = ["spark-map", "--bootstrap", kafka_bootstrap, "--space", str(space_path),
            "--topic-prefix", topic_prefix, "--once", "--checkpoint", str(checkpoint)]
    assert dlsroute_main(args) == 1
    err = capsys.readouterr().err
    assert f"{topics.raw_events}[0] offsets 3 to 6 (4 records)" in err
    assert "--accept-data-loss" in err

    # Spark's own check, which the command's comes before: the query fails at every start.
    failed = _run(spark, space, kafka_bootstrap, topics, checkpoint)
    assert failed.exception() is not None and "failOnDataLoss" in str(failed.exception())
    # Told to go on: the records left are read, once.
    q = _run(spark, space, kafka_bootstrap, topics, checkpoint, fail_on_data_loss=False)
    assert q.exception() is None and input_rows(q) == 3
    assert _published(kafka_bootstrap, topics) == [f"e{i}" for i in (0, 1, 2, 7, 8, 9)]
    assert checkpoint_gaps(checkpoint, kafka_bootstrap) == []  # it is past the gap now


def test_checkpoint_starts_read_the_last_committed_batch(tmp_path: Path) -> None:
    """Spark's layout: offsets/<batch> (version, metadata, a line per source), commits/."""
    assert checkpoint_starts(tmp_path / "none") == {}
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1}'
    for batch, events in ((0, 4), (1, 9), (2, 12)):
        (tmp_path / "offsets" / str(batch)).write_text(
            f'v1\n{meta}\n{{"dls.raw.events":{{"0":{events},"1":{events + 1}}}}}\n-\n')
    assert checkpoint_starts(tmp_path) == {}  # nothing committed: startingOffsets
    for batch in (0, 1):
        (tmp_path / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    # Batch 2 was planned, not committed: a restart runs it again from batch 1's end.
    assert checkpoint_starts(tmp_path) == {("dls.raw.events", 0): 9, ("dls.raw.events", 1): 10}
