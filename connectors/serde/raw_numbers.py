"""Named numeric attributes of a batch of RawEvent messages, read at once.

:class:`NumericReader` gives, for a batch of RawEvent values, what the edge's per-event
Python path gives for each (``EdgeTable.read`` of :mod:`broker_node.edge`:
:func:`~connectors.serde.messages.decode_raw_event`, then the event's numeric values in a
given order): a ``float64`` row per value and whether it could be read. A row is *not ok*
when the value is not a RawEvent (``None``, empty, another header, a corrupt body) or when
a wanted attribute is missing (an optional one reads 0.0 instead), a string, or a double
that is NaN or infinite. A ``long`` reads as numpy converts a Python ``int`` (correctly
rounded beyond 2**53); a duplicate key counts once, the last one (as in a dict built in
order).

How: the values are joined into one buffer and one kernel (compiled with numba,
:mod:`dls._jit`) walks every message as :func:`~connectors.serde.raw_event.decode_fast`
does: the header, the three strings (node, client, id), the map's blocks (a negative count
followed by a byte size included), each key compared byte for byte with the wanted names
(UTF-8), each value (union branch 0 ``long``, 1 ``double``, 2 ``string``: zig-zag bytes 0,
2, 4), then the payload's length, which must end the message. The kernel decides a row
only where ``decode_fast`` would return the record (every string valid UTF-8, every varint
at most ten bytes and within 64 bits, nothing past the end, no trailing byte) or where the
header is not RawEvent's (then nothing decodes it). Anything else (truncated or corrupt
bodies, odd encodings, a wanted ``long`` beyond 64 bits) is left to the Python path, row
by row, so the result is always the Python path's.

Without numba, or with ``DLS_NO_JIT=1``, every row takes the Python path (``mode="auto"``);
``mode="kernel"`` runs the kernel's Python function then (slow; for tests). The kernel is
compiled on its first call and cached on disk (:mod:`dls._jit`); :func:`warm_up` does that
at a time of the caller's choosing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

import numpy as np

from connectors.exceptions import ConnectorSettingError
from connectors.serde.avro import SERDE
from connectors.serde.messages import decode_raw_event
from dls import _jit
from dls.exceptions import DLSError

__all__ = ["NumericReader", "warm_up"]

Mode = Literal["auto", "kernel", "python"]
F = TypeVar("F", bound=Callable[..., Any])

_OK, _NOT_OK, _DEFER = 0, 1, 2  # a row's status out of the kernel
_VARINT_OK, _VARINT_WIDE, _VARINT_BAD = 0, 1, 2
_INT64_MIN = -9223372036854775808

#: what ``EdgeTable.read`` treats as "not a RawEvent" (its ``except`` clause)
_CAUGHT = (DLSError, KeyError, TypeError, ValueError)


# -- the kernel -------------------------------------------------------------------------------
# Speed: numba counts references to the arrays a function passes to another (atomic
# operations at each call, even of a helper compiled into its caller), which would cost
# more than the parsing. So the helpers are compiled into their caller (``_inline``) and
# given *borrowed* arrays (``_borrowed``: the same data, no reference count), and every
# index is cast to uint64 (numba then skips its negative-index fix-up, which keeps LLVM
# from merging byte loads).
#
# A message is read as a sequence of varints, each followed by what the current state says:
# a string's bytes (node, client, id; a key; a string value), a key's union branch (one
# byte, as decode_fast reads it) and a double's eight bytes, or nothing (a block's count or
# byte size, a long, the payload's length, after which only the payload follows).
_S_STRING, _S_COUNT, _S_SIZE, _S_KEY, _S_TEXT, _S_LONG, _S_PAYLOAD = range(7)
_U = np.uint64
_HIGH = np.uint64(0x8080808080808080)  # the top bit of each of eight bytes


def _inline(fn: F) -> F:
    """A kernel's helper, compiled into each caller (when the kernels are compiled)."""
    if not _jit.ENABLED:
        return fn
    numba: Any = _numba
    return numba.njit(inline="always", nogil=True, error_model="numpy")(fn)


def _borrowed(a: np.ndarray) -> np.ndarray:
    """``a``; compiled, a copy of its header without a reference count.

    Only for an array the caller keeps alive while the copy is used: a kernel's argument
    (the Python caller holds it), never stored or returned.
    """
    return a


