"""Outputs larger than a Kafka message may be: how the node still delivers, or says why not.

librdkafka refuses a message larger than its producer's ``message.max.bytes`` at once
(``MSG_SIZE_TOO_LARGE``). Left to itself, that error would stop the node at the message,
and again after each restart: one event would stop all routing. Instead
(:meth:`broker_node.committers.Committer.send`):

* the node's producer takes messages up to :data:`NODE_MESSAGE_MAX_BYTES`, above the
  1,000,000 bytes a publisher's producer sends by default (its copies carry a header
  more than the event came with) and below the 1,048,588 a broker takes by default;
* a shared-topic delivery that is too large is written as two, each naming half of its
  clients (:func:`halves`), again until each fits;
* an output that cannot be made smaller (a single client, a forward, a dead letter) goes
  to the dead-letter topic instead, its value cut (:data:`DEAD_LETTER_RAW_BYTES`), and is
  counted in ``outputs_too_large``.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException

from connectors.topics import HEADER_CLIENTS

__all__ = ["DEAD_LETTER_HEADER_BYTES", "DEAD_LETTER_RAW_BYTES", "NODE_MESSAGE_MAX_BYTES",
           "halves", "is_too_large"]

#: The node producer's ``message.max.bytes``: 40,000 bytes above librdkafka's default (a
#: publisher's), 8,588 below a broker's default ``message.max.bytes`` (1,048,588), which
#: a record batch of one message must not pass (its framing: about 100 bytes).
NODE_MESSAGE_MAX_BYTES = 1_040_000

#: Bytes of a value a dead letter keeps (the rest is cut, and its reason says so): a dead
#: letter holds the value and more, and must fit in a message itself.
DEAD_LETTER_RAW_BYTES = 512 * 1024
#: Bytes of headers (names and values) a dead letter keeps, in their order.
DEAD_LETTER_HEADER_BYTES = 64 * 1024


def is_too_large(exc: BaseException) -> bool:
    """True if ``exc`` is librdkafka refusing a message for its size."""
    return (isinstance(exc, KafkaException) and bool(exc.args)
            and isinstance(exc.args[0], KafkaError)
            and exc.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE)


def halves(headers: Any) -> tuple[list[Any], list[Any]] | None:
    """A shared-topic delivery's headers as two, each naming half of its clients.

    None when ``headers`` do not end with a :data:`HEADER_CLIENTS` naming two clients or
    more (nothing to split).
    """
    if not headers or headers[-1][0] != HEADER_CLIENTS:
        return None
    names: bytes = headers[-1][1]
    middle = len(names) // 2
    cut = names.rfind(b",", 0, middle + 1)
    if cut < 0:
        cut = names.find(b",", middle)
    if cut < 0:
        return None
    rest = list(headers[:-1])
    return ([*rest, (HEADER_CLIENTS, names[:cut])],
            [*rest, (HEADER_CLIENTS, names[cut + 1:])])
