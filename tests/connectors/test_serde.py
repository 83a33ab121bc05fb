from __future__ import annotations

import io
import json
import math
import shutil
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.exceptions import SerdeError
from connectors.serde import (
    HEADER_SIZE,
    MARKER,
    SCHEMA_DIR,
    SERDE,
    RawKind,
    Serde,
    decode_dead_letter,
    decode_heartbeat,
    decode_label_subscription,
    decode_label_unsubscription,
    decode_link,
    decode_raw,
    decode_raw_event,
    encode_dead_letter,
    encode_heartbeat,
    encode_label_subscription,
    encode_label_unsubscription,
    encode_link,
    encode_raw_event,
    encode_raw_subscription,
    encode_raw_unsubscription,
)
from connectors.serde import raw_event as RE
from connectors.topics import encode_labels

ALL = {"RawSubscription", "RawUnsubscription", "RawEvent", "LabelSubscription",
       "LabelUnsubscription", "LinkControl", "DeadLetter", "Heartbeat"}

names = st.text(alphabet="abcXYZ019_-", min_size=1, max_size=12)
text = st.text(max_size=70)  # crosses the one-byte length limit (63) now and then
labels_arr = st.lists(st.integers(0, 2**64 - 1), max_size=40).map(
    lambda xs: np.array(xs, dtype=np.uint64))
attr_value = st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), text)
attrs_st = st.dictionaries(text, attr_value, max_size=8)


# ------------------------------------------------------------------------ CRC-64-AVRO

_EMPTY64 = 0xC15D213AA4D7A795


def crc64_avro(data: bytes) -> int:
    """CRC-64-AVRO from the Avro spec, bit by bit (no table)."""
    fp = _EMPTY64
    for byte in data:
        fp ^= byte
        for _ in range(8):
            fp = (fp >> 1) ^ (_EMPTY64 if fp & 1 else 0)
    return fp


@pytest.mark.parametrize("canonical, signed", [
    # Published vectors of the Avro project (share/test/data/schema-tests.txt), signed int64.
    ('"null"', 7195948357588979594),
    ('"boolean"', -6970731678124411036),
    ('"int"', 8247732601305521295),
    ('"long"', -3434872931120570953),
    ('{"name":"foo","type":"fixed","size":15}', 1756455273707447556),
    ('{"name":"foo","type":"record","fields":[{"name":"f1","type":"boolean"}]}',
     7843277075252814651),
])
def test_crc64_reference_vectors(canonical: str, signed: int) -> None:
    assert crc64_avro(canonical.encode()) == signed & (2**64 - 1)


def test_fingerprints_are_little_endian_crc64_of_the_canonical_form() -> None:
    assert set(SERDE.names) == ALL
    assert list(SERDE.names) == sorted(ALL)
    for name in SERDE.names:
        canonical = SERDE.canonical_form(name)
        assert canonical == fastavro.schema.to_parsing_canonical_form(SERDE.schema(name))
        expected = crc64_avro(canonical.encode()).to_bytes(8, "little")
        assert SERDE.fingerprint(name) == expected
        assert SERDE.header(name) == b"\xc3\x01" + expected


def test_message_header_on_the_wire() -> None:
    data = encode_label_unsubscription("c", "s1")
    assert data[:2] == MARKER == b"\xc3\x01"
    assert data[2:HEADER_SIZE] == crc64_avro(
        SERDE.canonical_form("LabelUnsubscription").encode()).to_bytes(8, "little")
    assert data[HEADER_SIZE:] == b"\x02c\x04s1"  # two Avro strings: zig-zag length, bytes
    assert SERDE.identify(data) == "LabelUnsubscription"


# ------------------------------------------------------------------------ schema files


def test_schema_files() -> None:
    assert SCHEMA_DIR == Path(__file__).resolve().parents[2] / "schemas" / "avro"
    files = sorted(p.stem for p in SCHEMA_DIR.glob("*.avsc"))
    assert set(files) == ALL
    for path in SCHEMA_DIR.glob("*.avsc"):
        doc = json.loads(path.read_text())
        assert doc["type"] == "record"
        assert doc["name"] == path.stem
        assert doc["namespace"] == "dlsroute.v1"
        assert doc["doc"].strip()
        for f in doc["fields"]:
            assert f["doc"].strip(), (path.name, f["name"])
        assert SERDE.schema(path.stem)["name"] == f"dlsroute.v1.{path.stem}"


