"""A client's delivery reports: failures kept, logged and raised once (no broker)."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, Message

from connectors.delivery_reports import FAILURES_KEPT, DeliveryReports
from connectors.exceptions import DeliveryFailedError


def _msg(topic: str = "dls.node.A.publish", partition: int = 0) -> Message:
    return Message(topic=topic, partition=partition)  # a report has no headers


def test_successes_pass_and_nothing_is_raised() -> None:
    r = DeliveryReports("alice")
    r.of_event("e1")(None, _msg())
    r.check()
    assert (r.count, r.failed) == (0, [])


def test_failures_are_logged_raised_with_their_ids_and_then_forgotten(
        caplog: pytest.LogCaptureFixture) -> None:
    r = DeliveryReports("alice")
    too_large = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
    r.of_event("e0")(None, _msg())
    with caplog.at_level(logging.ERROR):
        r.of_event("e1")(too_large, _msg(partition=3))
        r.on_delivery(KafkaError(KafkaError._MSG_TIMED_OUT), _msg("dls.node.A.subscribe"))
    assert "client alice: event 'e1' to dls.node.A.publish[3]" in caplog.text
    with pytest.raises(DeliveryFailedError) as err:
        r.check()
    e = err.value
    assert e.event_ids == ["e1"]  # the subscription message has no event id
    assert [f.topic for f in e.failures] == ["dls.node.A.publish", "dls.node.A.subscribe"]
    assert "2 message(s) not delivered" in str(e) and "event 'e1'" in str(e)
    assert (e.field, e.value) == ("delivery", "dls.node.A.publish")
    r.check()  # told once


def test_a_callers_own_callback_still_gets_every_report() -> None:
    seen: list[object] = []
    r = DeliveryReports("alice", also=lambda err, msg: seen.append(err))
    r.on_delivery(None, _msg())
    r.of_event("e1")(KafkaError(KafkaError._MSG_TIMED_OUT), _msg())
    assert len(seen) == 2 and seen[0] is None and r.count == 1


def test_failures_past_the_kept_ones_are_counted() -> None:
    r = DeliveryReports("alice")
    err = KafkaError(KafkaError._MSG_TIMED_OUT)
    for i in range(FAILURES_KEPT + 5):
        r.of_event(f"e{i}")(err, _msg())
    with pytest.raises(DeliveryFailedError) as exc:
        r.check()
    assert f"{FAILURES_KEPT + 5} message(s)" in str(exc.value)
    assert len(exc.value.failures) == FAILURES_KEPT
