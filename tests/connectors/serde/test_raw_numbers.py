"""NumericReader gives, for every value of a batch, what the edge's Python path gives.

The reference is the real ``EdgeTable.read`` (decode_raw_event, then values_of), so that
the two cannot drift: ``ok`` is False exactly where it returns None, and the values are
equal bit for bit where it does not. Messages are built by hand (:func:`_message`) to reach
what an encoder never writes: duplicate keys, map blocks of negative count, padded
varints, odd union branches, invalid UTF-8, wide longs. Each test runs every mode
(``auto``, ``kernel``: compiled unless ``DLS_NO_JIT=1``, ``python``), and one runs the
kernel's Python function even when it is compiled.
"""

from __future__ import annotations

import array
import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_node.edge import EdgeTable
from connectors.serde import HEADER_SIZE, SERDE, decode_raw_event, encode_raw_event
from connectors.serde import raw_numbers as RN
from connectors.serde.raw_event import decode_fast
from connectors.serde.raw_numbers import NumericReader
from dls import _jit
from dls.space import ContentSpace

HEADER = SERDE.header("RawEvent")
MODES = ("auto", "kernel", "python")
L, D, S = "long", "double", "string"

SPACE = ContentSpace.from_spec({"attributes": [
    {"name": "a", "type": "numeric", "low": 0, "high": 100, "granules": 4},
    {"name": "b", "type": "numeric", "low": -10, "high": 10, "granules": 4, "optional": True},
    {"name": "d", "type": "discrete", "values": ["x", "y"]},
    {"name": "c", "type": "numeric", "low": 0, "high": 1e6, "granules": 8},
    {"name": "e", "type": "numeric", "low": 0, "high": 1, "granules": 2, "optional": True},
]})
TABLE = EdgeTable(SPACE)
NAMES = TABLE.numeric_names  # a, b, c, e
OPTIONAL = [a.optional for a in SPACE.attributes if a.kind == "numeric"]


class _Names(EdgeTable):
    """The real ``EdgeTable.read`` over any names (a space takes ASCII ones only).

    Only the two attributes it reads are set (not a table otherwise).
    """

    def __init__(self, names: Sequence[str], optional: Sequence[bool]) -> None:
        self.numeric_names = tuple(names)
        self._optional = list(optional)


# -- building messages by hand ----------------------------------------------------------------
def _zz(n: int, pad: int = 0) -> bytes:
    """Avro ``long``: zig-zag varint, with ``pad`` redundant continuation bytes."""
    z = (n << 1) ^ (n >> 63) if -(1 << 63) <= n < (1 << 63) else n  # n beyond: z given
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    for _ in range(pad):  # 0x05 -> 0x85 0x00: the same value, one byte more
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


def _str(s: str | bytes, pad: int = 0) -> bytes:
    b = s.encode("utf-8", "surrogatepass") if isinstance(s, str) else s
    return _zz(len(b), pad) + b


def _value(v: tuple[str, Any]) -> bytes:
    kind, x = v
    if kind == "long":
        return b"\x00" + _zz(x)
    if kind == "double":
        return b"\x02" + struct.pack("<d", x)
    if kind == "string":
        return b"\x04" + _str(x)
    return x  # "raw": the branch and the value as given


def _message(entries: Sequence[tuple[str | bytes, tuple[str, Any]]],
             blocks: Sequence[tuple[int, bool]] | None = None, *, node: str | bytes = "n1",
             client: str | bytes = "c1", event_id: str | bytes = "e1",
             payload: bytes = b"pay", header: bytes = HEADER, pad: int = 0) -> bytes:
    """A RawEvent message; ``blocks``: (entries in the block, negative count) in order."""
    parts = [header, _str(node, pad), _str(client), _str(event_id)]
    if blocks is None:
        blocks = [(len(entries), False)] if entries else []
    at = 0
    for size, negative in blocks:
        body = b"".join(_str(k) + _value(v) for k, v in entries[at:at + size])
        at += size
        parts.append(_zz(-size) + _zz(len(body)) if negative else _zz(size, pad))
        parts.append(body)
    assert at == len(entries)
    parts.append(b"\x00")
    parts.append(_str(payload))
    return b"".join(parts)


# -- checking ---------------------------------------------------------------------------------
STATS = {"ok": 0, "rows": 0}


