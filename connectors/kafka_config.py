"""Kafka client settings from a file: ``--kafka-config FILE``, ``kafka_config`` of a node.

The file is a librdkafka properties file: ``key=value`` lines (names as in librdkafka's
CONFIGURATION.md), ``#`` or ``!`` comments and blank lines ignored, whitespace around key and
value stripped. For the secure profile (``make kafka-up SECURE=1`` writes one for ``admin``,
``dlsroute access`` one per principal)::

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-512
    sasl.username=client.alice
    sasl.password=...
    ssl.ca.location=/path/to/ca.pem

:func:`load_kafka_config` reads and checks it: a line that is no ``key=value``, a key
librdkafka does not know, a value it refuses, a key dlsroute sets itself (the bootstrap
servers, group and transactional ids) or a repeated key is an error naming the file, the
line, the key and the value (a secret's value masked). :func:`masked` is what may be logged;
:func:`spark_options` translates the settings into the Java client's (``kafka.*`` options
of Spark's Kafka source and sink).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from connectors.exceptions import ConnectorSettingError

__all__ = [
    "RESERVED_KEYS",
    "KafkaConfigError",
    "is_secret",
    "load_kafka_config",
    "masked",
    "parse_kafka_config",
    "spark_options",
]

RESERVED_KEYS = frozenset({"bootstrap.servers", "metadata.broker.list", "group.id",
                           "group.instance.id", "transactional.id"})
"""Keys a settings file may not hold: every command sets them itself (``--bootstrap``, the
consumer groups and transactional ids of the node and the SDK)."""

_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SECRET_RE = re.compile(r"password|secret|jaas|private|\.pem$|token", re.IGNORECASE)
_MASK = "***"


class KafkaConfigError(ConnectorSettingError):
    """A Kafka settings file that cannot be read or used; names the file and the line."""


def is_secret(key: str) -> bool:
    """Tell whether the value of ``key`` is a secret (never logged, never in an error)."""
    return bool(_SECRET_RE.search(key))


def masked(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` with the value of every secret key replaced by ``***`` (for logs)."""
    return {k: (_MASK if is_secret(k) and v not in (None, "") else v) for k, v in conf.items()}


def _shown(key: str, value: str) -> str:
    return _MASK if is_secret(key) else repr(value)


def parse_kafka_config(text: str, source: str = "<text>") -> dict[str, str]:
    """The settings of a properties text (see the module text), checked.

    Raises:
        KafkaConfigError: A line is not ``key=value`` with a non-empty key and value, a key
            repeats, is reserved (:data:`RESERVED_KEYS`) or unknown to librdkafka, or its
            value is refused; the message names ``source``, the line number, the key and the
            value (masked if secret).
    """
    conf: dict[str, str] = {}
    lines: dict[str, int] = {}
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        where = f"{source}:{no}"
        if not sep or not key or _KEY_RE.fullmatch(key) is None:
            raise KafkaConfigError(f"{where}: not a key=value line: {line[:80]!r}",
                                   field=key or "line", value=f"line {no}")
        if not value:
            raise KafkaConfigError(f"{where}: {key} = '': {key} has an empty value",
                                   field=key, value="")
        if key in RESERVED_KEYS:
            raise KafkaConfigError(
                f"{where}: {key} = {_shown(key, value)}: dlsroute sets {key} itself (give the "
                f"servers with --bootstrap or the node's bootstrap setting)",
                field=key, value=_shown(key, value))
        if key in conf:
            raise KafkaConfigError(f"{where}: {key} = {_shown(key, value)}: {key} repeats "
                                   f"line {lines[key]}",
                                   field=key, value=_shown(key, value))
        _check_one(where, key, value)
        conf[key] = value
        lines[key] = no
    _check_together(source, conf, lines)
    return conf


def _probe(conf: Mapping[str, str]) -> str | None:
    """The complaint of librdkafka about ``conf`` (a producer is made and dropped), or None."""
    from confluent_kafka import KafkaException, Producer  # here: the CLI's options need none

    try:
        Producer({**conf, "log_level": 0})
    except KafkaException as exc:
        err = exc.args[0] if exc.args else exc
        return str(err.str() if hasattr(err, "str") else err)
    return None


def _check_one(where: str, key: str, value: str) -> None:
    """Raise when librdkafka does not know ``key`` or refuses ``value`` for it."""
    complaint = _probe({key: value})
    if complaint is None:
        return
    if complaint.startswith("No such configuration property"):
        raise KafkaConfigError(f"{where}: {key} = {_shown(key, value)}: librdkafka has no "
                               f"setting {key!r}", field=key, value=_shown(key, value))
    if complaint.startswith("Invalid value"):
        raise KafkaConfigError(f"{where}: {key} = {_shown(key, value)}: "
                               f"{complaint if not is_secret(key) else 'invalid value'}",
                               field=key, value=_shown(key, value))
    # Anything else (a mechanism that needs its companions) is judged with the whole file.


