"""Avro serde of the wire contract: single-object encoding of the schemas in ``schemas/avro``.

Every message is Avro single-object encoded: the marker ``C3 01``, the 8-byte little-endian
CRC-64-AVRO fingerprint of the schema's Parsing Canonical Form, then the schemaless binary
body. Any reader can tell the schema from the first ten bytes, without a registry.

:data:`SERDE` loads every ``.avsc`` of ``schemas/avro``. On top of it:

* :func:`decode_raw` reads the raw topics, which also accept UTF-8 JSON objects with the
  fields of the trace ops of ``dlsroute simulate``;
* convenience encoders and decoders for each message, the decoders returning small frozen
  dataclasses (:class:`LabelSubscriptionMsg`, :class:`LinkMsg`, :class:`RawEventMsg`, ...).

The event path (:func:`encode_raw_event`, :func:`decode_raw_event` and ``SERDE.decode`` of a
RawEvent) runs a hand-written codec of the RawEvent schema: about 3 us to encode and 4 us to
decode an event with three attributes, where fastavro's generic functions take about 8 and
6. It is used only while the schema file is the one it was written for (same Parsing
Canonical Form), it produces the same bytes as fastavro (the tests check both ways), and
it hands anything unusual (an odd type, a corrupt body) to fastavro, which then decides and
words the error.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import fastavro
import numpy as np
from fastavro.schema import fingerprint as avro_fingerprint
from fastavro.schema import to_parsing_canonical_form
from fastavro.validation import validate as avro_validate

from connectors.exceptions import SerdeError, TopicNameError
from connectors.topics import (
    Headers,
    check_name,
    decode_labels,
    encode_labels,
    headers_dict,
)

__all__ = [
    "HEADER_SIZE",
    "MARKER",
    "SCHEMA_DIR",
    "SERDE",
    "DeadLetterMsg",
    "LabelSubscriptionMsg",
    "LabelUnsubscriptionMsg",
    "LinkMsg",
    "RawEventMsg",
    "RawKind",
    "Serde",
    "decode_dead_letter",
    "decode_label_subscription",
    "decode_label_unsubscription",
    "decode_link",
    "decode_raw",
    "decode_raw_event",
    "encode_dead_letter",
    "encode_label_subscription",
    "encode_label_unsubscription",
    "encode_link",
    "encode_raw_event",
    "encode_raw_subscription",
    "encode_raw_unsubscription",
]

MARKER = b"\xc3\x01"
"""The two marker bytes that open an Avro single-object encoded message."""
HEADER_SIZE = 10
"""Marker plus fingerprint: the body starts at this offset."""
SCHEMA_DIR: Path = Path(__file__).resolve().parents[1] / "schemas" / "avro"
"""Where the ``.avsc`` files of the wire contract live."""

RawKind = Literal["subscription", "unsubscription", "event"]
"""What a raw topic carries."""


def _short(v: Any, limit: int = 80) -> str:
    r = repr(v)
    return r if len(r) <= limit else r[: limit - 3] + "..."


@dataclass(frozen=True)
class _Schema:
    """One loaded schema."""

    name: str
    fullname: str
    parsed: dict[str, Any]
    canonical: str
    fingerprint: bytes
    header: bytes
    defaults: dict[str, Any]


class Serde:
    """Avro single-object encoder/decoder for every schema of a folder of ``.avsc`` files.

    Each file holds one self-contained named schema; records are known by their short name
    (``"RawEvent"``).

    Raises:
        SerdeError: (at construction) The folder holds no schema, a file does not parse, or
            two files share a short name or a fingerprint.
    """

    def __init__(self, schema_dir: str | Path = SCHEMA_DIR) -> None:
        self.schema_dir = Path(schema_dir)
        files = sorted(self.schema_dir.glob("*.avsc"))
        if not files:
            raise SerdeError(f"no .avsc schema in {self.schema_dir}", field="schema_dir",
                             value=str(self.schema_dir))
        self._by_name: dict[str, _Schema] = {}
        self._by_fp: dict[bytes, _Schema] = {}
        for path in files:
            entry = _load(path)
            if entry.name in self._by_name:
                raise SerdeError(f"{path.name}: a second schema named {entry.name!r}",
                                 field="name", value=entry.name)
            if entry.fingerprint in self._by_fp:
                raise SerdeError(
                    f"{path.name}: same fingerprint as {self._by_fp[entry.fingerprint].name}",
                    field="fingerprint", value=entry.fingerprint.hex())
            self._by_name[entry.name] = entry
            self._by_fp[entry.fingerprint] = entry
        raw_event = self._by_name.get("RawEvent")
        self._raw_event_header: bytes | None = (
            raw_event.header
            if raw_event is not None and raw_event.canonical == _RAW_EVENT_CANONICAL else None)

    # -- introspection ------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        """The short names of the loaded schemas, sorted."""
        return tuple(sorted(self._by_name))

    def _entry(self, name: str) -> _Schema:
        try:
            return self._by_name[name]
        except (KeyError, TypeError):
            raise SerdeError(f"unknown schema {name!r} (known: {', '.join(self.names)})",
                             field="schema", value=name) from None

    def fingerprint(self, name: str) -> bytes:
        """The 8-byte CRC-64-AVRO fingerprint of schema ``name``, as written on the wire."""
        return self._entry(name).fingerprint

    def header(self, name: str) -> bytes:
        """The 10 bytes that open every message of schema ``name``."""
        return self._entry(name).header

    def canonical_form(self, name: str) -> str:
        """The Parsing Canonical Form of schema ``name`` (what the fingerprint is taken of)."""
        return self._entry(name).canonical

    def schema(self, name: str) -> dict[str, Any]:
        """The parsed (fastavro) schema ``name``; do not modify it."""
        return self._entry(name).parsed

    # -- encode -------------------------------------------------------------------------------
    def encode(self, name: str, record: Mapping[str, Any]) -> bytes:
        """Single-object encode ``record`` with schema ``name``.

        Fields with a default may be left out; unknown fields are an error.

        Raises:
            SerdeError: Unknown schema, or the record does not fit it (the error names the
                field and carries its value).
        """
        entry = self._entry(name)
        if entry.defaults and isinstance(record, Mapping) \
                and any(k not in record for k in entry.defaults):
            record = {**entry.defaults, **record}
        buf = io.BytesIO()
        buf.write(entry.header)
        try:
            fastavro.schemaless_writer(buf, entry.parsed, record,
                                       strict_allow_default=True)
        except Exception as exc:  # fastavro raises TypeError, ValueError, AttributeError...
            raise _explain(entry, record, exc) from exc
        return buf.getvalue()

    # -- decode -------------------------------------------------------------------------------
    def identify(self, data: bytes) -> str:
        """The short schema name of a single-object encoded message (its body is not read).

        Raises:
            SerdeError: Too short, wrong marker or unknown fingerprint.
        """
        return self._identify(data).name

    def _identify(self, data: bytes) -> _Schema:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise SerdeError(f"a message must be bytes, got {type(data).__name__}",
                             field="value", value=type(data).__name__)
        if len(data) < HEADER_SIZE:
            raise SerdeError(
                f"too short for Avro single-object encoding: {len(data)} bytes, at least "
                f"{HEADER_SIZE} needed (marker C3 01 and an 8-byte fingerprint)",
                field="value", value=bytes(data).hex())
        if data[:2] != MARKER:
            raise SerdeError(
                f"not Avro single-object encoded: the first two bytes are "
                f"{bytes(data[:2]).hex(' ').upper()}, not C3 01", field="marker",
                value=bytes(data[:2]).hex())
        fp = bytes(data[2:HEADER_SIZE])
        entry = self._by_fp.get(fp)
        if entry is None:
            raise SerdeError(
                f"unknown schema fingerprint {fp.hex()} (known: "
                f"{', '.join(f'{e.name}={f.hex()}' for f, e in self._by_fp.items())})",
                field="fingerprint", value=fp.hex())
        return entry

    def decode(self, data: bytes) -> tuple[str, dict[str, Any]]:
        """Decode a single-object encoded message: ``(short schema name, record)``.

        Raises:
            SerdeError: Too short, wrong marker, unknown fingerprint, or a body that does not
                decode completely (corrupt, truncated or with trailing bytes).
        """
        entry = self._identify(data)
        if entry.header == self._raw_event_header and type(data) is bytes:
            try:
                node, client, eid, attrs, payload = _fast_decode_raw_event(data)
            except _FAST_FAILURES:
                pass  # let fastavro decide and word the error
            else:
                return entry.name, {"node": node, "client": client, "id": eid, "attrs": attrs,
                                    "payload": payload}
        return entry.name, self._decode_body(entry, data)

    def decode_as(self, name: str, data: bytes) -> dict[str, Any]:
        """Decode a message that must be of schema ``name``.

        Raises:
            SerdeError: As :meth:`decode`, or the message is of another known schema (the
                error says which was expected and which was found).
        """
        expected = self._entry(name)
        found = self._identify(data)
        if found is not expected:
            raise SerdeError(f"expected a {name} message, got a {found.name}",
                             field="schema", value=found.name)
        return self.decode(data)[1]

    @staticmethod
    def _decode_body(entry: _Schema, data: bytes) -> dict[str, Any]:
        buf = io.BytesIO(data)
        buf.seek(HEADER_SIZE)
        try:
            record = fastavro.schemaless_reader(buf, entry.parsed, None)
        except Exception as exc:  # EOFError, UnicodeDecodeError, IndexError, ...
            raise SerdeError(
                f"{entry.name} body does not decode ({type(exc).__name__}: {exc})",
                field="value", value=bytes(data[:64]).hex()) from exc
        extra = len(data) - buf.tell()
        if extra:
            raise SerdeError(f"{entry.name} body is followed by {extra} unread bytes",
                             field="value", value=bytes(data[:64]).hex())
        if not isinstance(record, dict):  # pragma: no cover - every schema is a record
            raise SerdeError(f"{entry.name} is not a record schema", field="schema",
                             value=entry.name)
        return record


def _load(path: Path) -> _Schema:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        parsed = fastavro.parse_schema(raw, named_schemas={})
        canonical = to_parsing_canonical_form(parsed)
    except (OSError, ValueError, fastavro.schema.SchemaParseException) as exc:
        raise SerdeError(f"{path}: not a valid Avro schema: {exc}", field="schema",
                         value=str(path)) from exc
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise SerdeError(f"{path}: the schema must be a named record", field="schema",
                         value=str(path))
    fp = bytes.fromhex(avro_fingerprint(canonical, "CRC-64-AVRO"))  # little-endian bytes
    fullname = str(parsed["name"])
    # fastavro writes a missing field's default as it stands in the JSON schema, which for
    # bytes is a string (code points 0-255): fill defaults in ourselves, as Python values.
    try:
        defaults = {f["name"]: (f["default"].encode("latin-1")
                                if f["type"] == "bytes" and isinstance(f["default"], str)
                                else f["default"])
                    for f in parsed["fields"] if "default" in f}
    except UnicodeEncodeError as exc:
        raise SerdeError(f"{path}: a bytes default must use code points 0-255: {exc}",
                         field="schema", value=str(path)) from exc
    return _Schema(fullname.rsplit(".", 1)[-1], fullname, parsed, canonical, fp, MARKER + fp,
                   defaults)


def _explain(entry: _Schema, record: Any, exc: Exception) -> SerdeError:
    """Turn fastavro's encode failure into an error naming the offending field."""
    name = entry.name
    if not isinstance(record, Mapping):
        return SerdeError(f"{name}: a record must be a mapping, got {type(record).__name__}",
                          field=None, value=record)
    fields = entry.parsed["fields"]
    known = [f["name"] for f in fields]
    for key in record:
        if key not in known:
            return SerdeError(f"{name}: unknown field {key!r} (fields: {', '.join(known)})",
                              field=str(key), value=record[key])
    for f in fields:
        fname, ftype = f["name"], f["type"]
        if fname not in record:
            if "default" in f:
                continue
            return SerdeError(f"{name}: missing field {fname!r}", field=fname, value=None)
        value = record[fname]
        if isinstance(ftype, dict) and ftype.get("type") == "map" and isinstance(value, Mapping):
            for k, v in value.items():
                if not isinstance(k, str):
                    return SerdeError(f"{name}.{fname}: keys must be strings, got {k!r}",
                                      field=fname, value=k)
                if not _fits(v, ftype["values"]):
                    return SerdeError(
                        f"{name}.{fname}[{k!r}]: {_short(v)} ({type(v).__name__}) does not "
                        f"fit {_type_text(ftype['values'])}", field=f"{fname}.{k}", value=v)
        if not _fits(value, ftype):
            return SerdeError(
                f"{name}.{fname}: {_short(value)} ({type(value).__name__}) does not fit "
                f"{_type_text(ftype)}", field=fname, value=value)
        if not _encodable(value):
            return SerdeError(f"{name}.{fname}: {_short(value)} is not valid Unicode (it has "
                              f"a lone surrogate)", field=fname, value=value)
    return SerdeError(f"{name}: record does not fit the schema: {exc}", field=None,
                      value=None)


