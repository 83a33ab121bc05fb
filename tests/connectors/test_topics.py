from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectors.exceptions import ConnectorError, ConnectorSettingError, SerdeError, TopicNameError
from connectors.topics import (
    CLIENT_INPUT_KINDS,
    HEADER_CLIENTS,
    HEADER_DLQ_REASON,
    HEADER_DLQ_SOURCE,
    HEADER_EVENT_ID,
    HEADER_LABEL,
    HEADER_ORIGIN,
    MAX_TOPIC_LENGTH,
    Topics,
    check_name,
    decode_clients,
    decode_label,
    decode_labels,
    delivery_partition,
    encode_clients,
    encode_label,
    encode_labels,
    headers_dict,
    names_client,
    source_of,
)
from dls.exceptions import DLSError

names = st.text(alphabet="abcXYZ019_-", min_size=1, max_size=20)
labels_st = st.lists(st.integers(0, 2**64 - 1), max_size=50)


# ------------------------------------------------------------------------ errors


def test_error_hierarchy() -> None:
    for cls in (SerdeError, TopicNameError):
        assert issubclass(cls, ConnectorError)
        assert issubclass(cls, DLSError)
        assert issubclass(cls, ValueError)


# ------------------------------------------------------------------------ topic names


def test_default_names() -> None:
    t = Topics()
    assert t.prefix == "dls"
    assert t.raw_subscriptions == "dls.raw.subscriptions"
    assert t.raw_unsubscriptions == "dls.raw.unsubscriptions"
    assert t.raw_events == "dls.raw.events"
    assert t.deadletter == "dls.deadletter"
    assert t.node_subscribe("N1") == "dls.node.N1.subscribe"
    assert t.node_unsubscribe("N1") == "dls.node.N1.unsubscribe"
    assert t.node_publish("N1") == "dls.node.N1.publish"
    assert t.link("A", "B") == "dls.link.A.B"
    assert t.deliver("client_7-x") == "dls.deliver.client_7-x"


def test_custom_prefix_may_have_dots() -> None:
    t = Topics("acme.prod-1_dls")
    assert t.raw_events == "acme.prod-1_dls.raw.events"
    assert t.link("A", "B") == "acme.prod-1_dls.link.A.B"
    assert t.parse_link("acme.prod-1_dls.link.A.B") == ("A", "B")
    assert t.parse_link("dls.link.A.B") is None


def test_topics_is_frozen_and_comparable() -> None:
    t = Topics("x")
    assert t == Topics("x") and hash(t) == hash(Topics("x"))
    with pytest.raises(AttributeError):
        t.prefix = "y"  # type: ignore[misc]


@pytest.mark.parametrize("prefix", ["", "a b", "a/b", "dls:1", "é", 3, None, "x" * 240])
def test_bad_prefix(prefix: object) -> None:
    with pytest.raises(TopicNameError) as err:
        Topics(prefix)  # type: ignore[arg-type]
    assert err.value.field == "prefix"
    assert err.value.value == prefix


@pytest.mark.parametrize("name", ["", "a.b", "a b", "a/b", "é", "a\n", 7, None])
def test_bad_node_and_client_names(name: object) -> None:
    t = Topics()
    for method, field in [(t.node_subscribe, "node"), (t.node_unsubscribe, "node"),
                          (t.node_publish, "node"), (t.deliver, "client")]:
        with pytest.raises(TopicNameError) as err:
            method(name)  # type: ignore[arg-type]
        assert err.value.field == field
        assert err.value.value == name
        assert repr(name) in str(err.value)
    with pytest.raises(TopicNameError) as err:
        t.link("A", name)  # type: ignore[arg-type]
    assert err.value.field == "dst"
    with pytest.raises(TopicNameError) as err:
        t.link(name, "A")  # type: ignore[arg-type]
    assert err.value.field == "src"


