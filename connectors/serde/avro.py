"""The generic Avro serde: single-object encoding of every schema of a folder of ``.avsc``.

Every message is Avro single-object encoded (:mod:`connectors.serde.framing`): any reader
can tell the schema from the first ten bytes, without a registry. :data:`SERDE` loads the
project's own schemas, ``schemas/avro`` (shipped in the wheel as package data of the
``schemas`` package). Encoding and decoding a RawEvent goes through the hand-written codec
of :mod:`connectors.serde.raw_event` while the schema is the one it was written for.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import fingerprint as avro_fingerprint
from fastavro.schema import to_parsing_canonical_form
from fastavro.validation import validate as avro_validate

from connectors.exceptions import SerdeError
from connectors.serde.framing import HEADER_SIZE, MARKER
from connectors.serde.raw_event import RAW_EVENT_CANONICAL, decode_fast

__all__ = ["SCHEMA_DIR", "SERDE", "Serde"]


def _schema_dir() -> Path:
    """``avro/`` of the ``schemas`` package: the repository's folder, or the installed copy.

    The ``schemas`` package sits beside ``connectors`` both in the repository and in
    site-packages, so the folder is looked for there first, without importing a package of
    so common a name (another one could come first on ``sys.path``); only when it is not
    there (an unusual install) does :mod:`importlib.resources` locate the package.
    """
    beside = Path(__file__).resolve().parents[2] / "schemas" / "avro"
    if beside.is_dir():
        return beside
    try:
        return Path(str(resources.files("schemas").joinpath("avro")))
    except ModuleNotFoundError:  # not installed: Serde() then says where it looked
        return beside


SCHEMA_DIR: Path = _schema_dir()
"""Where the ``.avsc`` files of the wire contract live."""


def short_repr(v: Any, limit: int = 80) -> str:
    """``repr(v)``, cut to ``limit`` characters (for error messages)."""
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
    #: an earlier version of a schema: the current one, which its records are read as
    reader: dict[str, Any] | None = None


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
        self._load_previous()
        raw_event = self._by_name.get("RawEvent")
        self.raw_event_header: bytes | None = (
            raw_event.header
            if raw_event is not None and raw_event.canonical == RAW_EVENT_CANONICAL else None)
        """The RawEvent header while the hand-written codec applies (the shipped schema)."""

    def _load_previous(self) -> None:
        """Earlier versions of schemas (``previous/<Name>.<n>.avsc``): still read.

        A message written with an earlier version (in flight, or kept on a topic, while
        nodes are upgraded) decodes as a record of the current schema of that name, its
        new fields at their defaults. Nothing is written with an earlier version.
        """
        for path in sorted((self.schema_dir / "previous").glob("*.avsc")):
            old = _load(path)
            current = self._by_name.get(old.name)
            if current is None:
                raise SerdeError(f"previous/{path.name}: no current schema named "
                                 f"{old.name!r}", field="name", value=old.name)
            if old.fingerprint in self._by_fp:
                raise SerdeError(f"previous/{path.name}: same fingerprint as "
                                 f"{self._by_fp[old.fingerprint].name}",
                                 field="fingerprint", value=old.fingerprint.hex())
            self._by_fp[old.fingerprint] = _Schema(
                old.name, old.fullname, old.parsed, old.canonical, old.fingerprint,
                old.header, current.defaults, reader=current.parsed)

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
        if entry.header == self.raw_event_header and type(data) is bytes:
            rec = decode_fast(data)
            if rec is not None:  # else fastavro decides and words the error
                return entry.name, rec
        return entry.name, self._decode_body(entry, data)

    def decode_as(self, name: str, data: bytes) -> dict[str, Any]:
        """Decode a message that must be of schema ``name``.

        Raises:
            SerdeError: As :meth:`decode`, or the message is of another known schema (the
                error says which was expected and which was found).
        """
        expected = self._entry(name)
        found = self._identify(data)
        if found.name != expected.name:  # an earlier version of it reads as it
            raise SerdeError(f"expected a {name} message, got a {found.name}",
                             field="schema", value=found.name)
        return self.decode(data)[1]

    @staticmethod
    def _decode_body(entry: _Schema, data: bytes) -> dict[str, Any]:
        buf = io.BytesIO(data)
        buf.seek(HEADER_SIZE)
        try:
            record = fastavro.schemaless_reader(buf, entry.parsed, entry.reader)
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
                        f"{name}.{fname}[{k!r}]: {short_repr(v)} ({type(v).__name__}) does "
                        f"not fit {_type_text(ftype['values'])}", field=f"{fname}.{k}", value=v)
        if not _fits(value, ftype):
            return SerdeError(
                f"{name}.{fname}: {short_repr(value)} ({type(value).__name__}) does not fit "
                f"{_type_text(ftype)}", field=fname, value=value)
        if not _encodable(value):
            return SerdeError(f"{name}.{fname}: {short_repr(value)} is not valid Unicode (it "
                              f"has a lone surrogate)", field=fname, value=value)
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


SERDE = Serde()
"""The serde of the project's own schemas (``schemas/avro`` of the repository)."""