def _fits(value: Any, avro_type: Any) -> bool:
    try:
        return bool(avro_validate(value, avro_type, raise_errors=False))
    except Exception:  # noqa: BLE001 - a validator crash means "does not fit"
        return False


def _encodable(value: Any) -> bool:
    """Whether every string in ``value`` (a string, or a map of them) encodes to UTF-8."""
    items = value.items() if isinstance(value, Mapping) else [(value, None)]
    for k, v in items:
        for s in (k, v):
            if isinstance(s, str):
                try:
                    s.encode("utf-8")
                except UnicodeEncodeError:
                    return False
    return True


def _type_text(avro_type: Any) -> str:
    if isinstance(avro_type, list):
        return "one of " + ", ".join(_type_text(t) for t in avro_type)
    if isinstance(avro_type, dict):
        t = avro_type.get("type")
        if t == "map":
            return f"map of {_type_text(avro_type['values'])}"
        if t == "enum":
            return f"enum {avro_type.get('name')} {avro_type.get('symbols')}"
        return str(avro_type.get("name", t))
    return str(avro_type)


# -- the RawEvent fast path -----------------------------------------------------------------
# Written for exactly this Parsing Canonical Form; any other RawEvent schema disables it.
_RAW_EVENT_CANONICAL = (
    '{"name":"dlsroute.v1.RawEvent","type":"record","fields":[{"name":"node","type":"string"},'
    '{"name":"client","type":"string"},{"name":"id","type":"string"},{"name":"attrs","type":'
    '{"type":"map","values":["long","double","string"]}},{"name":"payload","type":"bytes"}]}'
)
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_SMALL_LEN = [bytes([2 * n]) for n in range(64)]  # zig-zag varints of 0..63: one byte
_DOUBLE = struct.Struct("<d")
_pack_double = _DOUBLE.pack
_unpack_double = _DOUBLE.unpack_from