if _jit.ENABLED:
    import numba as _numba
    from numba.core import types as _types
    from numba.extending import intrinsic, overload
    from numba.np.arrayobj import make_array

    @intrinsic
    def _uncounted(typingctx: Any, arr: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            ary = make_array(arr)(context, builder, value=args[0])
            ary.meminfo = context.get_constant_null(_types.MemInfoPointer(arr.dtype))
            return ary._getvalue()

        return arr(arr), codegen

    @overload(_borrowed)
    def _borrowed_compiled(a: Any) -> Any:
        def impl(a: Any) -> Any:
            return _uncounted(a)  # type: ignore[call-arg]

        return impl


@_inline
def _varint(buf: np.ndarray, pos: int, end: int) -> tuple[Any, int, int]:
    """An Avro ``long`` at ``pos``: ``(value, position after it, status)``.

    Status ``_VARINT_OK``; ``_VARINT_WIDE`` for ten bytes (the most ``decode_fast`` reads)
    holding more than 64 bits (the value is then wrong); ``_VARINT_BAD`` past ``end`` or
    ten bytes.
    """
    z = np.int64(0)
    hi = np.int64(0)  # bit 63 of the zig-zag value (from the tenth byte)
    shift = 0
    vst = _VARINT_BAD
    while pos < end:
        b = np.int64(buf[_U(pos)])
        pos += 1
        if shift == 63:
            if b < 2:
                hi = b
                vst = _VARINT_OK
            elif b < 0x80:
                vst = _VARINT_WIDE
            break
        z |= (b & 0x7F) << shift
        if b < 0x80:
            vst = _VARINT_OK
            break
        shift += 7
    return ((z >> 1) | (hi << 62)) ^ -(z & 1), pos, vst


@_inline
def _word(buf: np.ndarray, pos: int, n: int) -> Any:
    """``buf[pos:pos + n]`` (``n`` at most 8) as a little-endian uint64."""
    w = _U(0)
    if pos + 8 <= buf.shape[0]:  # eight bytes, the ones past n masked off
        for e in range(8):
            w |= _U(buf[_U(pos + e)]) << _U(8 * e)
        if n < 8:
            w &= (_U(1) << _U(8 * n)) - _U(1)
    else:  # at the buffer's end: byte by byte
        for e in range(n):
            w |= _U(buf[_U(pos + e)]) << _U(8 * e)
    return w


@_jit.njit
def _utf8(buf: np.ndarray, pos: int, end: int) -> bool:
    """Whether ``buf[pos:end]`` is UTF-8 that Python's strict decoder takes."""
    ok = True
    while ok and pos < end:
        c = buf[_U(pos)]
        c1 = buf[_U(pos + 1)] if pos + 1 < end else 0
        if c < 0x80:
            pos += 1
        elif c < 0xC2:  # a continuation byte, or an overlong lead
            ok = False
        elif c < 0xE0:
            ok = pos + 1 < end and (c1 & 0xC0) == 0x80
            pos += 2
        elif c < 0xF0:  # not truncated, overlong or a surrogate
            ok = pos + 2 < end and (c1 & 0xC0) == 0x80 and (buf[_U(pos + 2)] & 0xC0) == 0x80 \
                and not (c == 0xE0 and c1 < 0xA0) and not (c == 0xED and c1 >= 0xA0)
            pos += 3
        else:  # not truncated, overlong or beyond U+10FFFF
            ok = c < 0xF5 and pos + 3 < end and (c1 & 0xC0) == 0x80 \
                and (buf[_U(pos + 2)] & 0xC0) == 0x80 and (buf[_U(pos + 3)] & 0xC0) == 0x80 \
                and not (c == 0xF0 and c1 < 0x90) and not (c == 0xF4 and c1 >= 0x90)
            pos += 4
    return ok


@_inline
def _text(buf: np.ndarray, pos: int, end: int) -> tuple[bool, Any]:
    """Whether ``buf[pos:end]`` decodes (strict UTF-8), and its first eight bytes."""
    first = _word(buf, pos, min(end - pos, 8))
    high = first
    a = pos + 8
    while a < end:  # ASCII, the common case, eight bytes at a time
        high |= _word(buf, a, min(end - a, 8))
        a += 8
    return not (high & _HIGH) or _utf8(buf, pos, end), first


@_inline
def _keep(buf: np.ndarray, key: Any, key_len: Any, key_word: Any, names: np.ndarray,
          name_starts: np.ndarray, name_words: np.ndarray, kind: np.ndarray,
          lval: np.ndarray, dval: np.ndarray, t: int, lv: Any, dv: float) -> None:
    """An entry read: its value becomes that of each wanted name equal to its key."""
    for j in range(name_starts.shape[0] - 1):
        s = name_starts[_U(j)]
        if name_starts[_U(j + 1)] - s != key_len or name_words[_U(j)] != key_word:
            continue
        same = True
        for e in range(8, key_len):  # the first eight bytes are in the words
            if names[_U(s + e)] != buf[_U(key + e)]:
                same = False
                break
        if same:
            kind[_U(j)] = t
            lval[_U(j)] = lv
            dval[_U(j)] = dv


@_inline
def _walk(buf: np.ndarray, pos: int, end: int, names: np.ndarray, name_starts: np.ndarray,
          name_words: np.ndarray, kind: np.ndarray, lval: np.ndarray,
          dval: np.ndarray) -> int:
    """Read a body (from ``pos``) as ``decode_fast`` does: ``_OK`` or ``_DEFER``.

    ``_OK``: ``kind``, ``lval``, ``dval`` say what each wanted name holds (as
    :func:`_read_rows` says), the last of its keys winning.
    """
    state, strings, left, st = _S_STRING, 0, np.int64(0), _DEFER
    key, key_len, key_word = np.int64(0), np.int64(0), _U(0)
    while True:
        v, pos, vst = _varint(buf, pos, end)
        if vst == _VARINT_BAD or (vst == _VARINT_WIDE and state != _S_SIZE
                                  and state != _S_LONG):
            break
        first = _U(0)
        if state == _S_STRING or state == _S_KEY or state == _S_TEXT:
            if v < 0 or v > end - pos:
                break
            good, first = _text(buf, pos, pos + v)
            if not good:
                break
            pos += v
        t = 0  # an entry's value, once read: 1 long, 2 double, 3 string, 4 wide long
        dv = 0.0
        if state == _S_STRING:
            strings += 1
            state = _S_COUNT if strings == 3 else _S_STRING
        elif state == _S_COUNT:
            if v == _INT64_MIN:
                break
            left = v if v >= 0 else -v  # below 0: a block with its byte size (not used)
            state = _S_PAYLOAD if v == 0 else (_S_KEY if v > 0 else _S_SIZE)
        elif state == _S_SIZE:
            state = _S_KEY
        elif state == _S_KEY:
            key, key_len, key_word = pos - v, v, first
            if pos >= end:
                break
            branch = buf[_U(pos)]
            pos += 1
            if branch == 2 and end - pos >= 8:  # a double: eight bytes, little-endian
                dv = _U(_word(buf, pos, 8)).view(np.float64)
                pos += 8
                t = 2
            elif branch == 0 or branch == 4:
                state = _S_LONG if branch == 0 else _S_TEXT
            else:
                break
        elif state == _S_PAYLOAD:  # its length must end the message
            if v >= 0 and v == end - pos:
                st = _OK
            break
        else:  # an entry's string, or its long (one beyond 64 bits: the Python path's)
            t = 3 if state == _S_TEXT else (1 if vst == _VARINT_OK else 4)
        if t != 0:
            _keep(buf, key, key_len, key_word, names, name_starts, name_words, kind, lval,
                  dval, t, v, dv)
            left -= 1
            state = _S_KEY if left > 0 else _S_COUNT
    return st


@_jit.njit
def _read_rows(buf: np.ndarray, starts: np.ndarray, header: np.ndarray, names: np.ndarray,
               name_starts: np.ndarray, name_words: np.ndarray, optional: np.ndarray,
               out: np.ndarray, status: np.ndarray, kind: np.ndarray, lval: np.ndarray,
               dval: np.ndarray) -> None:
    """Fill ``out[r]`` and ``status[r]`` for message ``r``, ``buf[starts[r]:starts[r + 1]]``.

    ``names[name_starts[j]:name_starts[j + 1]]``: wanted name ``j`` in UTF-8;
    ``name_words[j]``: its first eight bytes (fewer if shorter) as a little-endian
    ``uint64``. Status ``_OK``: ``decode_fast`` returns the record and row ``r`` holds its
    values; ``_NOT_OK``: the header is not RawEvent's, or a wanted value is missing, a
    string, NaN or infinite (the row NaN); ``_DEFER``: anything ``decode_fast`` declines,
    and a wanted long beyond 64 bits (it returns a Python int), for the Python path (the
    row left as it was). ``kind``, ``lval``, ``dval``: room for a value per name (``kind``
    0 absent, 1 a long in ``lval``, 2 a double in ``dval``, 3 a string, 4 a wide long).
    """
    buf, names, name_starts = _borrowed(buf), _borrowed(names), _borrowed(name_starts)
    name_words, kind = _borrowed(name_words), _borrowed(kind)
    lval, dval = _borrowed(lval), _borrowed(dval)
    hs = header.shape[0]
    for r in range(starts.shape[0] - 1):
        pos, end = starts[_U(r)], starts[_U(r + 1)]
        st = _NOT_OK
        if end - pos >= hs:
            st = _OK
            for i in range(hs):
                if buf[_U(pos + i)] != header[_U(i)]:
                    st = _NOT_OK
                    break
        if st == _OK:
            kind[:] = 0
            st = _walk(buf, pos + hs, end, names, name_starts, name_words, kind, lval, dval)
        for j in range(kind.shape[0] if st == _OK else 0):
            t = kind[_U(j)]
            if t == 0 and optional[_U(j)]:  # absent, optional
                out[_U(r), _U(j)] = 0.0
            elif t == 1:
                out[_U(r), _U(j)] = np.float64(lval[_U(j)])
            elif t == 2 and np.isfinite(dval[_U(j)]):
                out[_U(r), _U(j)] = dval[_U(j)]
            else:  # absent, a string, NaN, infinite, or a wide long (the Python path's)
                st = _DEFER if t == 4 else _NOT_OK
                break
        if st == _NOT_OK:
            out[_U(r), :] = np.nan
        status[_U(r)] = st


# -- the Python path ----------------------------------------------------------------------------
def read_event(value: bytes | None, names: Sequence[str], optional: Sequence[bool]
               ) -> tuple[dict[str, Any], np.ndarray] | None:
    """One event's attributes and its values of ``names`` (:func:`values_of`), or None.

    None when the value is not a RawEvent or its numeric values cannot be read: the rules
    :class:`NumericReader` keeps for a whole batch.
    """
    try:
        attrs = decode_raw_event(value or b"")["attrs"]
    except _CAUGHT:
        return None
    values = values_of(attrs, names, optional)
    return None if values is None else (attrs, values)


def values_of(attrs: dict[str, Any], names: Sequence[str], optional: Sequence[bool]
              ) -> np.ndarray | None:
    """An event's values of the numeric attributes ``names``, in that order.

    None when a required one is missing or not a finite number (a bool is no number
    here). An optional one left out reads as 0: a simple row constrains none.
    """
    out = np.empty(len(names), dtype=np.float64)
    for j, name in enumerate(names):
        v = attrs.get(name)
        if v is None and optional[j]:
            v = 0.0
        if (type(v) is not float and type(v) is not int) or not math.isfinite(v):
            return None
        out[j] = v
    return out


def _read_one(value: Any, names: Sequence[str], optional: Sequence[bool],
              out: np.ndarray) -> bool:
    """Whether ``value`` reads (its values then in ``out``): :func:`read_event`'s rules."""
    got = read_event(value, names, optional)
    if got is not None:
        out[:] = got[1]
    return got is not None


class NumericReader:
    """Reads named numeric attributes out of a batch of RawEvent messages at once."""

    def __init__(self, names: Sequence[str], optional: Sequence[bool], *,
                 mode: Mode = "auto") -> None:
        """A reader of ``names`` (``optional[j]``: name ``j`` may be left out, reading 0.0).

        ``mode``: ``"auto"``, the kernel when it is compiled and the Python path otherwise;
        ``"kernel"``, the kernel always (its Python function without numba); ``"python"``,
        the Python path for every row.

        Raises:
            ConnectorSettingError: ``names`` and ``optional`` of different lengths, or an
                unknown mode.
        """
        if len(names) != len(optional):
            raise ConnectorSettingError(
                f"{len(names)} names but {len(optional)} optional flags", field="optional",
                value=len(optional))
        if mode not in ("auto", "kernel", "python"):
            raise ConnectorSettingError(
                f"mode must be 'auto', 'kernel' or 'python', got {mode!r}", field="mode",
                value=mode)
        self.names = tuple(names)
        """The attributes read, in the order of a row's columns."""
        self.optional = tuple(bool(o) for o in optional)
        """Per name, whether it may be left out (it then reads 0.0)."""
        self.mode: Mode = mode
        """How rows are read (see :meth:`__init__`)."""
        self.deferred = 0
        """How many rows of the last :meth:`read` the kernel left to the Python path."""
        # A name that is not valid Unicode (a lone surrogate) keeps bytes no decoded key has.
        encoded = [n.encode("utf-8", "surrogatepass") for n in self.names]
        self._names = np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()
        self._name_starts = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=self._name_starts[1:])
        self._name_words = np.array(
            [int.from_bytes(e[:8], "little") for e in encoded], dtype=np.uint64)
        self._optional = np.array(self.optional, dtype=np.bool_)
        self._header: tuple[bytes, np.ndarray] | None = None

    def _header_array(self, header: bytes) -> np.ndarray:
        if self._header is None or self._header[0] != header:
            self._header = (header, np.frombuffer(header, dtype=np.uint8).copy())
        return self._header[1]

    def read(self, values: Sequence[bytes | None]) -> tuple[np.ndarray, np.ndarray]:
        """``(len(values), len(names))`` float64 and a bool ``ok`` per value.

        Row ``i`` holds what ``EdgeTable.read(values[i])`` gives as values, bit for bit,
        where ``ok[i]``; where it gives None, ``ok[i]`` is False and the row NaN.
        """
        n, k = len(values), len(self.names)
        out = np.empty((n, k))
        self.deferred = 0
        header = SERDE.raw_event_header  # None: another RawEvent schema, fastavro decodes
        use = _jit.ENABLED if self.mode == "auto" else self.mode == "kernel"
        rows: Sequence[int]
        if n == 0 or header is None or not use:
            ok = np.zeros(n, dtype=np.bool_)
            rows = range(n)
        else:
            status = self._kernel(values, header, out)
            ok = status == _OK
            rows = np.flatnonzero(status == _DEFER).tolist()
            self.deferred = len(rows)
        names, optional = self.names, self.optional
        for i in rows:
            ok[i] = good = _read_one(values[i], names, optional, out[i])
            if not good:
                out[i] = np.nan
        return out, ok

    def _kernel(self, values: Sequence[Any], header: bytes, out: np.ndarray) -> np.ndarray:
        """The kernel over ``values`` (rows in ``out``): each row's status (int8).

        Bytes-like values go through it as their bytes (fastavro, which reads a value that
        is not ``bytes``, decodes what ``decode_fast`` takes as it does); any other value
        (``None``...) is ``_DEFER``.
        """
        n = len(values)
        odd = None
        joined: bytes | None = None
        try:
            lengths = np.fromiter(map(len, values), np.int64, n)
            joined = b"".join(values)
        except (TypeError, BufferError):  # None, ...
            pass
        # (a memoryview of items wider than bytes: its length is not its bytes')
        if joined is None or len(joined) != int(lengths.sum()):  # those rows: Python's
            odd = np.fromiter((type(v) is not bytes for v in values), np.bool_, n)
            parts = [b"" if o else v for v, o in zip(values, odd.tolist(), strict=True)]
            lengths = np.fromiter(map(len, parts), np.int64, n)
            joined = b"".join(parts)
        starts = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=starts[1:])
        status = np.empty(n, dtype=np.int8)
        k = len(self.names)
        _read_rows(np.frombuffer(joined, dtype=np.uint8), starts, self._header_array(header),
                   self._names, self._name_starts, self._name_words, self._optional, out,
                   status, np.zeros(k, dtype=np.int8), np.zeros(k, dtype=np.int64),
                   np.zeros(k, dtype=np.float64))
        if odd is not None:
            status[odd] = _DEFER
        return status


def warm_up() -> None:
    """Compile the kernel (or load it from numba's cache) on a tiny batch, now.

    For a process that would rather pay that (seconds, once per kernel source and CPU) at
    start than on its first batch. Nothing to do when the kernel is not compiled.
    """
    header = SERDE.raw_event_header
    if _jit.ENABLED and header is not None:
        NumericReader(["x"], [False], mode="kernel").read([header, None])
