"""A consumed batch as runs of one kind, and transactions closed before they time out.

:meth:`broker_node.service.NodeService.process` walks a batch in order: each run of events
is routed as one, each run of control messages applied as one. Exactly once, a batch is
one Kafka transaction, and the coordinator aborts a transaction still open
``transaction_timeout_ms`` after its first output; the producer is then fenced, and the
node stopped. Measured on the local Kafka with a timeout of 1 s: an event, then 200
subscriptions of 65,536 labels each in the same batch, stopped the node after 4.4 s
("This instance has been fenced by a newer instance"). At the default 60 s a batch of
1,000 such subscriptions took 23 s here: a slower machine, a larger ``batch_size`` or
label budget would stop the node on input it is meant to take.

So between two runs, a transaction open for more than :data:`TIMEOUT_SHARE` of the
timeout is committed with the offsets of what is done (:func:`checkpoint`), and the rest
of the batch goes in a new one; and a run of control messages is cut every
:data:`CONTROL_RUN_BYTES` of values, a run of events every :data:`EVENT_RUN_EVENTS` events,
so that no single run takes long. What was committed stays committed if the rest fails:
the restart resumes after it.

Why events too: a batch of the largest ``batch_size`` (100,000) whose events each go to a
few hundred clients' topics produces tens of millions of messages; as one run it could
outlast the whole timeout, and the restart, reading the same batch, would be fenced again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from confluent_kafka import Message

__all__ = ["CONTROL_RUN_BYTES", "EVENT_RUN_EVENTS", "TIMEOUT_SHARE", "checkpoint", "runs"]

log = logging.getLogger(__name__)

#: Values of control messages in one run at most (about 500,000 labels): cut beyond.
CONTROL_RUN_BYTES = 4 * 2**20
#: Events in one run at most: twice the default ``batch_size``, so that a default batch of
#: events is routed as one (the matching works in batches), a larger one in parts.
EVENT_RUN_EVENTS = 2_000
#: Share of ``transaction_timeout_ms`` after which a batch's transaction is committed
#: between two runs, the rest of the batch going in a new one.
TIMEOUT_SHARE = 0.25


def runs(msgs: Sequence[Message], is_event: Callable[[Message], bool]
         ) -> Iterator[tuple[bool, list[Message]]]:
    """``(events?, messages)`` of each run of consecutive messages of one kind, in order.

    A run of control messages ends once its values pass :data:`CONTROL_RUN_BYTES` (a run
    holds one message at least), a run of events at :data:`EVENT_RUN_EVENTS` events.
    ``is_event`` is asked once per message, in order.
    """
    run: list[Message] = []
    kind, size = False, 0
    for msg in msgs:
        event = is_event(msg)
        n = 0 if event else len(msg.value() or b"")
        if run and (event != kind or (size + n > CONTROL_RUN_BYTES if not event
                                      else len(run) >= EVENT_RUN_EVENTS)):
            yield kind, run
            run, size = [], 0
        run.append(msg)
        kind, size = event, size + n
    if run:
        yield kind, run


def checkpoint(committer: Any, msgs: Sequence[Message], done: int, node: str) -> bool:
    """Commit the first ``done`` of ``msgs`` if the batch's transaction is old; True if so.

    Old: open for more than :data:`TIMEOUT_SHARE` of the transaction timeout. A new
    transaction is begun for the rest of the batch. At least once there is no transaction
    to time out, and without a consumer (a test without Kafka) nothing is committed:
    nothing to do.
    """
    if not committer.transactional or committer.consumer is None or not done:
        return False
    age = time.monotonic() - committer.opened
    timeout_s = committer.settings.transaction_timeout_ms / 1000.0
    if age < TIMEOUT_SHARE * timeout_s:
        return False
    log.info("node %s: batch %d open for %.1f s (transaction timeout %.0f s): its first %d "
             "of %d messages are committed now, the rest go in a new transaction", node,
             committer.batch, age, timeout_s, done, len(msgs))
    committer.commit(msgs[:done])
    committer.begin()
    return True