class _Slow(Exception):
    """The fast codec declines: fastavro handles this one."""


_FAST_FAILURES = (IndexError, ValueError, TypeError, AttributeError, struct.error, _Slow)


def _varint(n: int) -> bytes:
    """Avro ``long``: zig-zag, then 7 bits a byte, low first."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _fast_encode_raw_event(header: bytes, node: str, client: str, event_id: str,
                           attrs: Mapping[str, Any], payload: bytes | bytearray) -> bytes | None:
    """The RawEvent message, or ``None`` when an input is unusual (then fastavro decides)."""
    if type(node) is not str or type(client) is not str or type(event_id) is not str \
            or type(payload) is not bytes or not isinstance(attrs, Mapping):
        return None
    try:
        nb, cb, ib = node.encode(), client.encode(), event_id.encode()
        n = len(nb)
        parts = [header, _SMALL_LEN[n] if n < 64 else _varint(n), nb]
        n = len(cb)
        parts += (_SMALL_LEN[n] if n < 64 else _varint(n), cb)
        n = len(ib)
        parts += (_SMALL_LEN[n] if n < 64 else _varint(n), ib)
        if attrs:
            n = len(attrs)
            parts.append(_SMALL_LEN[n] if n < 64 else _varint(n))
            append = parts.append
            for k, v in attrs.items():
                if type(k) is not str:
                    return None
                kb = k.encode()
                n = len(kb)
                append(_SMALL_LEN[n] if n < 64 else _varint(n))
                append(kb)
                t = type(v)
                if t is float:
                    append(b"\x02")
                    append(_pack_double(v))
                elif t is str:
                    vb = v.encode()
                    n = len(vb)
                    append(b"\x04")
                    append(_SMALL_LEN[n] if n < 64 else _varint(n))
                    append(vb)
                elif t is int and _LONG_MIN <= v <= _LONG_MAX:
                    append(b"\x00")
                    append(_varint(v))
                else:
                    return None
        parts.append(b"\x00")
        n = len(payload)
        parts += (_SMALL_LEN[n] if n < 64 else _varint(n), payload)
    except UnicodeEncodeError:
        return None
    return b"".join(parts)


def _read_long(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    pos += 1
    z = b & 0x7F
    shift = 7
    while b & 0x80:
        if shift > 63:
            raise _Slow("varint too long")
        b = data[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        shift += 7
    return (z >> 1) ^ -(z & 1), pos


def _read_len(data: bytes, pos: int) -> tuple[int, int]:
    """A non-negative length: zig-zag varint, one byte when below 64."""
    b = data[pos]
    if b < 0x80 and not b & 1:
        return b >> 1, pos + 1
    n, pos = _read_long(data, pos)
    if n < 0:
        raise _Slow("negative length")
    return n, pos


def _fast_decode_raw_event(data: bytes) -> tuple[str, str, str, dict[str, Any], bytes]:
    """Decode the body of a RawEvent message (header already checked); raises on anything odd.

    Lengths below 64 (one varint byte, even) are read inline: the common case.
    """
    size = len(data)
    pos = HEADER_SIZE
    strings: list[str] = []
    for _ in range(3):  # node, client, id
        n = data[pos]
        if n < 0x80 and not n & 1:
            n >>= 1
            pos += 1
        else:
            n, pos = _read_len(data, pos)
        end = pos + n
        if end > size:
            raise _Slow("truncated")
        strings.append(data[pos:end].decode())
        pos = end
    attrs: dict[str, Any] = {}
    while True:
        count = data[pos]
        if count < 0x80 and not count & 1:
            count >>= 1
            pos += 1
        else:
            count, pos = _read_long(data, pos)
            if count < 0:  # a block with its byte size
                count = -count
                _, pos = _read_long(data, pos)
        if count == 0:
            break
        for _ in range(count):
            n = data[pos]
            if n < 0x80 and not n & 1:
                n >>= 1
                pos += 1
            else:
                n, pos = _read_len(data, pos)
            end = pos + n
            if end > size:
                raise _Slow("truncated")
            key = data[pos:end].decode()
            branch = data[end]
            pos = end + 1
            v: Any
            if branch == 2:
                v = _unpack_double(data, pos)[0]
                pos += 8
            elif branch == 4:
                n = data[pos]
                if n < 0x80 and not n & 1:
                    n >>= 1
                    pos += 1
                else:
                    n, pos = _read_len(data, pos)
                end = pos + n
                if end > size:
                    raise _Slow("truncated")
                v = data[pos:end].decode()
                pos = end
            elif branch == 0:
                v, pos = _read_long(data, pos)
            else:
                raise _Slow("bad union branch")
            attrs[key] = v
    n = data[pos]
    if n < 0x80 and not n & 1:
        n >>= 1
        pos += 1
    else:
        n, pos = _read_len(data, pos)
    if pos + n != size:
        raise _Slow("bad payload length or trailing bytes")
    return strings[0], strings[1], strings[2], attrs, data[pos:]


SERDE = Serde()
"""The serde of the project's own schemas (``schemas/avro`` of the repository)."""


