"""Kafka plumbing shared by the node service, the client SDK, the replay and the tests.

* :func:`producer_config`, :func:`consumer_config` and :func:`admin` build clients with the
  project's defaults (safe and low-latency producers, read-committed consumers that commit
  only explicitly);
* :func:`ensure_topics` creates missing topics and waits until the metadata shows them;
* :func:`wait_for_broker` waits until a broker answers;
* :func:`is_fatal`, :func:`check_message` and :func:`consume_batch` handle the errors a
  consume loop meets, in the style of confluent-kafka's ``examples/eos_transactions.py``:
  a fatal error raises :class:`~connectors.exceptions.ConnectorError`, a partition EOF or a
  transient error is logged and skipped;
* :func:`source_of` names a message's position, ``"topic[partition]@offset"``.

Extra client settings are keyword arguments named as in librdkafka's CONFIGURATION.md or the
Python client (``**{"linger.ms": 0}``, ``log_level=2``, ``error_cb=...``); a value of
``None`` removes a default.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from connectors.exceptions import ConnectorError, ConnectorSettingError
from connectors.replication import check_replication
from connectors.topics import source_of as _position

_T = TypeVar("_T")

__all__ = [
    "CONSUMER_DEFAULTS",
    "PRODUCER_DEFAULTS",
    "admin",
    "check_message",
    "committed_offsets",
    "consume_batch",
    "consumer_config",
    "ensure_partitioned_topic",
    "ensure_topics",
    "is_fatal",
    "next_offsets",
    "offsets_to_commit",
    "producer_config",
    "source_of",
    "wait_for_broker",
    "watermark_offsets",
]

_log = logging.getLogger(__name__)

PRODUCER_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 2,
        "compression.type": "none",
    }
)
"""Producer settings unless overridden: no loss, no duplicates, little batching delay."""

CONSUMER_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "enable.partition.eof": False,
    }
)
"""Consumer settings unless overridden: explicit commits, committed transactions only."""

# Non-retriable errors that no retry loop can get past: wrong credentials or missing ACLs.
_FATAL_CODES = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)

#: Codes fatal whatever the error's flags say (see :func:`is_fatal`).
_ALWAYS_FATAL = frozenset({KafkaError._FATAL, KafkaError.FENCED_INSTANCE_ID})

# Poll interval while waiting for metadata or a broker, seconds.
_POLL_S = 0.1


def _merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated with ``overrides``, where a ``None`` value deletes the key."""
    conf = dict(base)
    for key, value in overrides.items():
        if value is None:
            conf.pop(key, None)
        else:
            conf[key] = value
    return conf


def _check_bootstrap(bootstrap: str) -> str:
    """Return ``bootstrap`` stripped; raise :class:`ConnectorSettingError` when it is empty."""
    if not isinstance(bootstrap, str) or not bootstrap.strip():
        raise ConnectorSettingError(
            f"bootstrap servers must be a non-empty 'host:port' string, got {bootstrap!r}",
            field="bootstrap", value=bootstrap)
    return bootstrap.strip()


def producer_config(
    bootstrap: str, *, transactional_id: str | None = None, **overrides: Any
) -> dict[str, Any]:
    """Configuration for a ``confluent_kafka.Producer``.

    Args:
        bootstrap: Bootstrap servers, ``"host:port[,host:port...]"``.
        transactional_id: Makes the producer transactional (call ``init_transactions()``
            before producing); a restarted process with the same id fences its predecessor.
        **overrides: Further or different settings (see the module docstring).

    Returns:
        A fresh dict; :data:`PRODUCER_DEFAULTS` plus ``bootstrap.servers``, the
        transactional id and the overrides.

    Raises:
        ConnectorSettingError: ``bootstrap`` or ``transactional_id`` is empty (a
            ``ValueError`` too).
    """
    conf = {"bootstrap.servers": _check_bootstrap(bootstrap), **PRODUCER_DEFAULTS}
    if transactional_id is not None:
        if not transactional_id:
            raise ConnectorSettingError("transactional_id must not be empty",
                                        field="transactional_id", value=transactional_id)
        conf["transactional.id"] = transactional_id
    return _merge(conf, overrides)