def _check(values: Sequence[Any], table: EdgeTable = TABLE, modes: Sequence[str] = MODES
           ) -> np.ndarray:
    """Every mode's rows against ``table.read``; the reference's ok flags."""
    names, optional = table.numeric_names, list(table._optional)
    want = [table.read(v) for v in values]
    ok_want = np.array([w is not None for w in want], dtype=bool)
    STATS["ok"] += int(ok_want.sum())
    STATS["rows"] += len(values)
    header = SERDE.raw_event_header
    if header is not None and ("kernel" in modes or ("auto" in modes and _jit.ENABLED)):
        # the kernel leaves to the Python path exactly what decode_fast declines, and the
        # wanted longs beyond 64 bits (which it returns as Python ints)
        status = NumericReader(names, optional)._kernel(
            values, header, np.empty((len(values), len(names))))
        strict = not _bytes_like(values)  # then only bytes go through the kernel
        for v, s in zip(values, status.tolist(), strict=True):
            assert (s == RN._DEFER) == _odd(v, header, strict, names), (v, s)
    for mode in modes:
        out, ok = NumericReader(names, optional, mode=mode).read(values)
        assert out.shape == (len(values), len(names)) and out.dtype == np.float64
        assert ok.dtype == np.bool_ and ok.shape == (len(values),)
        for i, w in enumerate(want):
            if w is None:
                assert not ok[i], (mode, i, values[i])
                assert np.isnan(out[i]).all()
            else:
                assert ok[i], (mode, i, values[i])
                assert out[i].tobytes() == w[1].tobytes(), (mode, i, out[i], w[1])
    return ok_want


def _bytes_like(values: Sequence[Any]) -> bool:
    try:
        return all(len(v) == memoryview(v).nbytes for v in values)
    except TypeError:
        return False


def _odd(value: Any, header: bytes, strict: bool, names: Sequence[str]) -> bool:
    """Whether the kernel must leave ``value`` to the Python path."""
    if strict and type(value) is not bytes:
        return True
    data = bytes(value)
    if data[:HEADER_SIZE] != header:
        return False
    rec = decode_fast(data)
    if rec is None:
        return True
    wanted = [rec["attrs"].get(n) for n in names]
    return any(type(x) is int and not -(1 << 63) <= x < (1 << 63) for x in wanted)


def _decided(values: Sequence[Any], names: Sequence[str] = NAMES,
             optional: Sequence[bool] = OPTIONAL) -> int:
    """How many rows the kernel leaves to the Python path."""
    reader = NumericReader(names, optional, mode="kernel")
    reader.read(values)
    return reader.deferred


# -- strategies -------------------------------------------------------------------------------
KEYS = st.one_of(
    st.sampled_from(["a", "b", "c", "e", "d", "A", "aa", "a ", " a", "c\x00", "", "é", "aé",
                     "\u00e9", "e\u0301", "\U0001f600", "abcdefghij", "abcdefghik",
                     "abcdefgh"]),
    st.text(max_size=6))
INT64 = st.one_of(
    st.integers(-(1 << 63), (1 << 63) - 1),
    st.sampled_from([0, 1, -1, (1 << 53) + 1, -(1 << 53) - 1, (1 << 53) + 3, (1 << 62),
                     (1 << 62) - 1, -(1 << 62), (1 << 63) - 1, -(1 << 63), (1 << 63) - 513,
                     (1 << 54) + 2]),
    st.integers(-(1 << 60), (1 << 60) - 1).map(lambda x: x << 3))
#: string bytes, UTF-8 or nearly: Python's strict decoder decides which
RAW_STRINGS = st.one_of(
    st.binary(max_size=20),
    st.lists(st.sampled_from([b"\xc2", b"\x80", b"\xbf", b"\xe0", b"\xa0", b"\xed", b"\x9f",
                              b"\xef", b"\xf0", b"\x90", b"\xf4", b"\x8f", b"\xf5", b"\xc1",
                              b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"a"]),
             max_size=6).map(b"".join),
    st.tuples(st.binary(max_size=17), st.binary(max_size=3)).map(lambda t: b"a" * len(t[0])
                                                                 + t[1]),
    st.text(max_size=20).map(str.encode))
