"""Errors of the broker node (state machine, overlay and service)."""

from __future__ import annotations

from dls.exceptions import DLSError

__all__ = [
    "BrokerError",
    "DuplicateSubscriptionError",
    "LabelSpaceError",
    "SubscriptionOwnerError",
    "TopologyError",
    "UnknownNeighbourError",
    "UnknownSubscriptionError",
]


class BrokerError(DLSError):
    """Root of the broker node's errors."""


class UnknownSubscriptionError(BrokerError, KeyError):
    """An unsubscription names a subscription id this node never accepted."""


class SubscriptionOwnerError(BrokerError, PermissionError):
    """A client tried to unsubscribe another client's subscription."""


class DuplicateSubscriptionError(BrokerError, ValueError):
    """A subscription id is reused for different content or by another client."""


class LabelSpaceError(BrokerError, ValueError):
    """A label lies outside the label space of an exact count table."""


class UnknownNeighbourError(BrokerError, KeyError):
    """A link message names a node that is not a neighbour."""


class TopologyError(BrokerError, ValueError):
    """The overlay topology is invalid (cycle, unknown node, self-link, ...)."""
