"""Recovery's reading rules that need no broker: a broker that does not answer is an error."""

from __future__ import annotations

import json
import logging
import socket
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from broker_node import recovery
from broker_node.config import NodeSettings
from broker_node.exceptions import BrokerError


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again: nothing listens there


def _settings(tmp_path: Path, **kw: object) -> NodeSettings:
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"attributes": [
        {"name": "x", "type": "numeric", "low": 0, "high": 10, "granules": 2}]}))
    return NodeSettings(node="A", space=space, bootstrap=f"127.0.0.1:{_dead_port()}",
                        **kw)  # type: ignore[arg-type]


def test_a_broker_that_gives_nothing_stops_recovery_with_a_clear_error(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    s = _settings(tmp_path, recovery_stall_s=1.5)
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING), pytest.raises(BrokerError) as err:
        recovery.read_ranges(s, {("dls.node.A.subscribe", 0): (0, 10)}, "control topics")
    assert err.value.field == "recovery_stall_s"
    assert "does not answer" in str(err.value) and s.bootstrap in str(err.value)
    assert "0 of about 10" in str(err.value)
    assert 1.5 <= time.monotonic() - t0 < 30


def test_nothing_to_read_needs_no_broker(tmp_path: Path) -> None:
    s = _settings(tmp_path, recovery_stall_s=0.1)
    assert recovery.read_ranges(s, {("t", 0): (5, 5), ("u", 0): (0, 0)}, "nothing") == []
    assert recovery.control_history(s, {"t": 3}, {"t": 3, "u": 0}) == []


def test_snapshots_are_off_in_paper_mode_or_when_asked(tmp_path: Path) -> None:
    assert recovery.snapshots_enabled(_settings(tmp_path))
    assert not recovery.snapshots_enabled(_settings(tmp_path, snapshot_every_messages=0))
    assert not recovery.snapshots_enabled(_settings(tmp_path, mode="paper"))


def test_there_is_no_time_wall_on_recovery() -> None:
    # main had RECOVERY_TIMEOUT_S = 120: a longer recovery gave up and the node never
    # started. Only a recovery that reads nothing for recovery_stall_s stops now.
    assert not hasattr(recovery, "RECOVERY_TIMEOUT_S")


class _NewTopicReader:
    """A reader asking about a topic created a moment ago: no leader for a few answers."""

    def __init__(self, code: int, misses: int) -> None:
        self.code, self.misses, self.asked = code, misses, 0

    def get_watermark_offsets(self, tp: object, timeout: float = 0,
                              cached: bool = False) -> tuple[int, int]:
        self.asked += 1
        if self.asked <= self.misses:
            raise KafkaException(KafkaError(self.code))
        return 0, 7


def test_a_snapshot_topic_without_a_leader_yet_is_asked_again(tmp_path: Path) -> None:
    """Regression: a node's first start read the end of the snapshot topic it had just
    created, got NOT_LEADER_FOR_PARTITION, and stopped (seen in the mid-stream kill test)."""
    s = _settings(tmp_path, recovery_stall_s=5.0)
    reader = _NewTopicReader(KafkaError.NOT_LEADER_FOR_PARTITION, 2)
    assert recovery.manifest_end(s, reader, "dls.node.A.snapshot") == 7  # type: ignore[arg-type]
    assert reader.asked == 3


def test_other_errors_and_a_leader_that_never_comes_stop_recovery(tmp_path: Path) -> None:
    s = _settings(tmp_path, recovery_stall_s=0.3)
    for code, misses in ((KafkaError.TOPIC_AUTHORIZATION_FAILED, 1),
                         (KafkaError.LEADER_NOT_AVAILABLE, 10**6)):
        with pytest.raises(BrokerError) as err:
            recovery.manifest_end(s, _NewTopicReader(code, misses),  # type: ignore[arg-type]
                                  "dls.node.A.snapshot")
        assert err.value.field == "recovery" and "dls.node.A.snapshot" in str(err.value)