TYPED = st.one_of(  # what an encoder takes
    st.tuples(st.just("long"), INT64),
    st.tuples(st.just("double"), st.floats()),
    st.tuples(st.just("double"), st.sampled_from([-0.0, 5e-324, math.inf, -math.inf,
                                                   math.nan, 1.7976931348623157e308])),
    st.tuples(st.just("string"), st.text(max_size=5)))
VALUES = st.one_of(
    TYPED,
    st.tuples(st.just("raw"), st.tuples(INT64, st.integers(1, 3)).map(
        lambda t: b"\x00" + _zz(t[0], min(t[1], 10 - len(_zz(t[0])))))))  # padded long
NUMBERS = st.one_of(st.tuples(st.just("long"), INT64),
                    st.tuples(st.just("double"), st.floats(allow_nan=False,
                                                           allow_infinity=False)))


@st.composite
def messages(draw: Any) -> bytes:
    """A message ``decode_fast`` takes, some with duplicates, blocks and padded varints."""
    entries = draw(st.lists(st.tuples(KEYS, VALUES), max_size=6))
    for name in draw(st.lists(st.sampled_from(["a", "b", "c", "e"]), max_size=7)):
        # the wanted names, mostly numbers, some twice (duplicates)
        value = draw(st.one_of(NUMBERS, NUMBERS, NUMBERS, VALUES))
        entries.insert(draw(st.integers(0, len(entries))), (name, value))
    if draw(st.booleans()):  # the last of a and c (required) numbers: mostly ok
        for name in draw(st.permutations(["a", "c", "b"])):
            entries.append((name, draw(NUMBERS)))
        entries += draw(st.lists(st.tuples(KEYS.filter(lambda k: k not in "abce"), VALUES),
                                 max_size=3))
    blocks = []
    left = len(entries)
    while left:
        size = draw(st.integers(1, left))
        blocks.append((size, draw(st.booleans())))
        left -= size
    return _message(entries, blocks, node=draw(st.text(max_size=4)),
                    event_id=draw(st.text(max_size=4)), payload=draw(st.binary(max_size=6)),
                    pad=draw(st.integers(0, 2)))


@st.composite
def odd_strings(draw: Any) -> bytes:
    """A message with string bytes that may not be UTF-8, as node, key or string value."""
    raw = draw(RAW_STRINGS)
    where = draw(st.sampled_from(["node", "client", "id", "key", "value"]))
    entries: list[Any] = [("a", (L, 1)), ("c", (D, 2.0))]
    if where in ("key", "value"):
        entry = (raw, (L, 3)) if where == "key" else ("d", (S, raw))
        entries.insert(draw(st.integers(0, 2)), entry)
    kw = {where: raw} if where in ("node", "client") else {}
    return _message(entries, event_id=raw if where == "id" else "e1", **kw)


@st.composite
def corrupted(draw: Any) -> bytes:
    """A message with bytes flipped, cut, inserted or dropped."""
    data = bytearray(draw(messages()))
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from(["flip", "flip", "cut", "insert", "drop"]))
        i = draw(st.integers(0, max(0, len(data) - 1)))
        if what == "flip" and data:
            data[i] ^= draw(st.integers(1, 255))
        elif what == "cut":
            del data[i:]
        elif what == "insert":
            data.insert(i, draw(st.integers(0, 255)))
        elif data:
            del data[i]
    return bytes(data)


PROPERTY = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


# -- properties -------------------------------------------------------------------------------
@PROPERTY
@given(st.lists(messages(), max_size=12))
def test_valid_messages_read_as_the_python_path(values: list[bytes]) -> None:
    _check(values)
    assert _decided(values) == 0  # decode_fast takes them all: the kernel decides every one


@PROPERTY
@given(st.lists(st.one_of(corrupted(), messages(), st.none(), st.just(b""),
                          st.binary(max_size=30), st.binary(max_size=20).map(
                              lambda b: HEADER + b)), max_size=12))
def test_corrupt_messages_read_as_the_python_path(values: list[bytes | None]) -> None:
    _check(values)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages())
def test_every_truncation_reads_as_the_python_path(data: bytes) -> None:
    ok = _check([data[:n] for n in range(len(data) + 1)])
    assert not ok[:-1].any()  # a cut message never decodes (the payload length says so)


@PROPERTY
@given(st.lists(st.tuples(KEYS, VALUES), max_size=6),
       st.lists(st.sampled_from(["a", "é", "aé", "\U0001f600", "b", "\ud800", "A",
                                 "abcdefghij", "abcdefgh"]),
                min_size=0, max_size=4, unique=True), st.data())