def consumer_config(bootstrap: str, group_id: str, **overrides: Any) -> dict[str, Any]:
    """Configuration for a ``confluent_kafka.Consumer``.

    Args:
        bootstrap: Bootstrap servers, ``"host:port[,host:port...]"``.
        group_id: The consumer group; its committed offsets are where a restart resumes.
        **overrides: Further or different settings (see the module docstring).

    Returns:
        A fresh dict; :data:`CONSUMER_DEFAULTS` plus ``bootstrap.servers``, ``group.id`` and
        the overrides.

    Raises:
        ConnectorSettingError: ``bootstrap`` or ``group_id`` is empty (a ``ValueError`` too).
    """
    if not group_id:
        raise ConnectorSettingError("group_id must not be empty", field="group_id",
                                    value=group_id)
    conf = {"bootstrap.servers": _check_bootstrap(bootstrap), "group.id": group_id}
    conf.update(CONSUMER_DEFAULTS)
    return _merge(conf, overrides)


def admin(bootstrap: str, **overrides: Any) -> AdminClient:
    """An ``AdminClient`` for ``bootstrap`` (``overrides`` as in :func:`producer_config`)."""
    return AdminClient(_merge({"bootstrap.servers": _check_bootstrap(bootstrap)}, overrides))


def _kafka_error(exc: BaseException) -> KafkaError | None:
    """The ``KafkaError`` inside a ``KafkaException``, if there is one."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def _not_ready(md: Any, names: Iterable[str]) -> list[str]:
    """The ``names`` that metadata ``md`` lacks, or shows with an error or a leaderless part."""
    pending = []
    for name in names:
        topic = md.topics.get(name)
        if (
            topic is None
            or topic.error is not None
            or not topic.partitions
            or any(p.leader < 0 or p.error is not None for p in topic.partitions.values())
        ):
            pending.append(name)
    return pending


def ensure_topics(
    bootstrap: str,
    names: Iterable[str],
    *,
    partitions: int = 1,
    replication: int | None = None,
    min_insync: int | None = None,
    config: Mapping[str, str | int] | None = None,
    timeout: float = 30.0,
    kafka: Mapping[str, Any] | None = None,
) -> None:
    """Create the topics of ``names`` that do not exist yet and wait until all are usable.

    Idempotent and safe against concurrent creators: an existing topic is left as it is
    (its partition count and settings are not changed).

    Args:
        bootstrap: Bootstrap servers.
        names: Topic names; duplicates are fine.
        partitions: Partitions of each created topic.
        replication: Replication factor of each created topic (None: the cluster's).
        min_insync: ``min.insync.replicas`` of each (unless ``config`` has it; None: the
            cluster's); see :mod:`connectors.replication`.
        config: Topic settings of each created topic, e.g. ``{"retention.ms": -1}``.
        timeout: Seconds for creation plus the wait for the metadata.
        kafka: Further admin client settings (security: :mod:`connectors.kafka_config`).

    Raises:
        ConnectorError: A topic could not be created (invalid name, no permission, ...) or
            did not show up in the metadata within ``timeout``.
        ConnectorSettingError: ``partitions``, ``replication`` or ``min_insync`` is below
            1, or ``min_insync`` exceeds ``replication`` (a ``ValueError`` too).
    """
    wanted = list(dict.fromkeys(names))
    if not wanted:
        return
    if partitions < 1:
        raise ConnectorSettingError(f"partitions must be >= 1, got {partitions}",
                                    field="partitions", value=partitions)
    check_replication(replication, min_insync)
    deadline = _Deadline(timeout)
    client = admin(bootstrap, **(kafka or {}))
    existing = _topic_names(client, bootstrap, deadline)
    missing = [n for n in wanted if n not in existing]
    if missing:
        topic_config = dict(config or {})
        if min_insync is not None:
            topic_config.setdefault("min.insync.replicas", min_insync)
        _create(client, bootstrap, missing, partitions,
                -1 if replication is None else replication, topic_config, deadline)
    _wait_until_ready(client, bootstrap, wanted, deadline)


class _Deadline:
    """The time left of ``timeout`` seconds from now (at least 0.1 s, as a request timeout)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.at = time.monotonic() + timeout

    def left(self) -> float:
        return max(self.at - time.monotonic(), 0.1)

    def passed(self) -> bool:
        return time.monotonic() >= self.at


def _topic_names(client: AdminClient, bootstrap: str, deadline: _Deadline) -> Any:
    """The topics the cluster has, asked in short attempts until the deadline.

    One lost metadata request is not fatal.
    """
    while True:
        try:
            return client.list_topics(timeout=min(deadline.left(), 5.0)).topics
        except KafkaException as exc:
            if deadline.passed():
                raise ConnectorError(
                    f"cannot read topic metadata from {bootstrap} within "
                    f"{deadline.timeout:g}s: {exc}") from exc
            _log.warning("metadata request to %s failed (%s); retrying", bootstrap, exc)
            time.sleep(_POLL_S)


def _create(client: AdminClient, bootstrap: str, names: list[str], partitions: int,
            replication: int, config: Mapping[str, str | int], deadline: _Deadline) -> None:
    """Create ``names`` (replication -1: the cluster's); one made meanwhile counts."""
    topic_config = {k: str(v) for k, v in config.items()}
    new = [NewTopic(n, partitions, replication, config=topic_config) for n in names]
    left = deadline.left
    futures = client.create_topics(new, operation_timeout=left(), request_timeout=left())
    for name, future in futures.items():
        try:
            future.result(timeout=left())
        except KafkaException as exc:
            err = _kafka_error(exc)
            if err is not None and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise ConnectorError(
                f"cannot create topic {name!r} on {bootstrap}: {exc}", field="topic", value=name
            ) from exc
        except concurrent.futures.TimeoutError as exc:
            raise ConnectorError(
                f"creating topic {name!r} on {bootstrap} took longer than "
                f"{deadline.timeout:g}s",
                field="topic",
                value=name,
            ) from exc
        _log.info("created topic %s (%d partitions)", name, partitions)


def _wait_until_ready(client: AdminClient, bootstrap: str, names: list[str],
                      deadline: _Deadline) -> None:
    """Return once the metadata shows every topic of ``names`` with a leader everywhere."""
    pending = names
    while True:
        try:
            pending = _not_ready(client.list_topics(timeout=min(deadline.left(), 5.0)),
                                 pending)
        except KafkaException as exc:
            _log.debug("metadata request failed, retrying: %s", exc)
        if not pending:
            return
        if deadline.passed():
            raise ConnectorError(
                f"topics not ready on {bootstrap} after {deadline.timeout:g}s: "
                f"{', '.join(pending)}",
                field="topic",
                value=pending[0],
            )
        time.sleep(_POLL_S)


def ensure_partitioned_topic(bootstrap: str, name: str, partitions: int, *,
                             timeout: float = 30.0,
                             kafka: Mapping[str, Any] | None = None,
                             replication: int | None = None,
                             min_insync: int | None = None) -> None:
    """Create ``name`` with ``partitions`` partitions if absent; check the count if present.

    For topics whose readers and writers pick partitions by a hash of a name (the shared
    delivery topic): a different count would send a client's messages where it does not
    read, so it is refused rather than used.

    Raises:
        ConnectorError: The topic exists with another partition count (``field`` is
            ``"partitions"``, ``value`` the count found), or could not be created.
    """
    ensure_topics(bootstrap, [name], partitions=partitions, timeout=timeout, kafka=kafka,
                  replication=replication, min_insync=min_insync)
    deadline = _Deadline(timeout)
    client = admin(bootstrap, **(kafka or {}))
    while True:
        try:
            meta = client.list_topics(name, timeout=deadline.left()).topics.get(name)
        except KafkaException as exc:
            raise ConnectorError(f"cannot read topic metadata from {bootstrap}: {exc}") from exc
        found = len(meta.partitions) if meta is not None and meta.error is None else 0
        # None yet: another process created it a moment ago and this broker has not heard
        if found or deadline.passed():
            break
        time.sleep(0.2)
    if found != partitions:
        raise ConnectorError(
            f"topic {name!r} has {found} partitions, this network is configured for "
            f"{partitions}; the partition of each client would differ between writers and "
            f"readers", field="partitions", value=found)


# A group coordinator that is not there yet: on a fresh broker the first group use creates
# __consumer_offsets, and for a moment lookups answer with these.
_COORDINATOR_NOT_READY = frozenset({
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
})


# A partition whose leader is not known yet: just after its topic was created, or while the
# broker moves leadership; metadata catches up within moments.
_LEADER_NOT_READY = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
    KafkaError.REPLICA_NOT_AVAILABLE, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
})


