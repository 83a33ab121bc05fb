"""Errors of the connectors: the wire contract (serde, topic names) and the Kafka plumbing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dls.exceptions import DLSError

if TYPE_CHECKING:
    from connectors.delivery_reports import FailedMessage

__all__ = [
    "ConnectorError",
    "ConnectorSettingError",
    "DeliveryFailedError",
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