@given(names, st.integers(-2**63, 2**63 - 1), st.integers(-2**63, 2**63 - 1), st.booleans())
def test_heartbeat_round_trip(source: str, watermark: int, applied: int, want: bool) -> None:
    data = encode_heartbeat(source, watermark, applied, want)
    assert decode_heartbeat(data) == {"source": source, "watermark_ms": watermark,
                                      "link_applied": applied, "wants_watermark": want}


def test_fast_raw_event_codec_is_on_for_the_shipped_schema() -> None:
    assert SERDE.raw_event_header == SERDE.header("RawEvent")


# ------------------------------------------------------------------------ round trips


@given(names, text, labels_arr, st.one_of(st.none(), text),
       st.one_of(st.none(), st.binary(max_size=90)))
def test_label_subscription_round_trip(client: str, sid: str, labels: np.ndarray,
                                       where: str | None, row: bytes | None) -> None:
    data = encode_label_subscription(client, sid, labels, where, row)
    msg = decode_label_subscription(data)
    assert set(msg) == {"client", "id", "labels", "where", "row"}
    assert (msg["client"], msg["id"], msg["where"], msg["row"]) == (client, sid, where, row)
    assert np.array_equal(msg["labels"], labels)
    assert msg["labels"].dtype == np.dtype(np.uint64)
    assert msg["labels"].tolist() == labels.tolist()
    assert not msg["labels"].flags.writeable
    name, rec = SERDE.decode(data)
    assert name == "LabelSubscription"
    assert rec == {"client": client, "id": sid, "labels": encode_labels(labels),
                   "where": where, "row": row}


def test_a_subscription_written_with_the_previous_schema_reads_as_the_current_one() -> None:
    """A LabelSubscription of the first version (no row: in flight while nodes are
    upgraded) decodes, its row None; nothing is written with the old version."""
    old_path = SCHEMA_DIR / "previous" / "LabelSubscription.1.avsc"
    old = fastavro.parse_schema(json.loads(old_path.read_text()), named_schemas={})
    canonical = fastavro.schema.to_parsing_canonical_form(old)
    fp = bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))
    assert fp != SERDE.fingerprint("LabelSubscription")
    buf = io.BytesIO()
    buf.write(b"\xc3\x01" + fp)
    fastavro.schemaless_writer(buf, old, {"client": "ann", "id": "s1",
                                          "labels": encode_labels(np.array([7], np.uint64)),
                                          "where": "x > 1"})
    msg = decode_label_subscription(buf.getvalue())
    assert (msg["client"], msg["id"], msg["where"], msg["row"]) == ("ann", "s1", "x > 1", None)
    assert msg["labels"].tolist() == [7]
    assert SERDE.header("LabelSubscription")[2:] == SERDE.fingerprint("LabelSubscription")


def test_label_subscription_edges() -> None:
    labels = np.array([0, 2**64 - 1, 1], dtype=np.uint64)
    msg = decode_label_subscription(encode_label_subscription("c", "s", labels, None))
    assert msg["labels"].tolist() == [0, 2**64 - 1, 1]
    assert msg["where"] is None
    # where may be left out altogether (default null)
    data = SERDE.encode("LabelSubscription", {"client": "c", "id": "s", "labels": b""})
    empty = decode_label_subscription(data)
    assert (empty["client"], empty["id"], empty["where"]) == ("c", "s", None)
    assert empty["labels"].dtype == np.dtype(np.uint64) and empty["labels"].size == 0
    fewer = decode_label_subscription(encode_label_subscription("c", "s", labels[:2]))
    assert not np.array_equal(msg["labels"], fewer["labels"])


@given(names, text)
def test_label_unsubscription_round_trip(client: str, sid: str) -> None:
    assert decode_label_unsubscription(encode_label_unsubscription(client, sid)) == \
        {"client": client, "id": sid}


@given(names, st.sampled_from(["advertise", "withdraw", "ADVERTISE", "Withdraw"]), labels_arr)
def test_link_round_trip(source: str, kind: str, labels: np.ndarray) -> None:
    data = encode_link(source, kind, labels)
    msg = decode_link(data)
    assert set(msg) == {"source", "kind", "labels"}
    assert (msg["source"], msg["kind"]) == (source, kind.lower())
    assert np.array_equal(msg["labels"], labels) and not msg["labels"].flags.writeable
    assert SERDE.decode(data)[1]["kind"] == kind.upper()


