"""The raw topics: records as producers write them, Avro single-object or UTF-8 JSON.

:data:`RAW_FIELDS`, :data:`RAW_OPTIONAL`, :data:`RAW_OPS` and :data:`RAW_SCHEMAS` describe a
raw record of each kind; they are the one description, read by :func:`decode_raw` here and
by the Spark mapping job (``spark/mapping.py``).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from connectors.exceptions import SerdeError, TopicNameError
from connectors.serde.avro import SERDE, short_repr
from connectors.serde.framing import MARKER
from connectors.topics import check_name

__all__ = ["RAW_FIELDS", "RAW_OPS", "RAW_OPTIONAL", "RAW_SCHEMAS", "RawKind", "decode_raw"]

RawKind = Literal["subscription", "unsubscription", "event"]
"""What a raw topic carries."""

RAW_FIELDS: dict[str, tuple[str, ...]] = {
    "event": ("node", "client", "id", "attrs"),
    "subscription": ("node", "client", "id", "where"),
    "unsubscription": ("node", "client", "id"),
}
"""The fields a raw record of each kind must have, in schema order."""
RAW_OPTIONAL: dict[str, tuple[str, ...]] = {"event": ("payload",)}
"""The fields a raw record of a kind may have besides (absent kinds: none)."""
RAW_OPS: dict[str, str] = {
    "event": "publish", "subscription": "subscribe", "unsubscription": "unsubscribe"}
"""The trace op of ``dlsroute simulate`` a raw JSON record of each kind may name."""
RAW_SCHEMAS: dict[str, str] = {
    "event": "RawEvent", "subscription": "RawSubscription",
    "unsubscription": "RawUnsubscription"}
"""The Avro schema of a raw record of each kind."""


def decode_raw(data: bytes, kind: RawKind) -> dict[str, Any]:
    """Decode a message of a raw topic: Avro single-object or a UTF-8 JSON object.

    Avro messages must be of the matching Raw* schema. JSON objects carry the fields of
    the trace ops of ``dlsroute simulate``:

    * event: ``node``, ``client``, ``id``, ``attrs`` (object of numbers and strings; an
      optional attribute is left out, not null) and optionally ``payload`` (a string, taken
      as UTF-8);
    * subscription: ``node``, ``client``, ``id``, ``where`` (the text form, a list of
      predicate objects, or ``{"any": [[...], ...]}``);
    * unsubscription: ``node``, ``client``, ``id``;

    plus, optionally, the op name (``"op": "publish"``, ``"subscribe"`` or
    ``"unsubscribe"``), which is dropped.

    Returns the same plain dict for both encodings: the fields above, with ``payload``
    always present (bytes) for an event and ``where`` a ``str``, a ``list`` or a ``dict``.
    In Avro, a ``where`` that starts with ``[`` or ``{`` is read as JSON.

    Raises:
        SerdeError: Undecodable bytes, another schema, a missing, unknown or ill-typed field
            (named, with its value), or a node or client name that cannot be part of a
            topic name.
    """
    schema = RAW_SCHEMAS.get(kind)
    if schema is None:
        raise SerdeError(f"raw kind must be one of {sorted(RAW_SCHEMAS)}, got {kind!r}",
                         field="kind", value=kind)
    if not isinstance(data, bytes | bytearray | memoryview):
        raise SerdeError(f"raw {kind}: a message must be bytes, got {type(data).__name__}",
                         field="value", value=type(data).__name__)
    if not data:
        raise SerdeError(f"raw {kind}: empty message", field="value", value=None)
    if data[:2] == MARKER:
        rec = SERDE.decode_as(schema, bytes(data))
        if kind == "subscription":
            rec["where"] = _where_from_avro(rec["where"])
    else:
        rec = _from_json(bytes(data), kind)
    _check_raw(rec, kind)
    return rec


def _where_from_avro(where: str) -> str | list[Any] | dict[str, Any]:
    first = where.lstrip()[:1]
    if first not in ("[", "{"):
        return where
    what = "list" if first == "[" else "object"
    try:
        preds = json.loads(where)
    except json.JSONDecodeError as exc:
        raise SerdeError(f"raw subscription: where starts with {first!r} but is not a JSON "
                         f"{what}: {exc.msg} at column {exc.colno}", field="where",
                         value=where) from exc
    if not isinstance(preds, list | dict):  # pragma: no cover - '[' / '{' open one
        raise SerdeError(f"raw subscription: where is not a JSON {what}", field="where",
                         value=where)
    return preds


def _from_json(data: bytes, kind: str) -> dict[str, Any]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SerdeError(
            f"raw {kind}: neither Avro single-object (no C3 01 marker) nor UTF-8 JSON: {exc}",
            field="value", value=data[:64].hex()) from exc
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SerdeError(
            f"raw {kind}: neither Avro single-object (no C3 01 marker) nor JSON: {exc.msg} "
            f"at line {exc.lineno} column {exc.colno}", field="value",
            value=short_repr(text, 120)) from exc
    if not isinstance(obj, dict):
        raise SerdeError(f"raw {kind}: a JSON object is expected, got {type(obj).__name__}",
                         field="value", value=obj)
    if "op" in obj:
        op = obj.pop("op")
        if op != RAW_OPS[kind]:
            raise SerdeError(f"raw {kind}: op must be {RAW_OPS[kind]!r} (or absent), got {op!r}",
                             field="op", value=op)
    allowed = (*RAW_FIELDS[kind], *RAW_OPTIONAL.get(kind, ()))
    for key in obj:
        if key not in allowed:
            raise SerdeError(
                f"raw {kind}: unknown field {key!r} (fields: {', '.join(allowed)})",
                field=key, value=obj[key])
    for key in RAW_FIELDS[kind]:
        if key not in obj:
            raise SerdeError(f"raw {kind}: missing field {key!r}", field=key, value=None)
    if kind == "event":
        attrs = obj["attrs"]
        if not isinstance(attrs, dict):
            raise SerdeError(f"raw event: attrs must be an object, got {short_repr(attrs)}",
                             field="attrs", value=attrs)
        for k, v in attrs.items():
            if isinstance(v, bool) or not isinstance(v, int | float | str):
                raise SerdeError(
                    f"raw event: attrs[{k!r}] must be a number or a string, got {short_repr(v)}",
                    field=f"attrs.{k}", value=v)
        payload = obj.get("payload", "")
        if not isinstance(payload, str):
            raise SerdeError(f"raw event: payload must be a string, got {short_repr(payload)}",
                             field="payload", value=payload)
        try:
            obj["payload"] = payload.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SerdeError(f"raw event: payload is not valid Unicode: {exc}",
                             field="payload", value=payload) from None
    elif kind == "subscription":
        where = obj["where"]
        if not isinstance(where, str | list | dict):
            raise SerdeError(
                f"raw subscription: where must be a string, a list of predicates or an "
                f"object {{\"any\": [...]}}, got {short_repr(where)}", field="where",
                value=where)
    return obj


def _check_raw(rec: dict[str, Any], kind: str) -> None:
    for key in ("node", "client"):
        try:
            check_name(rec[key], key)
        except TopicNameError as exc:
            raise SerdeError(f"raw {kind}: {exc}", field=key, value=rec[key]) from None
    v = rec["id"]
    if not isinstance(v, str) or not v:
        raise SerdeError(f"raw {kind}: id must be a non-empty string, got {short_repr(v)}",
                         field="id", value=v)


