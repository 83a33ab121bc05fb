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

A topic may take less than a broker's default (its ``max.message.bytes``), and Kafka
applies that limit to a whole record batch, not to one message: librdkafka packs many
small messages into one batch, and a topic of 100,000 bytes refused every one of 5,000
messages of 100 bytes (measured on the local Kafka). That refusal comes back from the
broker, in a delivery report, and stopped the node on ordinary traffic. So a node reads,
at start, what the topics it writes and its brokers take (:func:`read_message_limit`),
and keeps its producer's messages and batches below the smallest (:class:`MessageLimit`):
a message too large for it is then refused at once, where the ways above apply.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException

from broker_node.exceptions import BrokerError
from connectors.topic_settings import record_batch_limits
from connectors.topics import HEADER_CLIENTS

if TYPE_CHECKING:
    from broker_node.config import NodeSettings

__all__ = ["BATCH_FRAMING_BYTES", "DEAD_LETTER_HEADER_BYTES", "DEAD_LETTER_RAW_BYTES",
           "MIN_MESSAGE_BYTES", "MISSING_HINT", "NODE_MESSAGE_MAX_BYTES", "REFUSED_HINT",
           "MessageLimit", "halves", "is_too_large", "limit_of", "node_limit",
           "read_message_limit", "refusal_hint"]

log = logging.getLogger(__name__)

#: The node producer's ``message.max.bytes``: 40,000 bytes above librdkafka's default (a
#: publisher's), 8,588 below a broker's default ``message.max.bytes`` (1,048,588), which
#: a record batch of one message must not pass (its framing: about 100 bytes).
NODE_MESSAGE_MAX_BYTES = 1_040_000

#: Bytes of a value a dead letter keeps (the rest is cut, and its reason says so): a dead
#: letter holds the value and more, and must fit in a message itself.
DEAD_LETTER_RAW_BYTES = 512 * 1024
#: Bytes of headers (names and values) a dead letter keeps, in their order.
DEAD_LETTER_HEADER_BYTES = 64 * 1024
#: Bytes kept free below a topic's ``max.message.bytes`` for a record batch's framing (a
#: batch header is 61 bytes, each record's lengths and offsets a few more; 100 were
#: enough in a test of messages at the limit).
BATCH_FRAMING_BYTES = 1024
#: The smallest message a node runs with: its dead letters, link messages and snapshot
#: chunks are cut to a share of it.
MIN_MESSAGE_BYTES = 16 * 1024
#: librdkafka's default ``batch.size``, which the node keeps when the topics take more.
LIBRDKAFKA_BATCH_BYTES = 1_000_000