@given(names, names, text, attrs_st, st.binary(max_size=100))
def test_raw_event_round_trip(node: str, client: str, eid: str, attrs: dict[str, Any],
                              payload: bytes) -> None:
    data = encode_raw_event(node, client, eid, attrs, payload)
    msg = decode_raw_event(data)
    assert msg == {"node": node, "client": client, "id": eid, "attrs": attrs,
                   "payload": payload}
    for k, v in attrs.items():
        assert type(msg["attrs"][k]) is type(v)  # ints stay ints, floats stay floats
    assert SERDE.decode(data) == ("RawEvent", {"node": node, "client": client, "id": eid,
                                               "attrs": attrs, "payload": payload})


@given(names, names, text, attrs_st, st.binary(max_size=100))
def test_fast_raw_event_codec_matches_fastavro(node: str, client: str, eid: str,
                                               attrs: dict[str, Any], payload: bytes) -> None:
    rec = {"node": node, "client": client, "id": eid, "attrs": attrs, "payload": payload}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, SERDE.schema("RawEvent"), rec)
    reference = SERDE.header("RawEvent") + buf.getvalue()
    assert encode_raw_event(node, client, eid, attrs, payload) == reference
    assert SERDE.encode("RawEvent", rec) == reference
    assert RE.decode_fast(reference) == rec


@settings(max_examples=300)
@given(st.binary(max_size=60), st.data())
def test_fast_raw_event_decoder_never_disagrees_with_fastavro(body: bytes,
                                                              data: st.DataObject) -> None:
    """On arbitrary or mutated bodies the fast decoder either gives up or agrees."""
    valid = encode_raw_event("A", "c", "e1", {"p": 1.5, "q": 7, "s": "x"}, b"pay")
    if data.draw(st.booleans()):
        i = data.draw(st.integers(HEADER_SIZE, len(valid) - 1))
        msg = valid[:i] + body[:3] + valid[i + data.draw(st.integers(0, 3)):]
    else:
        msg = SERDE.header("RawEvent") + body
    fast = RE.decode_fast(msg)  # None: the fast decoder gives up
    try:
        slow: Any = SERDE._decode_body(SERDE._entry("RawEvent"), msg)
    except SerdeError:
        slow = None
    if fast is not None:
        assert slow is not None
        # repr, not ==: a mutated double can decode to NaN, which never equals itself
        assert repr(fast) == repr(slow)
    got: Any
    try:
        got = decode_raw_event(msg)
    except SerdeError:
        got = None
    assert (got is None) == (slow is None)


def test_raw_event_types_and_defaults() -> None:
    attrs = {"i": 5, "f": 5.0, "s": "AAPL", "neg": -(2**63), "big": 2**63 - 1, "u": "ü€😀"}
    msg = decode_raw_event(encode_raw_event("A", "c", "e", attrs))
    assert msg["attrs"] == attrs
    assert type(msg["attrs"]["i"]) is int and type(msg["attrs"]["f"]) is float
    assert msg["payload"] == b""
    # payload may be left out of a generic record: its default is empty bytes
    assert SERDE.encode("RawEvent", {"node": "A", "client": "c", "id": "e", "attrs": attrs}) \
        == encode_raw_event("A", "c", "e", attrs, b"")
    nan = decode_raw_event(encode_raw_event("A", "c", "e", {"x": math.nan}))["attrs"]["x"]
    assert math.isnan(nan)
    inf = decode_raw_event(encode_raw_event("A", "c", "e", {"x": -math.inf}))["attrs"]["x"]
    assert inf == -math.inf


def test_raw_event_unusual_inputs_go_through_fastavro() -> None:
    # numpy scalars, bytearray payload, ints beyond 64 bits (written as double), long strings
    msg = decode_raw_event(encode_raw_event(
        "A", "c", "e" * 300, {"f": np.float64(2.5), "big": 2**70, "k" * 100: "v" * 1000},
        bytearray(b"xyz")))
    assert msg["attrs"] == {"f": 2.5, "big": float(2**70), "k" * 100: "v" * 1000}
    assert msg["id"] == "e" * 300 and msg["payload"] == b"xyz"