# -- messages -------------------------------------------------------------------------------
def _frozen_labels(b: bytes) -> np.ndarray:
    arr = decode_labels(b)
    arr.flags.writeable = False
    return arr


@dataclass(frozen=True, slots=True, eq=False)
class LabelSubscriptionMsg:
    """A decoded LabelSubscription (``labels``: read-only ``uint64`` array)."""

    client: str
    id: str
    labels: np.ndarray
    where: str | None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LabelSubscriptionMsg):
            return NotImplemented
        return (self.client, self.id, self.where) == (other.client, other.id, other.where) \
            and np.array_equal(self.labels, other.labels)


@dataclass(frozen=True, slots=True)
class LabelUnsubscriptionMsg:
    """A decoded LabelUnsubscription."""

    client: str
    id: str


@dataclass(frozen=True, slots=True, eq=False)
class LinkMsg:
    """A decoded LinkControl (``kind``: ``"advertise"`` or ``"withdraw"``)."""

    source: str
    kind: str
    labels: np.ndarray

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LinkMsg):
            return NotImplemented
        return (self.source, self.kind) == (other.source, other.kind) \
            and np.array_equal(self.labels, other.labels)


@dataclass(frozen=True, slots=True)
class RawEventMsg:
    """A decoded RawEvent."""

    node: str
    client: str
    id: str
    attrs: dict[str, Any]
    payload: bytes