def test_topic_length_limit() -> None:
    t = Topics()
    room = MAX_TOPIC_LENGTH - len("dls.deliver.")
    assert len(t.deliver("c" * room)) == MAX_TOPIC_LENGTH
    with pytest.raises(TopicNameError, match="249") as err:
        t.deliver("c" * (room + 1))
    assert err.value.field == "client"
    assert err.value.value == "c" * (room + 1)
    with pytest.raises(TopicNameError) as err:
        t.node_unsubscribe("n" * 240)
    assert err.value.field == "node"
    with pytest.raises(TopicNameError) as err:
        t.link("a", "b" * 240)
    assert err.value.field == "dst"


def test_link_needs_two_nodes() -> None:
    with pytest.raises(TopicNameError, match="two different nodes") as err:
        Topics().link("A", "A")
    assert err.value.field == "dst"


def test_check_name() -> None:
    assert check_name("a-B_9", "client") == "a-B_9"
    with pytest.raises(TopicNameError) as err:
        check_name("a.b", "client")
    assert (err.value.field, err.value.value) == ("client", "a.b")


def test_node_inputs() -> None:
    t = Topics()
    assert t.node_inputs("B", ["A", "C", "A"]) == [
        "dls.node.B.subscribe", "dls.node.B.unsubscribe", "dls.node.B.publish",
        "dls.link.A.B", "dls.link.C.B", "dls.fwd.A.B", "dls.fwd.C.B"]
    assert t.node_inputs("A", []) == [
        "dls.node.A.subscribe", "dls.node.A.unsubscribe", "dls.node.A.publish"]
    with pytest.raises(TopicNameError):
        t.node_inputs("B", ["B"])
    with pytest.raises(TopicNameError):
        t.node_inputs("B", ["x.y"])


@given(names, names)
def test_parse_link_round_trip(src: str, dst: str) -> None:
    t = Topics()
    if src == dst:
        assert t.parse_link(f"dls.link.{src}.{dst}") is None
    else:
        assert t.parse_link(t.link(src, dst)) == (src, dst)


@pytest.mark.parametrize("topic", [
    "dls.link.A", "dls.link.A.B.C", "dls.link..B", "dls.link.A.", "dls.link.A.A",
    "dls.node.A.publish", "dls.deliver.A", "other.link.A.B", "dlsx.link.A.B", "dls.link.A B.C",
    "", "dls.link." + "a" * 200 + "." + "b" * 50,
])
def test_parse_link_rejects(topic: str) -> None:
    assert Topics().parse_link(topic) is None


# ------------------------------------------------------------------------ headers


def test_header_names() -> None:
    assert HEADER_LABEL == "dls-label"
    assert HEADER_ORIGIN == "dls-origin"
    assert HEADER_EVENT_ID == "dls-event-id"
    assert HEADER_DLQ_REASON == "dls-dlq-reason"
    assert HEADER_DLQ_SOURCE == "dls-dlq-source"


@given(st.integers(0, 2**64 - 1))
def test_label_round_trip(label: int) -> None:
    b = encode_label(label)
    assert b == label.to_bytes(8, "big")
    assert decode_label(b) == label


def test_label_edges_and_numpy() -> None:
    assert encode_label(0) == bytes(8)
    assert encode_label(2**64 - 1) == b"\xff" * 8
    assert encode_label(np.uint64(2**64 - 1)) == b"\xff" * 8
    assert encode_label(np.int64(258)) == b"\x00" * 6 + b"\x01\x02"
    assert decode_label(bytearray(b"\x00" * 7 + b"\x2a")) == 42
    assert type(decode_label(b"\x01" * 8)) is int


@pytest.mark.parametrize("label", [-1, 2**64, 1.5, "7", None, np.float64(3)])
def test_encode_label_rejects(label: object) -> None:
    with pytest.raises(SerdeError, match=r"\[0, 2\*\*64\)") as err:
        encode_label(label)  # type: ignore[arg-type]
    assert err.value.field == "label"


@pytest.mark.parametrize("b", [b"", b"\x00" * 7, b"\x00" * 9, "12345678", None])
def test_decode_label_rejects(b: object) -> None:
    with pytest.raises(SerdeError, match="exactly 8 bytes") as err:
        decode_label(b)  # type: ignore[arg-type]
    assert err.value.field == HEADER_LABEL