def test_raw_event_map_in_blocks_with_sizes() -> None:
    """A writer may split a map into blocks with a negative count and a byte size."""
    body = (b"\x02A\x02c\x02e"  # node, client, id
            + b"\x03" + b"\x0c"  # block: count -2 (zig-zag 3), byte size 6
            + b"\x02a\x00\x02" + b"\x02b\x04\x02z"
            + b"\x00"  # end of map
            + b"\x00")  # empty payload
    data = SERDE.header("RawEvent") + body
    expected: dict[str, Any] = {"node": "A", "client": "c", "id": "e", "attrs": {"a": 1, "b": "z"},
                "payload": b""}
    assert SERDE._decode_body(SERDE._entry("RawEvent"), data) == expected
    assert RE.decode_fast(data) == expected
    assert decode_raw_event(data) == expected


@given(st.text(max_size=30), text, st.binary(max_size=50),
       st.dictionaries(text, st.binary(max_size=10), max_size=5),
       st.one_of(st.none(), text), st.one_of(st.none(), text))
def test_dead_letter_round_trip(source: str, reason: str, raw: bytes,
                                headers: dict[str, bytes], field: str | None,
                                value: str | None) -> None:
    data = encode_dead_letter(source, reason, raw, headers, field=field, value=value)
    assert decode_dead_letter(data) == {"source": source, "reason": reason, "field": field,
                                        "value": value, "raw": raw, "headers": headers}


def test_dead_letter_inputs() -> None:
    msg = decode_dead_letter(encode_dead_letter(
        "dls.node.A.publish[0]@5", "bad label", None,
        [("dls-label", b"\x01"), ("x", None), ("dls-label", b"\x02"), ("s", "é")],
        field="attrs", value={"p": [1, 2]}))
    assert msg["raw"] == b""
    assert msg["headers"] == {"dls-label": b"\x02", "x": b"", "s": "é".encode()}
    assert (msg["field"], msg["value"]) == ("attrs", '{"p": [1, 2]}')
    assert decode_dead_letter(encode_dead_letter("s", "r", b"", None, value=b"\x00"))["value"] \
        == "b'\\x00'"
    assert decode_dead_letter(encode_dead_letter("s", "r", b"", {}, value=3))["value"] == "3"
    assert decode_dead_letter(encode_dead_letter("s", "r", b"", {}))["value"] is None


def test_raw_subscription_and_unsubscription_encoders() -> None:
    preds = [{"attr": "price", "op": "between", "low": 10, "high": 20}]
    name, rec = SERDE.decode(encode_raw_subscription("A", "c", "s1", preds))
    assert name == "RawSubscription" and json.loads(rec["where"]) == preds
    name, rec = SERDE.decode(encode_raw_subscription("A", "c", "s1", "price < 3"))
    assert rec["where"] == "price < 3"
    assert SERDE.decode(encode_raw_unsubscription("A", "c", "s1")) == (
        "RawUnsubscription", {"node": "A", "client": "c", "id": "s1"})


def test_decoded_labels_are_read_only() -> None:
    link = decode_link(encode_link("A", "advertise", np.array([1, 2], dtype=np.uint64)))
    sub = decode_label_subscription(encode_label_subscription(
        "c", "s", np.array([1, 2], dtype=np.uint64)))
    for msg in (link, sub):
        assert msg["labels"].tolist() == [1, 2]
        with pytest.raises(ValueError, match="read-only"):
            msg["labels"][0] = 3
    assert decode_link(encode_link("A", "withdraw", np.array([1], dtype=np.uint64)))["kind"] \
        == "withdraw"


# ------------------------------------------------------------------------ encode errors


def _enc_err(name: str, record: Any) -> SerdeError:
    with pytest.raises(SerdeError) as err:
        SERDE.encode(name, record)
    return err.value