def test_any_names_read_as_the_python_path(entries: list[tuple[str, tuple[str, Any]]],
                                           names: list[str], data: Any) -> None:
    optional = data.draw(st.lists(st.booleans(), min_size=len(names), max_size=len(names)))
    entries += [(n, data.draw(VALUES)) for n in names if data.draw(st.booleans())]
    _check([_message(entries)], _Names(names, optional))


@PROPERTY
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "e", "z"]), TYPED), max_size=6))
def test_the_encoders_messages_read_as_the_python_path(entries: list[Any]) -> None:
    attrs = {k: v for k, (_, v) in entries}
    data = encode_raw_event("n", "c", "id", attrs, b"p")
    assert decode_raw_event(data)["attrs"].keys() == attrs.keys()
    _check([data])
    assert _decided([data]) == 0


def test_the_hand_built_messages_are_the_encoders() -> None:
    attrs = {"a": 1, "b": -2.5, "sym": "IBM", "c": (1 << 63) - 1}
    entries = [(k, ("long" if type(v) is int else "double" if type(v) is float else "string",
                    v)) for k, v in attrs.items()]
    assert _message(entries) == encode_raw_event("n1", "c1", "e1", attrs, b"pay")


# -- the rules, one by one ----------------------------------------------------------------------
def _one(entries: Any, **kw: Any) -> tuple[np.ndarray, bool]:
    data = _message(entries, **kw)
    ok = _check([data])
    out, _ = NumericReader(NAMES, OPTIONAL).read([data])
    return out[0], bool(ok[0])


FULL = [("a", (L, 1)), ("c", (D, 2.5))]


def test_required_present_and_optional_absent_or_present() -> None:
    out, ok = _one(FULL)
    assert ok and out.tolist() == [1.0, 0.0, 2.5, 0.0]
    out, ok = _one([*FULL, ("e", (D, 0.25)), ("b", (L, -3))])
    assert ok and out.tolist() == [1.0, -3.0, 2.5, 0.25]
    assert not _one([("a", (L, 1))])[1]  # c missing
    assert _decided([_message(FULL)]) == 0


def test_a_numeric_attribute_sent_as_a_string_does_not_read() -> None:
    assert not _one([*FULL, ("a", (S, "1"))])[1]
    assert not _one([*FULL, ("b", (S, "1"))])[1]  # optional: present, so it must be a number
    assert _one([*FULL, ("d", (S, "x")), ("zz", (S, "é"))])[1]  # not wanted: skipped


def test_longs_convert_as_numpy_converts_a_python_int() -> None:
    for v in [(1 << 53) + 1, (1 << 53) + 3, -(1 << 53) - 1, (1 << 63) - 1, -(1 << 63),
              (1 << 62) + 1, 12345678901234567]:
        out, ok = _one([("a", (L, v)), ("c", (L, ~v))])
        assert ok and out[0] == np.float64(v) == float(v) and out[2] == float(~v)


def test_nan_and_infinities_do_not_read_and_signed_zero_keeps_its_sign() -> None:
    for bad in (math.nan, math.inf, -math.inf):
        assert not _one([*FULL, ("b", (D, bad))])[1]
    out, ok = _one([("a", (D, -0.0)), ("c", (D, 5e-324))])
    assert ok and math.copysign(1.0, out[0]) == -1.0 and out[2] == 5e-324


def test_the_last_of_duplicate_keys_wins() -> None:
    assert _one([*FULL, ("a", (S, "x")), ("a", (L, 7))]) [0][0] == 7.0
    assert not _one([*FULL, ("a", (L, 7)), ("a", (S, "x"))])[1]
    assert not _one([*FULL, ("a", (L, 7)), ("a", (D, math.nan))])[1]
    out, ok = _one([*FULL, ("a", (D, math.nan)), ("a", (D, 3.5))])
    assert ok and out[0] == 3.5
    # across blocks, one of them negative
    out, ok = _one([*FULL, ("a", (L, 9)), ("c", (L, 4))], blocks=[(2, True), (1, False),
                                                                    (1, True)])
    assert ok and out[0] == 9.0 and out[2] == 4.0


