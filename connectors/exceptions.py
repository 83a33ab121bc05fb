"""Errors of the connectors: the wire contract (serde, topic names) and the Kafka plumbing."""

from __future__ import annotations

from dls.exceptions import DLSError

__all__ = [
    "ConnectorError",
    "ConnectorSettingError",
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


class LocalKafkaError(ConnectorError, RuntimeError):
    """The local Kafka broker (``docker/kafka/kafka.sh``) could not be started or stopped."""
