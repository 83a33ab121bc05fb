"""Closing Kafka clients so that their librdkafka instances end, without hanging.

A client that is never closed keeps its threads (and its retries to a broker that may be
gone) until the process exits; a plain ``close()`` can wait out long timeouts or hang.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer, KafkaException, Producer

__all__ = ["close_consumer", "close_producer"]

_log = logging.getLogger(__name__)


def close_consumer(consumer: Consumer, timeout: float = 10.0) -> None:
    """Leave the group, serve the rebalance that causes, then close ``consumer``.

    A plain ``close()`` can hang for good, holding the GIL (so every thread of the process
    stops), when it serves a rebalance whose assignment is still in flight: the default
    rebalance callback's ``assign`` waits for a reply the terminating group never sends.
    A consumer closed soon after ``subscribe`` hit it within a few tries (confluent-kafka
    2.16, librdkafka 2.16, static membership); a stack taken with gdb showed
    ``Consumer_close -> rd_kafka_consumer_close -> rd_kafka_poll_cb ->
    Consumer_rebalance_cb -> rd_kafka_assign -> rd_kafka_op_req``. Here ``poll`` serves the
    rebalance events first, outside ``close``. Messages it returns are dropped: the
    project's consumers never commit on their own (``enable.auto.commit`` is off), so they
    are read again after a restart.
    """
    try:
        consumer.unsubscribe()
        deadline = time.monotonic() + timeout
        while True:
            consumer.poll(0.05)  # serves the rebalance callbacks; a message is dropped
            if not consumer.assignment() or time.monotonic() >= deadline:
                break
    except (KafkaException, RuntimeError) as exc:  # closed already, or the broker is gone
        _log.debug("before close: %r", exc)
    consumer.close()


def close_producer(producer: Producer) -> None:
    """Drop what ``producer`` still queues, then close it: its librdkafka instance ends.

    ``close()`` alone flushes first, which waits out ``message.timeout.ms`` when the broker
    is gone: a caller that wants what is queued delivered flushes before, with its own
    bound. The producer is closed even when the purge fails (a fatal error).
    """
    try:
        producer.purge()
    finally:
        producer.close()