def _retrying(call: Callable[[float], _T], what: str, retry_codes: frozenset[int],
              timeout: float, retry_s: float) -> _T:
    """``call(per_call_timeout)`` until it succeeds, for up to ``timeout`` seconds in all.

    Retried: the errors in ``retry_codes`` and those librdkafka marks retriable.
    """
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            return call(max(1.0, min(30.0, left)))
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            retriable = err is not None and (err.code() in retry_codes or err.retriable())
            if not retriable or time.monotonic() + retry_s > deadline:
                raise ConnectorError(f"{what} failed: {exc}") from exc
            _log.warning("%s: %s; retrying", what, err)
            time.sleep(retry_s)


def committed_offsets(consumer: Consumer, partitions: list[TopicPartition],
                      timeout: float = 60.0, retry_s: float = 0.5) -> list[TopicPartition]:
    """``consumer.committed(partitions)``, retried while the group coordinator is not ready.

    Raises:
        ConnectorError: Still failing after ``timeout`` seconds, or a non-retriable error.
    """
    return _retrying(lambda t: consumer.committed(partitions, timeout=t),
                     "reading committed offsets", _COORDINATOR_NOT_READY, timeout, retry_s)


def watermark_offsets(consumer: Consumer, tp: TopicPartition, timeout: float = 60.0,
                      retry_s: float = 0.5) -> tuple[int, int]:
    """``consumer.get_watermark_offsets(tp)`` from the broker, retried while needed.

    Retried while the partition's leader is not known (a topic created a moment ago, a leader
    moving) or the broker does not answer.

    Raises:
        ConnectorError: Still failing after ``timeout`` seconds, or a non-retriable error.
    """
    def ask(t: float) -> tuple[int, int]:
        got = consumer.get_watermark_offsets(tp, timeout=t, cached=False)
        if got is None:  # no answer within t
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return int(got[0]), int(got[1])

    return _retrying(ask, f"reading the offsets of {tp.topic}[{tp.partition}]",
                     _LEADER_NOT_READY, timeout, retry_s)