@given(labels_st)
def test_labels_round_trip(labels: list[int]) -> None:
    arr = np.array(labels, dtype=np.uint64)
    b = encode_labels(arr)
    assert b == b"".join(x.to_bytes(8, "big") for x in labels)
    back = decode_labels(b)
    assert back.dtype == np.dtype(np.uint64)
    assert back.flags.writeable
    assert back.tolist() == labels


def test_labels_inputs() -> None:
    assert encode_labels(np.array([], dtype=np.uint64)) == b""
    assert encode_labels(np.array([], dtype=np.float64)) == b""
    assert decode_labels(b"").shape == (0,)
    assert encode_labels(np.array([1, 2], dtype=np.int64)) == encode_labels(
        np.array([1, 2], dtype=np.uint32))
    assert encode_labels([0, 2**64 - 1]) == bytes(8) + b"\xff" * 8  # type: ignore[arg-type]
    big = np.array([2**64 - 1, 0], dtype=">u8")
    assert decode_labels(encode_labels(big)).tolist() == [2**64 - 1, 0]


@pytest.mark.parametrize("arr, field_value", [
    (np.array([1, -2], dtype=np.int64), -2),
    (np.array([1.0, 2.0]), "float64"),
    (np.array([[1, 2]], dtype=np.uint64), (1, 2)),
    (np.uint64(3), ()),
])
def test_encode_labels_rejects(arr: np.ndarray, field_value: object) -> None:
    with pytest.raises(SerdeError) as err:
        encode_labels(arr)
    assert err.value.field == "labels"
    assert err.value.value == field_value


def test_decode_labels_rejects() -> None:
    with pytest.raises(SerdeError, match="multiple of 8 bytes long, got 12 bytes") as err:
        decode_labels(b"\x00" * 12)
    assert (err.value.field, err.value.value) == ("labels", 12)
    with pytest.raises(SerdeError, match="must be bytes"):
        decode_labels("abcdefgh")  # type: ignore[arg-type]


def test_source_of() -> None:
    assert source_of("dls.node.A.publish", 3, 1234) == "dls.node.A.publish[3]@1234"
    assert source_of(None, None, None) == "None[None]@None"


def test_headers_dict() -> None:
    assert headers_dict(None) == {}
    assert headers_dict([]) == {}
    got = headers_dict([("a", b"1"), ("b", None), ("a", b"2"), ("c", "é")])
    assert got == {"a": b"2", "b": b"", "c": "é".encode()}
    assert headers_dict({"x": None, "y": b"z"}) == {"x": b"", "y": b"z"}


def test_encode_labels_from_python_lists() -> None:
    assert encode_labels([3, 2**64 - 1]) == (3).to_bytes(8, "big") + b"\xff" * 8  # type: ignore[arg-type]
    for bad in ([1, -1, 2**64 - 1], [1.5, 2**64 - 1], [2**64]):
        with pytest.raises(SerdeError) as err:
            encode_labels(bad)  # type: ignore[arg-type]
        assert err.value.field == "labels"


@given(st.text(alphabet="abc.XYZ_-09", min_size=1, max_size=30), names, names)
def test_every_name_is_a_legal_kafka_topic(prefix: str, a: str, b: str) -> None:
    import re

    t = Topics(prefix)
    made = [t.raw_subscriptions, t.raw_unsubscriptions, t.raw_events, t.deadletter,
            *t.node_inputs(a, [b] if a != b else []), t.deliver(b), t.node_inputs(b, [])[0]]
    for topic in made:
        assert re.fullmatch(r"[A-Za-z0-9._-]{1,249}", topic), topic
        assert topic not in (".", "..")


# -- shared delivery topic -------------------------------------------------------------------
def test_shared_delivery_topic_name() -> None:
    assert Topics().shared_deliver == "dls.deliver"
    assert Topics("x.y").shared_deliver == "x.y.deliver"
    assert Topics().shared_deliver != Topics().deliver("deliver")


def test_delivery_partition_is_a_stable_hash() -> None:
    # Pinned values: nodes and clients on any machine, in any release, must agree.
    assert delivery_partition("alice", 1 << 31) == 1280413405  # MurmurHash3_x86_32, seed 0
    assert [delivery_partition(c, 4) for c in ("alice", "carol", "bob", "feed")] == [1, 0, 2, 0]
    assert delivery_partition("alice", 1) == 0
    names = [f"c{i}" for i in range(4000)]
    counts = np.bincount([delivery_partition(c, 8) for c in names], minlength=8)
    assert counts.min() > 400  # spread over every partition