def test_map_blocks_of_negative_count() -> None:
    data = _message([*FULL, ("b", (L, 2))], blocks=[(1, True), (2, True)])
    ok = _check([data])
    assert ok[0] and _decided([data]) == 0
    # the byte size is read and not used (decode_fast): a wrong one reads the same
    body = _str("a") + _value((L, 5)) + _str("c") + _value((L, 6))
    odd = HEADER + _str("n") + _str("c") + _str("i") + _zz(-2) + _zz(999) + body + b"\x00" \
        + _str(b"")
    assert _check([odd])[0] and _decided([odd]) == 0
    wide = HEADER + _str("n") + _str("c") + _str("i") + _zz(-2) + b"\xff" * 9 + b"\x7f" \
        + body + b"\x00" + _str(b"")  # a ten-byte size beyond 64 bits: still only skipped
    assert _check([wide])[0]


def test_names_compare_as_utf8_bytes() -> None:
    # keys that look like the names but are not them
    assert not _one([("A", (L, 1)), ("c", (L, 1))])[1]
    assert not _one([("a ", (L, 1)), ("c", (L, 1))])[1]
    assert not _one([("a\x00", (L, 1)), ("c", (L, 1))])[1]
    assert not _one([("á", (L, 1)), ("c", (L, 1))])[1]
    # non-ASCII names, composed and decomposed (different code points: different names)
    table = _Names(["é", "e\u0301", "\U0001f600", "a"], [False, True, False, True])
    msgs = [_message([("é", (L, 1)), ("\U0001f600", (D, 2.0))]),
            _message([("é", (L, 1)), ("e\u0301", (L, 5)), ("\U0001f600", (D, 2.0))]),
            _message([("e\u0301", (L, 1)), ("\U0001f600", (D, 2.0))]),
            _message([("é", (L, 1)), ("\U0001f600", (S, "2"))])]
    assert _check(msgs, table).tolist() == [True, True, False, False]
    assert _decided(msgs, table.numeric_names, table._optional) == 0
    # a name that is not valid Unicode matches no key
    assert _check([_message([("a", (L, 1))])], _Names(["\ud800"], [True])).tolist() == [True]
    assert _check([_message([("a", (L, 1))])], _Names(["\ud800"], [False])).tolist() == [
        False]


def test_names_longer_than_eight_bytes() -> None:
    names = ["abcdefgh", "abcdefgh1", "abcdefgh12", "abcdefghé", "abcdefgh_a_longer_name"]
    table = _Names(names, [True] * len(names))
    keys = [*names, "abcdefgh2", "abcdefgh13", "abcdefgh_a_longer_namf", "bbcdefgh1",
            "abcdefghè", "abcdefg"]
    msgs = [_message([(k, (L, i))]) for i, k in enumerate(keys)]
    msgs.append(_message([(k, (D, i + 0.5)) for i, k in enumerate(reversed(keys))]))
    _check(msgs, table)
    out, ok = NumericReader(names, [True] * len(names)).read(msgs)
    assert ok.all()
    for i in range(len(keys)):  # each key matches its own name, if any, only
        assert out[i].tolist() == [float(i) if j == i else 0.0 for j in range(len(names))]
    assert _decided(msgs, names, [True] * len(names)) == 0


def test_headers_that_are_not_raw_events_do_not_read() -> None:
    good = _message(FULL)
    msgs = [b"\xc3\x02" + good[2:], good[:2] + b"\x00" * 8 + good[10:],
            SERDE.header("Heartbeat") + good[10:], good[:9], good[:10], b"\xc3", None, b""]
    assert not _check(msgs).any()
    assert _decided(msgs[:4]) == 0  # the kernel knows: nothing decodes another header


def test_truncated_and_trailing_bytes() -> None:
    good = _message([*FULL, ("d", (S, "xyz"))], payload=b"12345")
    assert not _check([good[:-1], good + b"\x00", good[:-6]]).any()