def _check_together(source: str, conf: Mapping[str, str], lines: Mapping[str, int]) -> None:
    """Raise when the settings, each fine alone, do not make a client together.

    The error names the line of the first key librdkafka's complaint mentions.
    """
    complaint = _probe(conf)
    if complaint is None:
        return
    for secret in sorted((v for k, v in conf.items() if is_secret(k)), key=len, reverse=True):
        if len(secret) >= 4:  # a short one would mask ordinary words
            complaint = complaint.replace(secret, _MASK)
    complaint = complaint.removeprefix("Failed to create producer: ")
    for key in sorted(conf, key=lambda k: lines[k]):
        if key in complaint:
            raise KafkaConfigError(
                f"{source}:{lines[key]}: {key} = {_shown(key, conf[key])}: {complaint}",
                field=key, value=_shown(key, conf[key]))
    raise KafkaConfigError(f"{source}: the settings do not make a Kafka client: {complaint}",
                           field="kafka_config", value=source)


def load_kafka_config(path: str | Path | None) -> dict[str, str]:
    """The checked settings of the properties file ``path`` (``None``: no settings, ``{}``).

    Raises:
        KafkaConfigError: The file cannot be read (the error names the path), or a line is
            wrong (see :func:`parse_kafka_config`).
    """
    if path is None:
        return {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KafkaConfigError(f"cannot read the Kafka settings file {str(path)!r}: "
                               f"{getattr(exc, 'strerror', None) or exc}",
                               field="kafka_config", value=str(path)) from exc
    return parse_kafka_config(text, str(path))


_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# librdkafka name -> Java client name, for the settings that mean the same in both.
_SAME = {"security.protocol": "security.protocol",
         "ssl.endpoint.identification.algorithm": "ssl.endpoint.identification.algorithm",
         "client.id": "client.id"}


def spark_options(conf: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options of Spark's Kafka source and sink for librdkafka ``conf``.

    ``sasl.mechanism`` (or ``sasl.mechanisms``), ``sasl.username`` and ``sasl.password``
    become ``kafka.sasl.mechanism`` and a ``kafka.sasl.jaas.config`` line (PLAIN or SCRAM);
    ``ssl.ca.location`` becomes a PEM trust store (``kafka.ssl.truststore.type=PEM``).

    Raises:
        KafkaConfigError: A setting has no Java counterpart here (named in the message), or
            a SASL mechanism other than PLAIN and SCRAM.
    """
    out: dict[str, str] = {}
    rest = dict(conf)
    for key, java in _SAME.items():
        if key in rest:
            out[f"kafka.{java}"] = rest.pop(key)
    mechanism = rest.pop("sasl.mechanism", None) or rest.pop("sasl.mechanisms", None)
    user, password = rest.pop("sasl.username", None), rest.pop("sasl.password", None)
    if mechanism is not None or user is not None or password is not None:
        mechanism = mechanism or "GSSAPI"
        module = _JAAS_MODULES.get(mechanism.upper())
        if module is None or user is None or password is None:
            raise KafkaConfigError(
                f"the Spark jobs take SASL {'/'.join(_JAAS_MODULES)} with sasl.username and "
                f"sasl.password, got mechanism {mechanism!r}", field="sasl.mechanism",
                value=mechanism)
        if '"' in user + password or "\\" in user + password:
            raise KafkaConfigError("a SASL user name or password for the Spark jobs cannot "
                                   "hold '\"' or '\\'", field="sasl.username", value=user)
        out["kafka.sasl.mechanism"] = mechanism.upper()
        out["kafka.sasl.jaas.config"] = (f'{module} required username="{user}" '
                                         f'password="{password}";')
    ca = rest.pop("ssl.ca.location", None)
    if ca is not None:
        out["kafka.ssl.truststore.type"] = "PEM"
        out["kafka.ssl.truststore.location"] = str(Path(ca).resolve())
    if rest:
        key = sorted(rest)[0]
        raise KafkaConfigError(f"{key} has no Java counterpart the Spark jobs know (they take "
                               f"security.protocol, sasl.*, ssl.ca.location, "
                               f"ssl.endpoint.identification.algorithm, client.id)",
                               field=key, value=_shown(key, rest[key]))
    return out


def add_kafka_config_arg(parser: argparse.ArgumentParser, extra: str = "") -> None:
    """The ``--kafka-config FILE`` option of every command that talks to Kafka.

    ``extra``: what the option means for this command, appended to the help.
    """
    parser.add_argument("--kafka-config", default=None, metavar="FILE",
                        help="librdkafka settings (key=value lines: security.protocol, "
                             "sasl.mechanism, sasl.username, sasl.password, ssl.ca.location; "
                             "`dlsroute access` writes them)" + extra)