def test_encode_errors_name_the_field() -> None:
    base = {"node": "A", "client": "c", "id": "e", "attrs": {}, "payload": b""}
    e = _enc_err("RawEvent", {**base, "id": 3})
    assert (e.field, e.value) == ("id", 3)
    assert str(e) == "RawEvent.id: 3 (int) does not fit string"
    e = _enc_err("RawEvent", {k: v for k, v in base.items() if k != "client"})
    assert (e.field, str(e)) == ("client", "RawEvent: missing field 'client'")
    e = _enc_err("RawEvent", {**base, "extra": 1})
    assert (e.field, e.value) == ("extra", 1)
    assert "unknown field 'extra'" in str(e)
    e = _enc_err("RawEvent", {**base, "attrs": {"p": True}})
    assert (e.field, e.value) == ("attrs.p", True)
    assert "does not fit one of long, double, string" in str(e)
    e = _enc_err("RawEvent", {**base, "attrs": {"p": None}})
    assert (e.field, e.value) == ("attrs.p", None)
    e = _enc_err("RawEvent", {**base, "attrs": {"p": [1]}})
    assert e.field == "attrs.p"
    e = _enc_err("RawEvent", {**base, "attrs": [1, 2]})
    assert (e.field, e.value) == ("attrs", [1, 2])
    e = _enc_err("RawEvent", {**base, "payload": "text"})
    assert (e.field, e.value) == ("payload", "text")
    e = _enc_err("LinkControl", {"source": "A", "kind": "SIDEWAYS", "labels": b""})
    assert (e.field, e.value) == ("kind", "SIDEWAYS")
    assert "enum" in str(e)
    e = _enc_err("RawEvent", ["not", "a", "record"])
    assert "must be a mapping" in str(e)
    e = _enc_err("Nope", {})
    assert (e.field, e.value) == ("schema", "Nope")
    assert "unknown schema 'Nope'" in str(e)


def test_convenience_encoder_errors() -> None:
    with pytest.raises(SerdeError) as err:
        encode_raw_event("A", "c", "e", {"p": True})
    assert (err.value.field, err.value.value) == ("attrs.p", True)
    with pytest.raises(SerdeError) as err:
        encode_raw_event("A", 7, "e", {})  # type: ignore[arg-type]
    assert err.value.field == "client"
    with pytest.raises(SerdeError) as err:
        encode_raw_event("A", "c", "e", {"p": 1}, "text")  # type: ignore[arg-type]
    assert err.value.field == "payload"
    with pytest.raises(SerdeError) as err:
        encode_raw_event("A", "c", "\ud800", {})
    assert err.value.field == "id"
    with pytest.raises(SerdeError) as err:
        encode_link("A", "sideways", np.array([1], dtype=np.uint64))
    assert (err.value.field, err.value.value) == ("kind", "sideways")
    with pytest.raises(SerdeError) as err:
        encode_label_subscription("c", "s", np.array([-1]))
    assert err.value.field == "labels"


# ------------------------------------------------------------------------ decode errors


def _dec_err(data: bytes) -> SerdeError:
    with pytest.raises(SerdeError) as err:
        SERDE.decode(data)
    return err.value


def test_decode_errors() -> None:
    good = encode_raw_event("A", "c", "e", {"p": 1.5}, b"xy")
    e = _dec_err(b"")
    assert str(e).startswith("too short for Avro single-object encoding: 0 bytes")
    e = _dec_err(good[:9])
    assert "9 bytes, at least 10 needed" in str(e)
    e = _dec_err(b'{"node": "A", "client": "c"}')
    assert str(e) == "not Avro single-object encoded: the first two bytes are 7B 22, not C3 01"
    assert (e.field, e.value) == ("marker", "7b22")
    e = _dec_err(b"\xc3\x01" + bytes(range(8)) + b"\x00")
    assert str(e).startswith("unknown schema fingerprint 0001020304050607 (known: ")
    assert (e.field, e.value) == ("fingerprint", "0001020304050607")
    e = _dec_err(good[:-1])  # truncated payload
    assert str(e).startswith("RawEvent body does not decode (EOFError")
    e = _dec_err(good + b"\x00")
    assert str(e) == "RawEvent body is followed by 1 unread bytes"
    e = _dec_err(SERDE.header("RawEvent") + b"\x02\xff\x02c\x02e\x00\x00")
    assert "UnicodeDecodeError" in str(e)
    e = _dec_err(SERDE.header("RawEvent") + b"\x02A\x02c\x02e\x02\x02k\x06\x00\x00")
    assert str(e).startswith("RawEvent body does not decode")  # union branch 3 of 3
    e = _dec_err(SERDE.header("RawEvent") + b"\x01A")  # negative length
    assert str(e).startswith("RawEvent body does not decode")
    e = _dec_err(SERDE.header("LinkControl") + b"\x02A\x04\x00")  # enum index 2 of 2
    assert str(e).startswith("LinkControl body does not decode")
    with pytest.raises(SerdeError, match="must be bytes"):
        SERDE.decode("text")  # type: ignore[arg-type]