@dataclass(frozen=True)
class MessageLimit:
    """How large a message of the node's, and a batch of them, may be; and who says so.

    ``source`` names the topic (or ``"broker <id>"``) whose setting set ``bytes``, or the
    node's own default.
    """

    bytes: int = NODE_MESSAGE_MAX_BYTES
    source: str = "the node's default"

    def producer_config(self) -> dict[str, int]:
        """The librdkafka settings that keep single messages and batches within the limit."""
        return {"message.max.bytes": self.bytes,
                "batch.size": min(self.bytes, LIBRDKAFKA_BATCH_BYTES)}

    @property
    def dead_letter_raw(self) -> int:
        """Bytes of a bad value a dead letter keeps: half a message at most."""
        return self.share(DEAD_LETTER_RAW_BYTES)

    @property
    def dead_letter_headers(self) -> int:
        """Bytes of headers a dead letter keeps: an eighth of a message at most."""
        return self.share(DEAD_LETTER_HEADER_BYTES, 4)

    def share(self, most: int, per_item: int = 1) -> int:
        """How many items of ``per_item`` bytes fill half a message, at most ``most``.

        At the node's default limit, ``most`` itself: the sizes of the node's own messages
        are chosen to fit it.
        """
        if self.bytes >= NODE_MESSAGE_MAX_BYTES:
            return most
        return max(1, min(most, self.bytes // 2 // per_item))

    def __str__(self) -> str:
        return f"{self.bytes:,} bytes: {self.source}"


def limit_of(limits: Mapping[str, int]) -> MessageLimit:
    """The limit a node's producer keeps, given ``max.message.bytes`` by topic (or broker).

    The smallest setting less :data:`BATCH_FRAMING_BYTES`, and never more than
    :data:`NODE_MESSAGE_MAX_BYTES`.

    Raises:
        BrokerError: The smallest leaves less than :data:`MIN_MESSAGE_BYTES`; the error
            names the topic (``value``) and its setting.
    """
    if not limits:
        return MessageLimit()
    name = min(limits, key=lambda n: (limits[n], n))
    usable = limits[name] - BATCH_FRAMING_BYTES
    if usable < MIN_MESSAGE_BYTES:
        what = "message.max.bytes" if name.startswith("broker ") else "max.message.bytes"
        raise BrokerError(f"{name} takes record batches of at most {limits[name]:,} bytes "
                          f"({what}); a node needs at least "
                          f"{MIN_MESSAGE_BYTES + BATCH_FRAMING_BYTES:,}", field=what,
                          value=name)
    if usable >= NODE_MESSAGE_MAX_BYTES:
        return MessageLimit()
    return MessageLimit(usable, f"{name} takes {limits[name]:,}")


def read_message_limit(node: str, bootstrap: str, topics: Iterable[str], *,
                       prefix: str | None = None, kafka: Mapping[str, Any] | None = None
                       ) -> MessageLimit:
    """The :func:`limit_of` the ``topics`` a node writes, and of its brokers, read now.

    Topics that do not exist yet are left out, and existing ones named ``prefix``... are
    read too (the per-client delivery topics). What cannot be read (a node without the
    right to describe a topic's settings) is logged and left out: the node then keeps what
    it could read, as it did before.
    """
    limits, unread = record_batch_limits(bootstrap, topics, prefix=prefix, kafka=kafka)
    for name, why in sorted(unread.items()):
        log.warning("node %s: cannot read how large a message %s takes (%s); assuming the "
                    "others' limit", node, name, why)
    limit = limit_of(limits)
    if limit.bytes < NODE_MESSAGE_MAX_BYTES:
        log.warning("node %s: messages and batches kept to %s", node, limit)
    return limit


def node_limit(s: NodeSettings) -> MessageLimit:
    """:func:`read_message_limit` of every topic the node of ``s`` writes."""
    t = s.topics()
    return read_message_limit(s.node, s.bootstrap, [
        t.deadletter, t.node_snapshot(s.node), t.shared_deliver,
        *(t.link(s.node, n) for n in s.neighbours),
        *(t.forward(s.node, n) for n in s.neighbours)],
        prefix=None if s.shared_delivery_partitions else f"{t.prefix}.deliver.",
        kafka=s.kafka_security())


def _code(err: Any) -> int | None:
    """The KafkaError code of ``err`` (an exception, a KafkaError, None); None if it has none."""
    if isinstance(err, KafkaException) and err.args:
        err = err.args[0]
    return err.code() if isinstance(err, KafkaError) else None


def is_too_large(err: Any) -> bool:
    """True if ``err`` (an exception, a KafkaError, None) refuses a message for its size."""
    return _code(err) == KafkaError.MSG_SIZE_TOO_LARGE


#: Said after a broker's refusal of a message's size: only a topic changed since the start
#: refuses what the node sends (a restart reads the topics' settings again).
REFUSED_HINT = ("; a topic the node writes takes less than when the node started "
                "(max.message.bytes): a restart reads what each topic takes again")


#: Said after "unknown topic or partition": a topic the node writes was deleted under it
#: (measured: deleting a client's delivery topic made the next transaction that wrote to it
#: fail in AddPartitionsToTxn, and the node stop); its restart creates the topics again.
MISSING_HINT = ("; a topic the node writes is gone (a client's delivery topic deleted by "
                "hand or by a tool?): the restart creates every delivery topic again, "
                "empty (what the deleted one held is lost)")


def refusal_hint(err: Any) -> str:
    """What to do after a broker's refusal, said after the error ("" when nothing).

    :data:`REFUSED_HINT` for a message's size (:func:`is_too_large`), :data:`MISSING_HINT`
    for a missing topic.
    """
    code = _code(err)
    if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return MISSING_HINT
    return REFUSED_HINT if code == KafkaError.MSG_SIZE_TOO_LARGE else ""


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