def test_odd_encodings_left_to_the_python_path() -> None:
    base = HEADER + _str("n") + _str("c") + _str("i")
    tail = b"\x00" + _str(b"pl")
    msgs = {
        # a union branch written in two bytes (0x80 0x00: branch 0): fastavro decides
        "padded branch": base + _zz(2) + _str("a") + b"\x80\x00" + _zz(4) + _str("c")
        + _value((L, 1)) + tail,
        "branch 3": base + _zz(2) + _str("a") + b"\x06" + _zz(4) + _str("c") + _value((L, 1))
        + tail,
        "negative branch": base + _zz(1) + _str("a") + b"\x01" + _zz(4) + tail,
        # a long beyond 64 bits in ten bytes (decode_fast returns a Python int)
        "wide long": base + _zz(2) + _str("a") + b"\x00" + b"\xfe" + b"\xff" * 8 + b"\x03"
        + _str("c") + _value((L, 1)) + tail,
        "eleven-byte long": base + _zz(2) + _str("a") + b"\x00" + b"\xff" * 10 + b"\x01"
        + _str("c") + _value((L, 1)) + tail,
        "padded lengths": base + _zz(2, pad=3) + _str("a", pad=2) + _value((L, 1))
        + _str("c", pad=8) + _value((L, 2)) + tail,
        "negative length": HEADER + b"\x01" + tail,
        "negative key length": base + _zz(1) + b"\x03a" + _value((L, 1)) + tail,
        "count -2**63": base + b"\xff" * 9 + b"\x01" + b"\x00" + tail,
        "huge count": base + b"\xfe" + b"\xff" * 8 + b"\x01" + _str("a") + _value((L, 1))
        + tail,
        "bad utf-8 key": base + _zz(2) + _str(b"\xff") + _value((L, 1)) + _str("a")
        + _value((L, 1)) + _str("c") + _value((L, 1)) + tail,
        "surrogate key": base + _zz(1) + _str(b"\xed\xa0\x80") + _value((L, 1)) + tail,
        "bad utf-8 node": HEADER + _str(b"\xc0\x80") + _str("c") + _str("i") + b"\x00"
        + tail,
        "bad utf-8 value": base + _zz(3) + _str("a") + _value((L, 1)) + _str("c")
        + _value((L, 1)) + _str("d") + b"\x04" + _str(b"\xe0\x80\x80") + tail,
        "short double": base + _zz(1) + _str("a") + b"\x02\x00\x00",
    }
    values = list(msgs.values())
    ok = _check(values)
    got = dict(zip(msgs, ok.tolist(), strict=True))
    assert got["padded lengths"]
    assert not got["bad utf-8 key"] and not got["short double"]
    _check(values, _Names(["a"], [True]))


def test_longs_beyond_64_bits() -> None:
    # ten bytes with more than 64 bits: decode_fast returns a Python int, 2**64 here
    wide = b"\x00" + b"\x80" * 9 + b"\x04"
    assert decode_fast(_message([("a", ("raw", wide))]))["attrs"]["a"] == 1 << 64
    wanted = _message([("a", ("raw", wide)), ("c", (L, 1))])
    unwanted = _message([("a", (L, 1)), ("zz", ("raw", wide)), ("c", (L, 1))])
    overwritten = _message([("a", ("raw", wide)), ("c", (L, 1)), ("a", (D, 0.5))])
    assert _check([wanted, unwanted, overwritten]).tolist() == [True, True, True]
    out, _ = NumericReader(NAMES, OPTIONAL).read([wanted])
    assert out[0, 0] == float(1 << 64)
    assert _decided([wanted]) == 1  # the Python path converts it
    assert _decided([unwanted, overwritten]) == 0
    # a string for another wanted name: not ok, whoever decides
    assert not _check([_message([("a", ("raw", wide)), ("c", (S, "1"))])]).any()


def test_values_that_are_not_bytes_read_as_the_python_path() -> None:
    good = _message(FULL)
    _check([bytearray(good), memoryview(good), good, None, "text", 5])
    _check([bytearray(good), memoryview(good), good])
    wide = memoryview(array.array("i", good[:8]))  # len 2, 8 bytes
    assert _check([good, wide, good]).tolist() == [True, False, True]


def test_empty_batches_and_no_names() -> None:
    for mode in MODES:
        out, ok = NumericReader(NAMES, OPTIONAL, mode=mode).read([])
        assert out.shape == (0, 4) and ok.shape == (0,)
        out, ok = NumericReader([], [], mode=mode).read([_message([]), b"x", None])
        assert out.shape == (3, 0) and ok.tolist() == [True, False, False]
    _check([_message([]), b"x"], _Names([], []))


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="optional"):
        NumericReader(["a"], [])
    with pytest.raises(ValueError, match="mode"):
        NumericReader(["a"], [False], mode="fast")  # type: ignore[arg-type]