def test_typed_decoders_check_the_schema() -> None:
    event = encode_raw_event("A", "c", "e", {})
    sub = encode_label_subscription("c", "s", np.array([1], dtype=np.uint64))
    for decoder, data, expected, got in [
        (decode_label_subscription, event, "LabelSubscription", "RawEvent"),
        (decode_label_unsubscription, sub, "LabelUnsubscription", "LabelSubscription"),
        (decode_link, sub, "LinkControl", "LabelSubscription"),
        (decode_raw_event, sub, "RawEvent", "LabelSubscription"),
        (decode_dead_letter, event, "DeadLetter", "RawEvent"),
    ]:
        with pytest.raises(SerdeError) as err:
            decoder(data)
        assert str(err.value) == f"expected a {expected} message, got a {got}"
        assert (err.value.field, err.value.value) == ("schema", got)
    with pytest.raises(SerdeError, match="too short"):
        decode_raw_event(b"\xc3\x01")


def test_labels_field_must_be_whole_labels() -> None:
    data = SERDE.encode("LinkControl", {"source": "A", "kind": "WITHDRAW", "labels": b"\x00" * 9})
    with pytest.raises(SerdeError, match="multiple of 8 bytes long, got 9 bytes"):
        decode_link(data)
    data = SERDE.encode("LabelSubscription", {"client": "c", "id": "s", "labels": b"\x01"})
    with pytest.raises(SerdeError, match="multiple of 8"):
        decode_label_subscription(data)


# ------------------------------------------------------------------------ raw topics


