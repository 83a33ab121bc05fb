"""Encoders and decoders of the node's messages, one pair per schema of the wire contract.

The encoders take the fields as arguments and return the single-object encoded bytes. The
decoders check the schema (a message of another one is an error that names both) and
return the record as a plain dict, as :meth:`Serde.decode <connectors.serde.avro.Serde.decode>`
does, with two conveniences: a ``labels`` field comes as a read-only ``uint64`` array, and
a link's ``kind`` in lower case (as :func:`encode_link` takes it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from connectors.exceptions import SerdeError
from connectors.serde.avro import SERDE
from connectors.serde.framing import HEADER_SIZE
from connectors.serde.raw_event import decode_fast, encode_fast
from connectors.topics import Headers, decode_labels, encode_labels, headers_dict

__all__ = [
    "decode_dead_letter",
    "decode_heartbeat",
    "decode_label_subscription",
    "decode_label_unsubscription",
    "decode_link",
    "decode_raw_event",
    "encode_dead_letter",
    "encode_heartbeat",
    "encode_label_subscription",
    "encode_label_unsubscription",
    "encode_link",
    "encode_raw_event",
    "encode_raw_subscription",
    "encode_raw_unsubscription",
]

_LINK_KINDS = {"advertise": "ADVERTISE", "withdraw": "WITHDRAW"}


# -- encoders -------------------------------------------------------------------------------
def encode_label_subscription(client: str, sub_id: str, labels: np.ndarray,
                              where: str | None = None, row: bytes | None = None) -> bytes:
    """A LabelSubscription message (for ``dls.node.N.subscribe``).

    ``row``: the subscription's exact constraints compiled (:class:`dls.exact_row.RowLayout`),
    when it is simple; the node then does not compile ``where``.
    """
    return SERDE.encode("LabelSubscription", {"client": client, "id": sub_id,
                                              "labels": encode_labels(labels), "where": where,
                                              "row": row})


def encode_label_unsubscription(client: str, sub_id: str) -> bytes:
    """A LabelUnsubscription message (for ``dls.node.N.unsubscribe``)."""
    return SERDE.encode("LabelUnsubscription", {"client": client, "id": sub_id})


def encode_link(source: str, kind: str, labels: np.ndarray) -> bytes:
    """A LinkControl message; ``kind`` is ``"advertise"`` or ``"withdraw"`` (any case).

    Raises:
        SerdeError: Unknown kind, bad labels or a field of the wrong type.
    """
    symbol = _LINK_KINDS.get(kind.lower()) if isinstance(kind, str) else None
    if symbol is None:
        raise SerdeError(f"link kind must be 'advertise' or 'withdraw', got {kind!r}",
                         field="kind", value=kind)
    return SERDE.encode("LinkControl", {"source": source, "kind": symbol,
                                        "labels": encode_labels(labels)})


def encode_raw_event(node: str, client: str, event_id: str, attrs: Mapping[str, Any],
                     payload: bytes | bytearray = b"") -> bytes:
    """A RawEvent message: the value of an event on every topic it travels.

    ``attrs`` values are ``int`` (64-bit), ``float`` or ``str``.

    Raises:
        SerdeError: A field of the wrong type (the error names it).
    """
    header = SERDE.raw_event_header
    if header is not None:
        out = encode_fast(header, node, client, event_id, attrs, payload)
        if out is not None:
            return out
    return SERDE.encode("RawEvent", {"node": node, "client": client, "id": event_id,
                                     "attrs": attrs, "payload": payload})


def encode_raw_subscription(node: str, client: str, sub_id: str,
                            where: str | Sequence[Mapping[str, Any]] | Mapping[str, Any]
                            ) -> bytes:
    """A RawSubscription message (a list or an ``{"any": ...}`` object goes as JSON text)."""
    if isinstance(where, str):
        text = where
    elif isinstance(where, Mapping):
        text = json.dumps(dict(where), separators=(",", ":"))
    else:
        text = json.dumps([dict(p) for p in where], separators=(",", ":"))
    return SERDE.encode("RawSubscription", {"node": node, "client": client, "id": sub_id,
                                            "where": text})


def encode_raw_unsubscription(node: str, client: str, sub_id: str) -> bytes:
    """A RawUnsubscription message."""
    return SERDE.encode("RawUnsubscription", {"node": node, "client": client, "id": sub_id})


def _as_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def encode_dead_letter(source: str, reason: str, raw: bytes | None,
                       headers: Headers | None,
                       field: str | None = None, value: Any = None) -> bytes:
    """A DeadLetter message.

    ``raw`` is the rejected value (``None``, a tombstone, is written as empty bytes);
    ``headers`` its headers as confluent-kafka gives them (see
    :func:`~connectors.topics.headers_dict`); ``value`` the
    offending value, written as text (JSON where it can be, else ``repr``).
    """
    hdrs = headers_dict(headers)
    return SERDE.encode("DeadLetter", {
        "source": source, "reason": reason, "field": field, "value": _as_text(value),
        "raw": b"" if raw is None else bytes(raw), "headers": hdrs})


# -- decoders -------------------------------------------------------------------------------
def _frozen_labels(b: bytes) -> np.ndarray:
    arr = decode_labels(b)
    arr.flags.writeable = False
    return arr


def decode_label_subscription(data: bytes) -> dict[str, Any]:
    """Decode a LabelSubscription: ``client``, ``id``, ``labels`` (array), ``where``, ``row``.

    Raises:
        SerdeError: Not a LabelSubscription, corrupt, or labels not a multiple of 8 bytes.
    """
    rec = SERDE.decode_as("LabelSubscription", data)
    rec["labels"] = _frozen_labels(rec["labels"])
    return rec


def decode_label_unsubscription(data: bytes) -> dict[str, Any]:
    """Decode a LabelUnsubscription: ``client`` and ``id``."""
    return SERDE.decode_as("LabelUnsubscription", data)


def decode_link(data: bytes) -> dict[str, Any]:
    """Decode a LinkControl: ``source``, ``kind`` (lower case) and ``labels`` (array)."""
    rec = SERDE.decode_as("LinkControl", data)
    rec["kind"] = str(rec["kind"]).lower()
    rec["labels"] = _frozen_labels(rec["labels"])
    return rec


def encode_heartbeat(source: str, watermark_ms: int, link_applied: int,
                     wants_watermark: bool = False) -> bytes:
    """A Heartbeat message (for ``dls.fwd.N.M``, key :data:`~connectors.topics.HEARTBEAT_KEY`)."""
    return SERDE.encode("Heartbeat", {"source": source, "watermark_ms": int(watermark_ms),
                                      "link_applied": int(link_applied),
                                      "wants_watermark": bool(wants_watermark)})


def decode_heartbeat(data: bytes) -> dict[str, Any]:
    """Decode a Heartbeat: ``source``, ``watermark_ms``, ``link_applied``, ``wants_watermark``."""
    return SERDE.decode_as("Heartbeat", data)


def decode_raw_event(data: bytes) -> dict[str, Any]:
    """Decode a RawEvent: ``node``, ``client``, ``id``, ``attrs`` and ``payload``.

    Raises:
        SerdeError: Not a RawEvent (the error says what it is), or corrupt.
    """
    header = SERDE.raw_event_header
    if header is not None and type(data) is bytes and data[:HEADER_SIZE] == header:
        rec = decode_fast(data)
        if rec is not None:  # else fastavro decides and words the error
            return rec
    return SERDE.decode_as("RawEvent", data)


def decode_dead_letter(data: bytes) -> dict[str, Any]:
    """Decode a DeadLetter: ``source``, ``reason``, ``field``, ``value``, ``raw``, ``headers``."""
    return SERDE.decode_as("DeadLetter", data)