def test_another_raw_event_schema_reads_through_the_python_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    values = [_message(FULL), _message([("a", (S, "x"))]), b""]
    monkeypatch.setattr(SERDE, "raw_event_header", None)  # the hand-written codec is off
    assert _check(values).tolist() == [True, False, False]
    assert _decided(values) == 0  # nothing went through the kernel


def test_a_batch_of_many_events() -> None:
    rng = np.random.default_rng(3)
    values = [encode_raw_event("n", "c", str(i), {
        "a": float(rng.uniform(0, 100)), "c": int(rng.integers(-(1 << 62), 1 << 62)),
        "d": "x", **({"b": float(rng.normal())} if i % 3 else {})}) for i in range(2000)]
    values[7] = values[7][:-2]
    ok = _check(values)
    assert ok.sum() == 1999 and _decided(values) == 1


# -- the kernel's Python function ---------------------------------------------------------------
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(messages(), corrupted(), st.none()), max_size=5))
def test_the_kernels_python_function_reads_as_the_python_path(
        values: list[bytes | None]) -> None:
    reference = getattr(RN._read_rows, "py_func", RN._read_rows)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RN, "_read_rows", reference)
        _check(values, modes=["kernel"])
    odd = HEADER + _str("n") + _str("c") + _str("i") + _zz(-1) + _zz(3) + _str("a") \
        + _value((L, (1 << 63) - 1)) + _zz(1) + _str("c") + _value((D, -0.0)) + b"\x00" \
        + _str(b"")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RN, "_read_rows", reference)
        assert _check([odd], modes=["kernel"]).tolist() == [True]


def _utf8_cases() -> list[bytes]:
    """Every lead byte from 0x80, before second bytes at the edges of the valid ranges."""
    seconds = [0x00, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xFF]
    tails = [b"", b"\x80", b"\x80\x80", b"\xbf\xbf\x7f", b"\x80\x80\x80", b"\x80\xc0"]
    out = [bytes([lead]) for lead in range(0x80, 0x100)]
    out += [bytes([lead, c1]) + tail for lead in range(0xC0, 0x100) for c1 in seconds
            for tail in tails]
    return out


def test_the_utf8_check_is_pythons_at_every_edge() -> None:
    cases = _utf8_cases()
    modes = ["auto", "python"] if _jit.ENABLED else ["python"]  # the Python kernel: slow
    for at, prefix in [("key", b""), ("value", b"x"), ("node", b"n"), ("key", b"k" * 13),
                       ("value", b"v" * 8), ("node", b"n" * 21)]:
        values = []
        for raw in cases:
            entries: list[Any] = [("a", (L, 1)), ("c", (D, 2.0))]
            entries.insert(1, (prefix + raw, (L, 3)) if at == "key" else (
                "d", (S, prefix + raw)))
            values.append(_message(entries, node=prefix + raw if at == "node" else "n1"))
        ok = _check(values, modes=modes)
        valid = []
        for raw in cases:
            try:
                raw.decode()
                valid.append(True)
            except UnicodeDecodeError:
                valid.append(False)
        assert ok.tolist() == valid
        assert any(valid) and not all(valid)


@PROPERTY
@given(st.lists(odd_strings(), min_size=1, max_size=6))
def test_strings_that_may_not_be_utf8_read_as_the_python_path(values: list[bytes]) -> None:
    _check(values)


@PROPERTY
@given(st.lists(st.one_of(messages(), corrupted()), max_size=6),
       st.sampled_from([bytearray, memoryview, type("Sub", (bytes,), {})]), st.data())
def test_bytes_like_values_read_as_the_python_path(values: list[bytes], kind: Any,
                                                  data: Any) -> None:
    # a value that is not exactly bytes: decode_raw_event hands it to fastavro
    mixed = [kind(v) if data.draw(st.booleans()) else v for v in values]
    _check(mixed)
    if data.draw(st.booleans()):
        _check([*mixed, None])  # then only bytes go through the kernel


def test_warm_up() -> None:
    RN.warm_up()  # compiles or loads the kernel, or does nothing without numba


def test_jit_flag_is_respected() -> None:
    reader = NumericReader(NAMES, OPTIONAL)
    reader.read([_message(FULL)[:-1]])
    assert reader.deferred == (1 if _jit.ENABLED else 0)
