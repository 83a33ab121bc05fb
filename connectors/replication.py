"""How the topics a node or client creates are replicated: settings and their check.

A topic's replication factor and ``min.insync.replicas`` are the node's
``replication_factor`` and ``min_insync_replicas`` (the SDK's and the commands' options of
the same names); None leaves each to the cluster's defaults (``default.replication.factor``,
``min.insync.replicas``: 1 and 1 on a single broker, 3 and 2 on ``kafka.sh``'s
``BROKERS=3`` cluster). Every producer writes with ``acks=all``
(:data:`connectors.kafka.PRODUCER_DEFAULTS`), so a write is acknowledged once
``min.insync.replicas`` replicas have it, and refused while fewer are in sync.
"""

from __future__ import annotations

from typing import TypedDict

from connectors.exceptions import ConnectorSettingError

__all__ = ["TopicReplication", "check_replication", "topic_replication"]


class TopicReplication(TypedDict):
    """Replication of created topics, for ``**`` into ``ensure_topics`` (None: default)."""

    replication: int | None
    min_insync: int | None


def check_replication(replication: int | None, min_insync: int | None, *,
                      names: tuple[str, str] = ("replication", "min_insync")) -> None:
    """Raise unless ``replication`` and ``min_insync`` can be a topic's settings.

    Each is None (the cluster's ``default.replication.factor`` and ``min.insync.replicas``)
    or an integer >= 1, and ``min_insync`` is at most ``replication`` when both are given
    (more in-sync replicas than replicas would refuse every ``acks=all`` write).

    Args:
        replication: The replication factor, or None.
        min_insync: ``min.insync.replicas``, or None.
        names: The fields to name in the error (a node's ``replication_factor``, ...).

    Raises:
        ConnectorSettingError: naming the field and the value (a ``ValueError`` too).
    """
    for field, value in zip(names, (replication, min_insync), strict=True):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ConnectorSettingError(f"{field} must be an integer >= 1 or None, got "
                                        f"{value!r}", field=field, value=value)
    if replication is not None and min_insync is not None and min_insync > replication:
        raise ConnectorSettingError(
            f"{names[1]} ({min_insync}) must not exceed {names[0]} ({replication}): a write "
            f"with acks=all would never have enough in-sync replicas",
            field=names[1], value=min_insync)


def topic_replication(replication: int | None, min_insync: int | None, *,
                      names: tuple[str, str] = ("replication", "min_insync")
                      ) -> TopicReplication:
    """The settings, checked by :func:`check_replication`, as a :class:`TopicReplication`."""
    check_replication(replication, min_insync, names=names)
    return TopicReplication(replication=replication, min_insync=min_insync)
