"""The hand-written codec of RawEvent, the message every event travels as.

:func:`encode_fast` and :func:`decode_fast` do what fastavro's generic functions do for the
RawEvent schema, faster. They are used only while the schema file is the one they were
written for (the same Parsing Canonical Form, :data:`RAW_EVENT_CANONICAL`), they produce
the same bytes as fastavro (the tests check both ways), and they hand anything unusual (an
odd type, a corrupt body) back to the caller by returning ``None``: fastavro then decides
and words the error.

Lengths below 64 (one varint byte, even) are read and written inline, without a function
call: the common case. That is why the decoder spells the same few lines out at each
string it reads.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from connectors.exceptions import SerdeError
from connectors.serde.framing import HEADER_SIZE

__all__ = ["RAW_EVENT_CANONICAL", "decode_fast", "encode_fast"]

RAW_EVENT_CANONICAL = (
    '{"name":"dlsroute.v1.RawEvent","type":"record","fields":[{"name":"node","type":"string"},'
    '{"name":"client","type":"string"},{"name":"id","type":"string"},{"name":"attrs","type":'
    '{"type":"map","values":["long","double","string"]}},{"name":"payload","type":"bytes"}]}'
)
"""The Parsing Canonical Form this codec was written for; any other RawEvent turns it off."""

_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_SMALL_LEN = [bytes([2 * n]) for n in range(64)]  # zig-zag varints of 0..63: one byte
_DOUBLE = struct.Struct("<d")
_pack_double = _DOUBLE.pack
_unpack_double = _DOUBLE.unpack_from


class _Slow(SerdeError):
    """The fast codec declines: fastavro handles this one (caught here, never raised out)."""


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


def encode_fast(header: bytes, node: str, client: str, event_id: str,
                attrs: Mapping[str, Any], payload: bytes | bytearray) -> bytes | None:
    """The RawEvent message, or ``None`` when an input is unusual (then fastavro decides).

    ``header`` is the schema's ten-byte header (:meth:`Serde.header`).
    """
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


def decode_fast(data: bytes) -> dict[str, Any] | None:
    """The record of a RawEvent message (its header already checked), or ``None``.

    ``None`` when anything is odd (a truncated or corrupt body, an unusual encoding such as
    map blocks with a negative count): fastavro then decides and words the error.
    """
    size = len(data)
    pos = HEADER_SIZE
    strings: list[str] = []
    try:
        for _ in range(3):  # node, client, id
            n = data[pos]
            if n < 0x80 and not n & 1:
                n >>= 1
                pos += 1
            else:
                n, pos = _read_len(data, pos)
            end = pos + n
            if end > size:
                return None
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
                    return None
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
                        return None
                    v = data[pos:end].decode()
                    pos = end
                elif branch == 0:
                    v, pos = _read_long(data, pos)
                else:
                    return None
                attrs[key] = v
        n, pos = _read_len(data, pos)
    except _FAST_FAILURES:
        return None
    if pos + n != size:  # a wrong payload length, or trailing bytes
        return None
    return {"node": strings[0], "client": strings[1], "id": strings[2], "attrs": attrs,
            "payload": data[pos:]}