@dataclass(frozen=True, slots=True)
class DeadLetterMsg:
    """A decoded DeadLetter."""

    source: str
    reason: str
    field: str | None
    value: str | None
    raw: bytes
    headers: dict[str, bytes]


# -- convenience encoders -------------------------------------------------------------------
_LINK_KINDS = {"advertise": "ADVERTISE", "withdraw": "WITHDRAW"}


def encode_label_subscription(client: str, sub_id: str, labels: np.ndarray,
                              where: str | None = None) -> bytes:
    """A LabelSubscription message (for ``dls.node.N.subscribe``)."""
    return SERDE.encode("LabelSubscription", {"client": client, "id": sub_id,
                                              "labels": encode_labels(labels), "where": where})


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
    header = SERDE._raw_event_header  # noqa: SLF001 - the module's own fast path
    if header is not None:
        out = _fast_encode_raw_event(header, node, client, event_id, attrs, payload)
        if out is not None:
            return out
    return SERDE.encode("RawEvent", {"node": node, "client": client, "id": event_id,
                                     "attrs": attrs, "payload": payload})


def encode_raw_subscription(node: str, client: str, sub_id: str,
                            where: str | Sequence[Mapping[str, Any]]) -> bytes:
    """A RawSubscription message; a predicate list is written as a JSON string."""
    text = where if isinstance(where, str) else json.dumps(
        [dict(p) for p in where], separators=(",", ":"))
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


