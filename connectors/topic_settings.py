"""Topic settings checked and repaired: a control topic must never lose a record.

:func:`enforce_topic_config` reads the settings of existing topics and sets those that
differ from the wanted ones (for example a control topic auto-created by the broker with
its default retention of seven days, or switched to compaction by hand). Each repair is
logged with the topic, the setting, the old and the new value; a topic that cannot be
repaired (no permission, unknown topic) raises :class:`ConnectorSettingError` naming the
topic and the setting, so that a node refuses to start rather than lose its state later.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from connectors.exceptions import ConnectorSettingError
from connectors.kafka import admin

__all__ = ["enforce_topic_config", "record_batch_limits", "topic_config_mismatches"]

_log = logging.getLogger(__name__)

#: Seconds a topic the broker does not know is asked about again (a topic just created).
UNKNOWN_WAIT_S = 10.0


def topic_config_mismatches(bootstrap: str, names: Iterable[str],
                            config: Mapping[str, str | int], *, timeout: float = 30.0,
                            kafka: Mapping[str, Any] | None = None
                            ) -> dict[str, dict[str, str | None]]:
    """The settings of ``config`` that topics of ``names`` have otherwise, by topic.

    A topic whose settings all match is absent from the result. ``kafka``: extra client
    settings (security).

    In a cluster of several brokers a topic unknown to the broker asked is asked again for
    up to :data:`UNKNOWN_WAIT_S`: a topic just created reaches the brokers' metadata one
    after another.

    Raises:
        ConnectorSettingError: A topic's settings cannot be read (it does not exist, or no
            permission); the error names the topic.
    """
    client = admin(bootstrap, **(kafka or {}))
    want = {k: str(v) for k, v in config.items()}
    pending = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in dict.fromkeys(names)]
    out: dict[str, dict[str, str | None]] = {}
    until = time.monotonic() + min(timeout, UNKNOWN_WAIT_S)
    while pending:
        again = []
        for res, future in client.describe_configs(pending, request_timeout=timeout).items():
            try:
                entries = future.result(timeout=timeout)
            except (KafkaException, concurrent.futures.TimeoutError) as exc:
                err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                if (err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
                        and time.monotonic() < until and _several_brokers(client)):
                    again.append(ConfigResource(ConfigResource.Type.TOPIC, res.name))
                    continue
                raise ConnectorSettingError(f"cannot read the settings of topic {res.name!r} "
                                            f"on {bootstrap}: {exc}", field="topic",
                                            value=res.name) from exc
            have = {k: (e.value if e is not None else None) for k, e in entries.items()}
            wrong = {k: have.get(k) for k, v in want.items() if have.get(k) != v}
            if wrong:
                out[res.name] = wrong
        if again:
            time.sleep(0.2)
        pending = again
    return out


#: A topic's largest record batch (its messages and their framing), and the broker's default.
TOPIC_LIMIT, BROKER_LIMIT = "max.message.bytes", "message.max.bytes"


def record_batch_limits(bootstrap: str, names: Iterable[str], *, prefix: str | None = None,
                        timeout: float = 30.0, kafka: Mapping[str, Any] | None = None
                        ) -> tuple[dict[str, int], dict[str, str]]:
    """How large a record batch each topic of ``names``, and each broker, takes.

    Topics of ``names`` that do not exist are left out (a topic created later takes what
    its broker does), and every existing topic whose name starts with ``prefix`` is read
    too. Returns ``(limits, unread)``: ``limits`` maps a topic to its
    ``max.message.bytes`` and ``"broker <id>"`` to the broker's ``message.max.bytes``;
    ``unread`` maps what could not be read (no permission to describe it) to why. Never
    raises for one resource: what is unread is for the caller to log.
    """
    client = admin(bootstrap, **(kafka or {}))
    try:
        md = client.list_topics(timeout=min(timeout, 10.0))
    except KafkaException as exc:
        return {}, {"the cluster": f"cannot read its metadata: {exc}"}
    wanted = [n for n in dict.fromkeys(names) if n in md.topics]
    wanted += sorted(n for n in md.topics if prefix and n.startswith(prefix))
    topics = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in dict.fromkeys(wanted)]
    # A call may name one broker only (librdkafka sends it to that broker): one call each.
    calls = [topics, *([ConfigResource(ConfigResource.Type.BROKER, str(b))]
                       for b in sorted(md.brokers))]
    futures = {res: future for call in calls if call
               for res, future in client.describe_configs(call,
                                                          request_timeout=timeout).items()}
    unread: dict[str, str] = {}
    limits: dict[str, int] = {}
    for res, future in futures.items():
        topic = res.restype == ConfigResource.Type.TOPIC
        name, key = (res.name, TOPIC_LIMIT) if topic else (f"broker {res.name}", BROKER_LIMIT)
        try:
            entry = future.result(timeout=timeout).get(key)
        except (KafkaException, concurrent.futures.TimeoutError) as exc:
            unread[name] = str(exc)
            continue
        try:
            limits[name] = int(entry.value)
        except (AttributeError, TypeError, ValueError):
            unread[name] = f"{key} is {getattr(entry, 'value', None)!r}"
    return limits, unread


def _several_brokers(client: Any) -> bool:
    """Whether the cluster has more than one broker (False when that cannot be read)."""
    try:
        return len(client.list_topics(timeout=5).brokers) > 1
    except KafkaException:
        return False


def enforce_topic_config(bootstrap: str, names: Iterable[str], config: Mapping[str, str | int],
                         *, why: str, timeout: float = 30.0,
                         kafka: Mapping[str, Any] | None = None) -> list[str]:
    """Set the settings of ``config`` on every topic of ``names`` that has them otherwise.

    ``why`` says in the log why the settings matter. Returns the repairs made, one line
    each (``"topic: setting old -> new"``).

    Raises:
        ConnectorSettingError: A topic's settings cannot be read or set; the error names
            the topic and the setting (``field`` is the setting, ``value`` the topic).
    """
    wrong = topic_config_mismatches(bootstrap, names, config, timeout=timeout, kafka=kafka)
    if not wrong:
        return []
    want = {k: str(v) for k, v in config.items()}
    resources = []
    for topic, settings in wrong.items():
        res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry(k, want[k], incremental_operation=AlterConfigOpType.SET)
            for k in sorted(settings)])
        resources.append(res)
    client = admin(bootstrap, **(kafka or {}))
    done = []
    for res, future in client.incremental_alter_configs(resources,
                                                        request_timeout=timeout).items():
        settings = wrong[res.name]
        try:
            future.result(timeout=timeout)
        except (KafkaException, concurrent.futures.TimeoutError) as exc:
            first = sorted(settings)[0]
            raise ConnectorSettingError(
                f"topic {res.name!r} has {first}={settings[first]!r}, but {why} needs "
                f"{first}={want[first]!r}, and setting it failed: {exc}", field=first,
                value=res.name) from exc
        for k in sorted(settings):
            line = f"{res.name}: {k} {settings[k]} -> {want[k]}"
            _log.warning("repaired topic setting %s (%s)", line, why)
            done.append(line)
    return done
