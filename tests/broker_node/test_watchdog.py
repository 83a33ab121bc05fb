"""A node never hangs silently: blocking Kafka calls are bounded (no broker: stand-ins).

The regression behind it: with the broker killed while a transaction was in flight,
``send_offsets_to_transaction`` blocked for minutes past its own timeout and the node
logged nothing. Here a stand-in producer blocks the same call forever.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message

from broker_node.committers import AtLeastOnce, ExactlyOnce
from broker_node.config import NodeSettings
from broker_node.metrics import Metrics
from broker_node.service import NodeService
from broker_node.watchdog import STUCK_EXIT_CODE, Watchdog
from tests.broker_node.test_committers import Consumer, Producer


class StuckProducer(Producer):
    """``send_offsets_to_transaction`` never returns (until released)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def send_offsets_to_transaction(self, offsets: Any, meta: Any, timeout: float) -> None:
        self.release.wait()


class FencedProducer(Producer):
    """Every transactional call and flush fails with a fatal error, as a fenced producer."""

    def _fenced(self, *args: Any, **kwargs: Any) -> Any:
        raise KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))

    commit_transaction = abort_transaction = flush = _fenced


class ClosingConsumer(Consumer):
    """A consumer that closes cleanly."""

    def unsubscribe(self) -> None:
        pass

    def poll(self, timeout: float) -> None:
        return None

    def assignment(self) -> list[Any]:
        return []

    def close(self) -> None:
        self.closed = True


def _settings(delivery: str = "exactly_once", **kw: Any) -> NodeSettings:
    kw.setdefault("space", Path("space.json"))
    return NodeSettings(node="A", delivery=delivery, **kw)  # type: ignore[arg-type]


def _msg(offset: int) -> Message:
    return Message(topic="dls.node.A.publish", partition=0, offset=offset, value=b"v")


def test_a_call_past_its_bound_is_reported_once_with_its_name() -> None:
    fired: list[tuple[str, float]] = []
    dog = Watchdog("A", 0.2, on_stuck=lambda call, s: fired.append((call, s)),
                   check_every_s=0.05)
    with dog.guard("commit_transaction"):
        time.sleep(0.6)
    dog.close()
    assert [call for call, _ in fired] == ["commit_transaction"]
    assert fired[0][1] >= 0.2


def test_a_call_within_its_bound_is_not_reported() -> None:
    fired: list[str] = []
    dog = Watchdog("A", 5.0, on_stuck=lambda call, s: fired.append(call), check_every_s=0.02)
    for _ in range(50):
        with dog.guard("flush"):
            pass
    time.sleep(0.1)
    dog.close()
    assert fired == []


def test_a_transaction_stuck_in_send_offsets_is_caught_by_the_watchdog() -> None:
    producer = StuckProducer()
    fired: list[str] = []
    dog = Watchdog("A", 0.3, on_stuck=lambda call, s: fired.append(call), check_every_s=0.05)
    committer = ExactlyOnce(producer, Consumer(), _settings(), Metrics(),  # type: ignore[arg-type]
                            watchdog=dog)
    committer.begin()
    worker = threading.Thread(target=committer.commit, args=([_msg(3)],), daemon=True)
    worker.start()
    deadline = time.monotonic() + 5
    while not fired and time.monotonic() < deadline:
        time.sleep(0.05)
    producer.release.set()
    worker.join(5)
    dog.close()
    assert fired == ["send_offsets_to_transaction"]


def test_waiting_for_room_in_a_full_producer_queue_is_bounded() -> None:
    producer = Producer(full=10**9)  # the broker is gone: the queue never drains
    fired: list[str] = []
    dog = Watchdog("A", 0.3, on_stuck=lambda call, s: fired.append(call), check_every_s=0.05)
    committer = AtLeastOnce(producer, Consumer(), _settings("at_least_once"),  # type: ignore[arg-type]
                            Metrics(), watchdog=dog)
    worker = threading.Thread(target=committer.send, args=("dls.deliver.bob", b"v"),
                              daemon=True)
    worker.start()
    deadline = time.monotonic() + 5
    while not fired and time.monotonic() < deadline:
        time.sleep(0.05)
    producer.full = 0
    worker.join(5)
    dog.close()
    assert fired == ["waiting for room in the producer queue for dls.deliver.bob"]
    assert producer.sent[-1][:2] == ("dls.deliver.bob", b"v")  # it went out once room came


def test_a_failed_abort_does_not_hide_the_error_that_stopped_the_batch() -> None:
    committer = ExactlyOnce(FencedProducer(), Consumer(), _settings(), Metrics())  # type: ignore[arg-type]
    committer.begin()
    committer.abort(RuntimeError("the first error"))  # abort_transaction fails: logged only


def test_close_after_a_fatal_error_does_not_raise_again(caplog: pytest.LogCaptureFixture,
                                                        tmp_path: Path) -> None:
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"attributes": [
        {"name": "x", "type": "numeric", "low": 0, "high": 100, "granules": 8}]}))
    svc = NodeService(_settings(space=space))
    producer = FencedProducer()
    svc.connect(producer)  # type: ignore[arg-type]
    svc._consumer = ClosingConsumer()  # type: ignore[assignment]
    svc.close()  # flush raises the fatal error: logged, not raised a second time
    assert svc.committer is None
    assert "flushing and closing the producer failed at close" in caplog.text
    assert producer.calls[-2:] == ["purge", "close"]  # the handle ends all the same


def _run(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,  # noqa: S603 - this interpreter, this test's code
                          text=True, timeout=timeout, cwd=Path(__file__).parents[2])


def test_by_default_a_stuck_call_ends_the_process_for_a_restart() -> None:
    done = _run("""
        import logging, time
        from broker_node.watchdog import Watchdog
        logging.basicConfig(level=logging.INFO)
        dog = Watchdog("A", 0.3, check_every_s=0.05)
        with dog.guard("send_offsets_to_transaction"):
            time.sleep(30)
        print("not reached")
    """)
    assert done.returncode == STUCK_EXIT_CODE
    assert "not reached" not in done.stdout
    assert "send_offsets_to_transaction has not returned" in done.stderr


def test_the_hard_timer_ends_a_process_whose_stuck_call_holds_the_gil() -> None:
    """The monitor thread cannot run while C code holds the GIL; faulthandler's timer can."""
    done = _run("""
        import re
        from broker_node.watchdog import Watchdog
        dog = Watchdog("A", 0.3, hard=True, hard_grace_s=0.5,
                       on_stuck=lambda call, s: None)
        with dog.guard("close"):
            re.match(r"(a+)+$", "a" * 40 + "b")  # minutes inside C with the GIL held
        print("not reached")
    """)
    assert done.returncode != 0
    assert "not reached" not in done.stdout
    assert "Timeout" in done.stderr  # faulthandler's dump of every thread's stack