def wait_for_broker(bootstrap: str, timeout: float = 30.0,
                    kafka: Mapping[str, Any] | None = None) -> None:
    """Return once a broker of ``bootstrap`` answers a metadata request.

    Args:
        bootstrap: Bootstrap servers.
        timeout: Seconds to keep trying.
        kafka: Further admin client settings (security).

    Raises:
        ConnectorError: No broker answered within ``timeout``; the message names the
            address and the last error.
    """
    deadline = time.monotonic() + timeout
    # Connection failures are expected while waiting: keep librdkafka's log quiet (level 2
    # drops its "Connect ... failed" errors); the last error goes into the exception.
    client = admin(bootstrap, **{**(kafka or {}), "log_level": 2})
    last: object = "no answer"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ConnectorError(
                f"no Kafka broker answered at {bootstrap} within {timeout:g}s ({last}); "
                "is it running? (`make kafka-up` starts a local one)",
                field="bootstrap",
                value=bootstrap,
            )
        try:
            if client.list_topics(timeout=min(max(left, 0.1), 5.0)).brokers:
                return
            last = "metadata lists no brokers"
        except KafkaException as exc:
            last = _kafka_error(exc) or exc
        time.sleep(min(_POLL_S, max(deadline - time.monotonic(), 0.0)))


def is_fatal(err: KafkaError) -> bool:
    """Tell whether ``err`` ends the client: librdkafka says so, or credentials/ACLs fail.

    A consumer's fatal error reaches the application as an error event with code
    ``_FATAL`` whose ``fatal()`` flag is not set (confluent-kafka 2.16): a static member
    fenced by the broker (``FENCED_INSTANCE_ID``: librdkafka can fence itself when it
    rejoins after the broker came back) never consumes again, so it must stop the
    process for its supervisor to start a fresh one, never be skipped.
    """
    if err.fatal() or err.code() in _ALWAYS_FATAL:
        return True
    return not err.retriable() and err.code() in _FATAL_CODES