# -- convenience decoders -------------------------------------------------------------------
def decode_label_subscription(data: bytes) -> LabelSubscriptionMsg:
    """Decode a LabelSubscription message.

    Raises:
        SerdeError: Not a LabelSubscription, corrupt, or labels not a multiple of 8 bytes.
    """
    r = SERDE.decode_as("LabelSubscription", data)
    return LabelSubscriptionMsg(r["client"], r["id"], _frozen_labels(r["labels"]), r["where"])


def decode_label_unsubscription(data: bytes) -> LabelUnsubscriptionMsg:
    """Decode a LabelUnsubscription message."""
    r = SERDE.decode_as("LabelUnsubscription", data)
    return LabelUnsubscriptionMsg(r["client"], r["id"])


def decode_link(data: bytes) -> LinkMsg:
    """Decode a LinkControl message (``kind`` in lower case, as :func:`encode_link` takes it)."""
    r = SERDE.decode_as("LinkControl", data)
    return LinkMsg(r["source"], str(r["kind"]).lower(), _frozen_labels(r["labels"]))


def decode_raw_event(data: bytes) -> RawEventMsg:
    """Decode a RawEvent message.

    Raises:
        SerdeError: Not a RawEvent (the error says what it is), or corrupt.
    """
    header = SERDE._raw_event_header  # noqa: SLF001 - the module's own fast path
    if header is not None and type(data) is bytes and data[:HEADER_SIZE] == header:
        try:
            return RawEventMsg(*_fast_decode_raw_event(data))
        except _FAST_FAILURES:
            pass  # fastavro decides and words the error
    r = SERDE.decode_as("RawEvent", data)
    return RawEventMsg(r["node"], r["client"], r["id"], r["attrs"], r["payload"])


def decode_dead_letter(data: bytes) -> DeadLetterMsg:
    """Decode a DeadLetter message."""
    r = SERDE.decode_as("DeadLetter", data)
    return DeadLetterMsg(r["source"], r["reason"], r["field"], r["value"], r["raw"],
                         r["headers"])


# -- raw topics -----------------------------------------------------------------------------
@dataclass(frozen=True)
class _RawSpec:
    schema: str
    op: str
    fields: tuple[str, ...]


_RAW: dict[str, _RawSpec] = {
    "subscription": _RawSpec("RawSubscription", "subscribe", ("node", "client", "id", "where")),
    "unsubscription": _RawSpec("RawUnsubscription", "unsubscribe", ("node", "client", "id")),
    "event": _RawSpec("RawEvent", "publish", ("node", "client", "id", "attrs")),
}
_OPTIONAL: dict[str, tuple[str, ...]] = {"event": ("payload",)}