@pytest.mark.parametrize("partitions", [0, -1, 2.0, None])
def test_delivery_partition_refuses_a_bad_count(partitions: object) -> None:
    with pytest.raises(ValueError, match=f"partitions must be an integer >= 1, got {partitions!r}"
                       ) as err:
        delivery_partition("alice", partitions)  # type: ignore[arg-type]
    assert isinstance(err.value, ConnectorSettingError)
    assert (err.value.field, err.value.value) == ("partitions", partitions)


def test_delivery_partition_refuses_a_bad_client() -> None:
    with pytest.raises(TopicNameError) as err:
        delivery_partition("a.b", 4)
    assert err.value.field == "client" and err.value.value == "a.b"


@given(st.lists(st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True), max_size=20))
def test_clients_header_round_trip(names: list[str]) -> None:
    assert decode_clients(encode_clients(names)) == frozenset(names)


_SHORT = st.from_regex(r"[ab_-]{1,4}", fullmatch=True)  # few letters: names inside names


@given(st.lists(_SHORT, max_size=12), _SHORT)
def test_names_client_answers_as_the_decoded_set(names: list[str], client: str) -> None:
    raw = encode_clients(names)
    assert names_client(raw, client) == (client in decode_clients(raw))
    assert names_client(bytearray(raw), client) == (client in names)


def test_names_client_needs_a_whole_name() -> None:
    raw = b"ab,b-a,xab_,ab"
    assert names_client(raw, "ab") and names_client(raw, "b-a")
    assert not names_client(b"xab,abx,a_ab", "ab")  # inside other names only
    assert not names_client(None, "ab") and not names_client(b"", "ab")


def test_clients_header_of_nothing() -> None:
    assert decode_clients(None) == frozenset()
    assert decode_clients(b"") == frozenset()
    assert HEADER_CLIENTS == "dls-clients"


# -- per-client inputs -----------------------------------------------------------------------
def test_client_inputs_are_named_by_node_client_and_kind():
    t = Topics()
    assert t.client_input("A", "alice", "publish") == "dls.node.A.client.alice.publish"
    assert t.client_input_prefix("A", "alice") == "dls.node.A.client.alice."
    for kind in CLIENT_INPUT_KINDS:
        topic = t.client_input("A", "alice", kind)
        assert topic.startswith(t.client_input_prefix("A", "alice"))
        assert t.parse_client_input(topic) == ("A", "alice", kind)


def test_a_client_prefix_is_no_prefix_of_another_clients_topics():
    t = Topics()
    assert not t.client_input("A", "alice", "publish").startswith(
        t.client_input_prefix("A", "al"))


def test_the_client_inputs_pattern_matches_exactly_one_nodes_client_inputs():
    t = Topics("my.net")
    pattern = t.client_inputs_pattern("A")
    assert pattern.startswith("^")  # librdkafka's mark of a pattern subscription
    rx = re.compile(pattern)
    assert rx.match("my.net.node.A.client.bob_2.unsubscribe")
    for other in ["my.net.node.AB.client.bob.publish", "my.net.node.A.client.b.c.publish",
                  "my.net.node.A.publish", "my.net.node.A.client.bob.snapshot",
                  "myXnet.node.A.client.bob.publish"]:
        assert not rx.match(other), other


def test_a_client_input_refuses_a_bad_kind_or_name():
    t = Topics()
    with pytest.raises(TopicNameError, match="kind must be one of") as e:
        t.client_input("A", "alice", "events")
    assert e.value.field == "kind"
    with pytest.raises(TopicNameError) as e:
        t.client_input("A", "al.ice", "publish")
    assert e.value.field == "client"
    assert t.parse_client_input("dls.node.A.subscribe") is None
    assert t.parse_client_input("dls.node.A.client.alice.snapshot") is None
    assert t.parse_client_input("other.node.A.client.alice.publish") is None