def _j(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def test_raw_event_json_and_avro_agree() -> None:
    attrs = {"price": 12.5, "volume": 100, "sym": "AAPL"}
    want = {"node": "A", "client": "c1", "id": "e1", "attrs": attrs, "payload": b""}
    assert decode_raw(_j({"node": "A", "client": "c1", "id": "e1", "attrs": attrs}),
                      "event") == want
    assert decode_raw(_j({"op": "publish", "node": "A", "client": "c1", "id": "e1",
                          "attrs": attrs}), "event") == want
    assert decode_raw(encode_raw_event("A", "c1", "e1", attrs), "event") == want
    with_payload = {**want, "payload": "hé".encode()}
    assert decode_raw(_j({"node": "A", "client": "c1", "id": "e1", "attrs": attrs,
                          "payload": "hé"}), "event") == with_payload
    assert decode_raw(encode_raw_event("A", "c1", "e1", attrs, "hé".encode()),
                      "event") == with_payload


def test_raw_subscription_json_and_avro_agree() -> None:
    preds: list[dict[str, Any]] = [
        {"attr": "price", "op": "between", "low": 10, "high": 20},
        {"attr": "sym", "op": "in", "values": ["A", "B"]}]
    text_where = "price between 10 and 20 and sym in (A, B) or sym != C"
    wheres: list[Any] = [preds, text_where, {"any": [preds, [{"attr": "sym", "op": "!=",
                                                              "value": "C"}]]}]
    for where in wheres:
        want = {"node": "A", "client": "c1", "id": "s1", "where": where}
        assert decode_raw(_j({"node": "A", "client": "c1", "id": "s1", "where": where}),
                          "subscription") == want
        assert decode_raw(_j({"op": "subscribe", **want}), "subscription") == want
        assert decode_raw(encode_raw_subscription("A", "c1", "s1", where),
                          "subscription") == want
    got = decode_raw(encode_raw_subscription("A", "c1", "s1", "  [ ]"), "subscription")
    assert got["where"] == []
    with pytest.raises(SerdeError, match="starts with '{' but is not a JSON object"):
        decode_raw(encode_raw_subscription("A", "c1", "s1", "{any"), "subscription")


def test_raw_unsubscription_json_and_avro_agree() -> None:
    want = {"node": "A", "client": "c1", "id": "s1"}
    assert decode_raw(_j(want), "unsubscription") == want
    assert decode_raw(_j({**want, "op": "unsubscribe"}), "unsubscription") == want
    assert decode_raw(encode_raw_unsubscription("A", "c1", "s1"), "unsubscription") == want
    assert decode_raw(b"\xef\xbb\xbf" + _j(want), "unsubscription") == want  # UTF-8 BOM


EV = {"node": "A", "client": "c1", "id": "e1", "attrs": {"p": 1}}
SUB = {"node": "A", "client": "c1", "id": "s1", "where": "p < 3"}


@pytest.mark.parametrize("data, kind, message, field, value", [
    (b"", "event", "raw event: empty message", "value", None),
    (b"\xff\xfe", "event", "neither Avro single-object (no C3 01 marker) nor UTF-8 JSON",
     "value", "fffe"),
    (b"{nope", "event", "neither Avro single-object (no C3 01 marker) nor JSON: Expecting "
     "property name enclosed in double quotes at line 1 column 2", "value", "'{nope'"),
    (b"[1, 2]", "event", "raw event: a JSON object is expected, got list", "value", [1, 2]),
    (_j({**EV, "op": "subscribe"}), "event", "raw event: op must be 'publish' (or absent), "
     "got 'subscribe'", "op", "subscribe"),
    (_j({**EV, "colour": "red"}), "event", "raw event: unknown field 'colour'", "colour",
     "red"),
    (_j({k: v for k, v in EV.items() if k != "attrs"}), "event",
     "raw event: missing field 'attrs'", "attrs", None),
    (_j({**EV, "attrs": [1]}), "event", "raw event: attrs must be an object, got [1]",
     "attrs", [1]),
    (_j({**EV, "attrs": {"p": True}}), "event",
     "raw event: attrs['p'] must be a number or a string, got True", "attrs.p", True),
    (_j({**EV, "attrs": {"p": None}}), "event",
     "raw event: attrs['p'] must be a number or a string, got None", "attrs.p", None),
    (_j({**EV, "attrs": {"p": {"q": 1}}}), "event",
     "raw event: attrs['p'] must be a number or a string", "attrs.p", {"q": 1}),
    (_j({**EV, "payload": 5}), "event", "raw event: payload must be a string, got 5",
     "payload", 5),
    (_j({**EV, "node": "A.B"}), "event", "raw event: node must be a non-empty name",
     "node", "A.B"),
    (_j({**EV, "client": ""}), "event", "raw event: client must be a non-empty name",
     "client", ""),
    (_j({**EV, "client": 3}), "event", "raw event: client must be a non-empty name",
     "client", 3),
    (_j({**EV, "id": ""}), "event", "raw event: id must be a non-empty string, got ''",
     "id", ""),
    (_j({**EV, "id": 17}), "event", "raw event: id must be a non-empty string, got 17",
     "id", 17),
    (_j({**SUB, "where": 3}), "subscription",
     'raw subscription: where must be a string, a list of predicates or an object {"any": '
     '[...]}, got 3', "where", 3),
    (_j({k: v for k, v in SUB.items() if k != "where"}), "subscription",
     "raw subscription: missing field 'where'", "where", None),
    (_j({**SUB, "op": "publish"}), "subscription",
     "raw subscription: op must be 'subscribe' (or absent), got 'publish'", "op", "publish"),
    (_j({"node": "A", "client": "c", "id": "s", "where": "x"}), "unsubscription",
     "raw unsubscription: unknown field 'where'", "where", "x"),
    (_j({"node": "A", "client": "c", "id": "s", "payload": "x"}), "unsubscription",
     "raw unsubscription: unknown field 'payload'", "payload", "x"),
])
def test_decode_raw_rejects(data: bytes, kind: RawKind, message: str, field: str,
                            value: object) -> None:
    with pytest.raises(SerdeError) as err:
        decode_raw(data, kind)
    assert str(err.value).startswith(message) or message in str(err.value), str(err.value)
    assert (err.value.field, err.value.value) == (field, value)


def test_decode_raw_avro_errors() -> None:
    sub = encode_label_subscription("c", "s", np.array([1], dtype=np.uint64))
    with pytest.raises(SerdeError) as err:
        decode_raw(sub, "subscription")
    assert str(err.value) == "expected a RawSubscription message, got a LabelSubscription"
    with pytest.raises(SerdeError, match="expected a RawEvent message, got a RawUnsub"):
        decode_raw(encode_raw_unsubscription("A", "c", "s"), "event")
    with pytest.raises(SerdeError) as err:
        decode_raw(encode_raw_subscription("A", "c", "s", "[not json"), "subscription")
    assert err.value.field == "where"
    assert "starts with '[' but is not a JSON list" in str(err.value)
    with pytest.raises(SerdeError) as err:
        decode_raw(encode_raw_event("A.B", "c", "e", {}), "event")
    assert (err.value.field, err.value.value) == ("node", "A.B")
    with pytest.raises(SerdeError) as err:
        decode_raw(encode_raw_unsubscription("A", "c", ""), "unsubscription")
    assert err.value.field == "id"
    with pytest.raises(SerdeError, match="body does not decode"):
        decode_raw(encode_raw_event("A", "c", "e", {})[:-1], "event")
    with pytest.raises(SerdeError) as err:
        decode_raw(b"{}", "gossip")  # type: ignore[arg-type]
    assert (err.value.field, err.value.value) == ("kind", "gossip")


@given(names, names, text.filter(bool), attrs_st, st.text(max_size=20))
def test_raw_event_json_property(node: str, client: str, eid: str, attrs: dict[str, Any],
                                 payload: str) -> None:
    obj = {"node": node, "client": client, "id": eid, "attrs": attrs, "payload": payload}
    try:
        payload_bytes = payload.encode()
    except UnicodeEncodeError:
        return
    want = {**obj, "payload": payload_bytes}
    assert decode_raw(_j(obj), "event") == want
    assert decode_raw(encode_raw_event(node, client, eid, attrs, payload_bytes), "event") == want


# ------------------------------------------------------------------------ loading schemas


def test_serde_from_other_folders(tmp_path: Path) -> None:
    with pytest.raises(SerdeError, match="no .avsc schema"):
        Serde(tmp_path)
    (tmp_path / "Bad.avsc").write_text("{not json")
    with pytest.raises(SerdeError, match="not a valid Avro schema"):
        Serde(tmp_path)
    (tmp_path / "Bad.avsc").write_text('"string"')
    with pytest.raises(SerdeError, match="must be a named record"):
        Serde(tmp_path)
    (tmp_path / "Bad.avsc").unlink()
    shutil.copy(SCHEMA_DIR / "RawEvent.avsc", tmp_path / "A.avsc")
    shutil.copy(SCHEMA_DIR / "RawEvent.avsc", tmp_path / "B.avsc")
    with pytest.raises(SerdeError, match="a second schema named 'RawEvent'"):
        Serde(tmp_path)


def test_changed_raw_event_schema_turns_the_fast_path_off(tmp_path: Path) -> None:
    doc = json.loads((SCHEMA_DIR / "RawEvent.avsc").read_text())
    doc["fields"].append({"name": "ttl", "type": "long", "default": 0})
    (tmp_path / "RawEvent.avsc").write_text(json.dumps(doc))
    other = Serde(tmp_path)
    assert other.names == ("RawEvent",)
    assert other.raw_event_header is None
    assert other.fingerprint("RawEvent") != SERDE.fingerprint("RawEvent")
    rec = {"node": "A", "client": "c", "id": "e", "attrs": {"p": 1}, "payload": b"", "ttl": 9}
    assert other.decode(other.encode("RawEvent", rec)) == ("RawEvent", rec)
    with pytest.raises(SerdeError, match="unknown schema fingerprint"):
        other.decode(encode_raw_event("A", "c", "e", {}))


def test_schema_dir_beside_the_package_or_through_importlib(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from connectors.serde import avro

    assert avro._schema_dir() == SCHEMA_DIR  # beside connectors/, as in site-packages
    # installed somewhere without schemas/ beside it: the importable package is used
    monkeypatch.setattr(avro, "__file__", str(tmp_path / "connectors" / "serde" / "avro.py"))
    assert avro._schema_dir() == SCHEMA_DIR
    # and without any: the path looked at, for Serde's "no .avsc schema in ..." error

    def missing(name: str) -> None:
        raise ModuleNotFoundError(name)

    monkeypatch.setattr(avro.resources, "files", missing)
    assert avro._schema_dir() == tmp_path / "schemas" / "avro"
    with pytest.raises(SerdeError, match="no .avsc schema in .*schemas/avro"):
        Serde(avro._schema_dir())