def source_of(msg: Message) -> str:
    """``"topic[partition]@offset"`` of ``msg``, for logs and dead-letter reasons.

    The format is :func:`connectors.topics.source_of`'s; a part the message lacks (an error
    event without a topic) is written ``None``.
    """
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    if topic is None or partition is None or offset is None:
        return f"{topic}[{partition}]@{offset}"
    return _position(topic, partition, offset)


def check_message(msg: Message | None) -> Message | None:
    """Return ``msg`` if it carries data; ``None`` for nothing or a skippable error.

    A partition EOF is logged at debug level, any other non-fatal error (retriable ones, a
    subscribed topic that does not exist yet, ...) as a warning.

    Raises:
        ConnectorError: ``msg`` carries a fatal error (see :func:`is_fatal`).
    """
    if msg is None:
        return None
    err = msg.error()
    if err is None:
        return msg
    where = source_of(msg) if msg.topic() is not None else "consumer"
    if err.code() == KafkaError._PARTITION_EOF:
        _log.debug("reached end of %s", where)
        return None
    if is_fatal(err):
        raise ConnectorError(
            f"fatal Kafka error at {where}: {err.str()} ({err.name()})",
            field="kafka_error",
            value=err.name(),
        ) from KafkaException(err)
    _log.warning("skipping Kafka error at %s: %s (%s)", where, err.str(), err.name())
    return None


def next_offsets(msgs: Iterable[Message]) -> dict[tuple[str, int], int]:
    """The offset to commit after ``msgs``: one past the last message of each partition.

    Read off the messages themselves: ``Consumer.position(Consumer.assignment())`` says
    the same for the partitions these messages came from, but ``assignment()`` waits on
    librdkafka's main thread, which is slow while it is busy producing.
    Messages of one partition come in offset order, so the last one seen wins.
    """
    # A consumed message always has a topic, partition and offset (None only on
    # messages built by hand).
    msgs = list(msgs)
    if not msgs:
        return {}
    topics = list(map(Message.topic, msgs))
    parts = list(map(Message.partition, msgs))
    if topics.count(topics[0]) == len(msgs) and parts.count(parts[0]) == len(msgs):
        # One partition, the usual batch of a busy node: its last message says it all.
        # The counts compare in C, where hashing a (topic, partition) key per message
        # would run in Python.
        return {(topics[0], parts[0]): msgs[-1].offset() + 1}  # type: ignore[dict-item, operator]
    return {(t, p): m.offset() + 1  # type: ignore[misc, operator]
            for t, p, m in zip(topics, parts, msgs, strict=True)}


def offsets_to_commit(offsets: Mapping[tuple[str, int], int]) -> list[TopicPartition]:
    """``{(topic, partition): offset}`` as the ``TopicPartition`` list commits take."""
    return [TopicPartition(t, p, o) for (t, p), o in offsets.items()]


def consume_batch(consumer: Consumer, max_messages: int, timeout: float) -> list[Message]:
    """Up to ``max_messages`` good messages from ``consumer`` within ``timeout`` seconds.

    Returns as soon as something is there: it waits (at most ``timeout``) for the first
    message only, then takes whatever else is already fetched without waiting, so a batch
    adds no latency at low rates and still fills up under load. Wraps ``consumer.consume``
    and applies :func:`check_message` to each message: skippable
    errors are dropped from the list, so it may be shorter than what was consumed (or empty).

    Raises:
        ConnectorError: A message carried a fatal error, or the consumer itself failed.
        ConnectorSettingError: ``max_messages`` is below 1 (a ``ValueError`` too).
    """
    if max_messages < 1:
        raise ConnectorSettingError(f"max_messages must be >= 1, got {max_messages}",
                                    field="max_messages", value=max_messages)
    try:
        msgs = consumer.consume(num_messages=1, timeout=timeout)
        if msgs and max_messages > 1:
            msgs += consumer.consume(num_messages=max_messages - 1, timeout=0)
    except KafkaException as exc:
        raise ConnectorError(f"consume failed: {exc}") from exc
    # The usual case, checked at C level: far cheaper than check_message on each message.
    if not any(map(Message.error, msgs)):
        return msgs
    return [ok for msg in msgs if (ok := check_message(msg)) is not None]