def decode_raw(data: bytes, kind: RawKind) -> dict[str, Any]:
    """Decode a message of a raw topic: Avro single-object or a UTF-8 JSON object.

    Avro messages must be of the matching Raw* schema. JSON objects carry the fields of
    the trace ops of ``dlsroute simulate``:

    * event: ``node``, ``client``, ``id``, ``attrs`` (object of numbers and strings) and
      optionally ``payload`` (a string, taken as UTF-8);
    * subscription: ``node``, ``client``, ``id``, ``where`` (the text form, or a list of
      predicate objects);
    * unsubscription: ``node``, ``client``, ``id``;

    plus, optionally, the op name (``"op": "publish"``, ``"subscribe"`` or
    ``"unsubscribe"``), which is dropped.

    Returns the same plain dict for both encodings: the fields above, with ``payload``
    always present (bytes) for an event and ``where`` a ``str`` or a ``list``.

    Raises:
        SerdeError: Undecodable bytes, another schema, a missing, unknown or ill-typed field
            (named, with its value), or a node or client name that cannot be part of a
            topic name.
    """
    spec = _RAW.get(kind)
    if spec is None:
        raise SerdeError(f"raw kind must be one of {sorted(_RAW)}, got {kind!r}",
                         field="kind", value=kind)
    if not isinstance(data, bytes | bytearray | memoryview):
        raise SerdeError(f"raw {kind}: a message must be bytes, got {type(data).__name__}",
                         field="value", value=type(data).__name__)
    if not data:
        raise SerdeError(f"raw {kind}: empty message", field="value", value=None)
    if data[:2] == MARKER:
        rec = SERDE.decode_as(spec.schema, bytes(data))
        if kind == "subscription":
            rec["where"] = _where_from_avro(rec["where"])
    else:
        rec = _from_json(bytes(data), kind, spec)
    _check_raw(rec, kind)
    return rec


def _where_from_avro(where: str) -> str | list[Any]:
    if not where.lstrip().startswith("["):
        return where
    try:
        preds = json.loads(where)
    except json.JSONDecodeError as exc:
        raise SerdeError(f"raw subscription: where starts with '[' but is not a JSON list: "
                         f"{exc.msg} at column {exc.colno}", field="where",
                         value=where) from exc
    if not isinstance(preds, list):  # pragma: no cover - '[' opens a list
        raise SerdeError("raw subscription: where is not a JSON list", field="where",
                         value=where)
    return preds


def _from_json(data: bytes, kind: str, spec: _RawSpec) -> dict[str, Any]:
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
            value=_short(text, 120)) from exc
    if not isinstance(obj, dict):
        raise SerdeError(f"raw {kind}: a JSON object is expected, got {type(obj).__name__}",
                         field="value", value=obj)
    if "op" in obj:
        op = obj.pop("op")
        if op != spec.op:
            raise SerdeError(f"raw {kind}: op must be {spec.op!r} (or absent), got {op!r}",
                             field="op", value=op)
    allowed = (*spec.fields, *_OPTIONAL.get(kind, ()))
    for key in obj:
        if key not in allowed:
            raise SerdeError(
                f"raw {kind}: unknown field {key!r} (fields: {', '.join(allowed)})",
                field=key, value=obj[key])
    for key in spec.fields:
        if key not in obj:
            raise SerdeError(f"raw {kind}: missing field {key!r}", field=key, value=None)
    if kind == "event":
        attrs = obj["attrs"]
        if not isinstance(attrs, dict):
            raise SerdeError(f"raw event: attrs must be an object, got {_short(attrs)}",
                             field="attrs", value=attrs)
        for k, v in attrs.items():
            if isinstance(v, bool) or not isinstance(v, int | float | str):
                raise SerdeError(
                    f"raw event: attrs[{k!r}] must be a number or a string, got {_short(v)}",
                    field=f"attrs.{k}", value=v)
        payload = obj.get("payload", "")
        if not isinstance(payload, str):
            raise SerdeError(f"raw event: payload must be a string, got {_short(payload)}",
                             field="payload", value=payload)
        try:
            obj["payload"] = payload.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SerdeError(f"raw event: payload is not valid Unicode: {exc}",
                             field="payload", value=payload) from None
    elif kind == "subscription":
        where = obj["where"]
        if not isinstance(where, str | list):
            raise SerdeError(
                f"raw subscription: where must be a string or a list of predicates, got "
                f"{_short(where)}", field="where", value=where)
    return obj


def _check_raw(rec: dict[str, Any], kind: str) -> None:
    for key in ("node", "client"):
        try:
            check_name(rec[key], key)
        except TopicNameError as exc:
            raise SerdeError(f"raw {kind}: {exc}", field=key, value=rec[key]) from None
    v = rec["id"]
    if not isinstance(v, str) or not v:
        raise SerdeError(f"raw {kind}: id must be a non-empty string, got {_short(v)}",
                         field="id", value=v)


