"""``dlsroute spark-map``: argument checks (no Spark) and one real run in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from connectors.kafka import consume_batch, consumer_config, producer_config
from connectors.serde import SERDE
from connectors.topics import HEADER_LABEL, Topics, encode_label
from dls.mapping import event_label
from dls.shards import label_shard
from dls.space import ContentSpace
from dlsroute.cli import main

SPEC = {"attributes": [{"name": "price", "type": "numeric", "low": 0, "high": 100,
                        "granules": 8}]}


def test_help_does_not_import_pyspark() -> None:
    code = ("import sys; from dlsroute.cli import build_parser; "
            "p = build_parser(); assert 'pyspark' not in sys.modules, 'pyspark imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)  # noqa: S603


def test_bad_arguments_fail_before_spark(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    space = tmp_path / "space.json"
    space.write_text(json.dumps(SPEC))
    bad_space = tmp_path / "bad.json"
    bad_space.write_text(json.dumps({"attributes": [{"name": "p", "type": "numeric"}]}))
    assert main(["spark-map", "--bootstrap", "127.0.0.1:1", "--space", str(bad_space)]) == 2
    assert "low" in capsys.readouterr().err
    assert main(["spark-map", "--bootstrap", "127.0.0.1:1", "--space", str(space),
                 "--nodes", "A,b.c"]) == 2
    assert "'b.c'" in capsys.readouterr().err
    assert main(["spark-map", "--bootstrap", "127.0.0.1:1", "--space", str(space),
                 "--max-offsets", "0"]) == 2
    assert "--max-offsets" in capsys.readouterr().err
    for shards in ("0", "1025"):
        assert main(["spark-map", "--bootstrap", "127.0.0.1:1", "--space", str(space),
                     "--shards", shards]) == 2
        assert "--shards" in capsys.readouterr().err


@pytest.mark.slow
def test_spark_map_once_in_a_subprocess(kafka_bootstrap: str, topic_prefix: str,
                                        tmp_path: Path) -> None:
    """The command as people run it (a JVM of its own, ~30 s; test_stream_e2e is faster),
    for a network of two label shards: each event lands on its label's shard's topic."""
    space_path = tmp_path / "space.json"
    space_path.write_text(json.dumps(SPEC))
    topics = Topics(topic_prefix)
    p = Producer(producer_config(kafka_bootstrap))
    events = [{"node": "A", "client": "feed", "id": f"e{i}", "attrs": {"price": 7.5 * i}}
              for i in range(5)]
    for e in events:
        p.produce(topics.raw_events, json.dumps(e).encode())
    p.produce(topics.raw_events, b"{}")
    p.flush(30)
    cmd = [sys.executable, "-m", "dlsroute", "spark-map", "--bootstrap", kafka_bootstrap,
           "--space", str(space_path), "--topic-prefix", topic_prefix, "--once",
           "--nodes", "A", "--checkpoint", str(tmp_path / "ck"), "--shards", "2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300,  # noqa: S603
                          env=os.environ | {"PYTHONUNBUFFERED": "1"}, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["raw_records"] == 6 and summary["once"] is True
    space = ContentSpace.from_json(space_path)
    shard_of = {e["id"]: label_shard(event_label(space, e["attrs"]), 2) for e in events}
    assert set(shard_of.values()) == {0, 1}
    reader = Consumer(consumer_config(kafka_bootstrap, f"{topic_prefix}-check"))
    # --nodes made the shards' topics (and not the unsharded ones, which no engine reads).
    assert topics.node_publish("A") not in reader.list_topics(timeout=10).topics
    reader.assign([TopicPartition(topics.of_shard(k).node_publish("A"), 0, 0) for k in (0, 1)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < len(events) and time.monotonic() < deadline:
        got += consume_batch(reader, 100, 0.5)
    reader.close()
    assert sorted(SERDE.decode(m.value())[1]["id"] for m in got) == [e["id"] for e in events]
    for m in got:
        e = next(e for e in events if e["id"] == SERDE.decode(m.value())[1]["id"])
        assert m.topic() == topics.of_shard(shard_of[e["id"]]).node_publish("A")
        assert dict(m.headers())[HEADER_LABEL] == encode_label(event_label(space, e["attrs"]))
