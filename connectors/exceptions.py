"""Errors of the connectors: the wire contract (serde, topic names) and the Kafka plumbing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dls.exceptions import DLSError

__all__ = [
    "ConnectorError",
    "ConnectorSettingError",
    "DeliveryFailedError",
    "FailedMessage",
    "LocalKafkaError",
    "SerdeError",
    "TopicNameError",
]


class ConnectorError(DLSError):
    """Root of the connectors' errors."""


class SerdeError(ConnectorError, ValueError):
    """Bytes that do not decode, or a record that does not fit its schema."""


class TopicNameError(ConnectorError, ValueError):
    """A topic prefix, node or client name that cannot be part of a Kafka topic name."""


class ConnectorSettingError(ConnectorError, ValueError):
    """A connector setting (a size, a timeout, a Kafka option) that cannot be used."""


class SubscriptionTooLargeError(ConnectorError, ValueError):
    """A subscription whose labels (and text) do not fit in one Kafka message."""


@dataclass(frozen=True)
class FailedMessage:
    """One message Kafka did not take: where it went, its event id if any, and why."""

    topic: str
    partition: int
    event_id: str | None
    error: str

    def __str__(self) -> str:
        what = f"event {self.event_id!r}" if self.event_id is not None else "a message"
        return f"{what} to {self.topic}[{self.partition}]: {self.error}"


class DeliveryFailedError(ConnectorError):
    """Messages a client gave its producer that Kafka did not take (see ``failures``)."""

    def __init__(self, message: str, *, failures: list[FailedMessage], field: str | None = None,
                 value: Any = None) -> None:
        """``failures``: the messages, in the order their reports came."""
        super().__init__(message, field=field, value=value)
        self.failures = failures

    @property
    def event_ids(self) -> list[str]:
        """The ids of the events among ``failures`` (to publish them again)."""
        return [f.event_id for f in self.failures if f.event_id is not None]


class LocalKafkaError(ConnectorError, RuntimeError):
    """The local Kafka broker (``docker/kafka/kafka.sh``) could not be started or stopped."""
