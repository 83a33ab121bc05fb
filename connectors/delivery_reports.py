"""What a client's producer could not deliver: kept until the client is told.

librdkafka reports the fate of every message it was given in a delivery report, served by
``poll`` and ``flush``. A producer without a callback for them drops a failure silently:
``flush`` counts only the messages still queued, so a publisher whose event the broker
refused (its topic takes less than the event, no permission, the topic is gone, the
broker stayed away past ``message.timeout.ms``) was told all went well. Here a failure is
logged at once, naming ``topic[partition]`` and the event id, and kept until
:meth:`DeliveryReports.check` (called by :meth:`connectors.client.Client.flush` and
``close``) raises :class:`~connectors.exceptions.DeliveryFailedError` with the ids, so the
application can publish those events again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from connectors.exceptions import DeliveryFailedError, FailedMessage

__all__ = ["FAILURES_KEPT", "DeliveryReports", "FailedMessage"]

_log = logging.getLogger(__name__)

#: Failures kept in detail between two checks (all are counted).
FAILURES_KEPT = 10_000


class DeliveryReports:
    """The delivery callback of a client's producer, and the failures it saw."""

    def __init__(self, owner: str, also: Callable[[Any, Any], None] | None = None) -> None:
        """``owner`` names the client in logs and errors; ``also`` gets every report first."""
        self.owner, self.also = owner, also
        self.failed: list[FailedMessage] = []
        self.count = 0  # failures since the last check, kept or not

    def on_delivery(self, err: Any, msg: Any, event_id: str | None = None) -> None:
        """A delivery report: nothing on success; a failure is logged and kept.

        A report carries no headers: an event's id comes bound (:meth:`of_event`).
        """
        if self.also is not None:
            self.also(err, msg)
        if err is None:
            return
        failure = FailedMessage(msg.topic() or "", msg.partition(), event_id, str(err))
        self.count += 1
        if len(self.failed) < FAILURES_KEPT:
            self.failed.append(failure)
        _log.error("client %s: %s: not delivered", self.owner, failure)

    def of_event(self, event_id: str) -> Callable[[Any, Any], None]:
        """The delivery callback of the event ``event_id``'s message."""
        return partial(self.on_delivery, event_id=event_id)

    def check(self) -> None:
        """Raise for the failures seen since the last check, then forget them.

        Raises:
            DeliveryFailedError: Naming how many failed and the first; ``failures`` holds
                them (up to :data:`FAILURES_KEPT`), ``event_ids`` their event ids.
        """
        if not self.count:
            return
        failed, count = self.failed, self.count
        self.failed, self.count = [], 0
        first = failed[0]
        raise DeliveryFailedError(
            f"client {self.owner}: {count} message(s) not delivered since the last flush; "
            f"the first: {first}", failures=failed, field="delivery", value=first.topic)
