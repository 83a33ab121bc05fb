"""The ACL tables of ``dlsroute access``, checked without a broker (Kafka's matching rules)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from connectors.topics import Topics
from dlsroute import access
from dlsroute.access import Grant, allows
from dlsroute.cli import build_parser

T = Topics("dls")


def roles() -> dict[str, list[Grant]]:
    return {
        "node.A": access.node_grants(T, "A"),
        "client.alice": access.client_grants(T, "A", "alice"),
        "client.al": access.client_grants(T, "A", "al"),
        "client.alice.shared": access.client_grants(T, "A", "alice", shared_delivery=True),
        "mapper": access.mapper_grants(T),
        "raw.app": access.raw_writer_grants(T),
        "operator.ops": access.operator_grants(T, "ops"),
    }


def test_alice_may_do_what_a_client_does_and_no_more() -> None:
    g = access.client_grants(T, "A", "alice")
    for kind in ("subscribe", "unsubscribe", "publish"):
        assert allows(g, "TOPIC", T.client_input("A", "alice", kind), "WRITE")
        assert allows(g, "TOPIC", T.client_input("A", "alice", kind), "DESCRIBE")
        assert not allows(g, "TOPIC", T.client_input("A", "bob", kind), "WRITE")
        assert not allows(g, "TOPIC", T.client_input("B", "alice", kind), "WRITE")
    assert allows(g, "TOPIC", T.deliver("alice"), "READ")
    assert not allows(g, "TOPIC", T.deliver("alice"), "WRITE")  # only nodes deliver
    assert not allows(g, "TOPIC", T.deliver("bob"), "READ")
    assert not allows(g, "TOPIC", T.shared_deliver, "READ")
    for op in ("READ", "WRITE"):
        assert allows(g, "TOPIC", T.client_subscriptions("alice"), op)
        assert not allows(g, "TOPIC", T.client_subscriptions("bob"), op)
    for group in ("dls-sdk-alice", "dls-sdk-alice-state", "dls-sdk-alice-ack",
                  "dls-sdk-alice-drain"):
        assert allows(g, "GROUP", group, "READ")
    assert not allows(g, "GROUP", "dls-sdk-alice2", "READ")
    assert not allows(g, "TOPIC", T.node_subscribe("A"), "WRITE")  # the shared inputs
    assert not any(x.operation == "CREATE" for x in g)
    shared = access.client_grants(T, "A", "alice", shared_delivery=True)
    assert allows(shared, "TOPIC", T.shared_deliver, "READ")
    assert set(shared) - set(g) == {Grant("TOPIC", T.shared_deliver, "LITERAL", "READ"),
                                    Grant("TOPIC", T.shared_deliver, "LITERAL", "DESCRIBE")}


def test_a_short_name_is_no_prefix_of_a_longer_one() -> None:
    al = access.client_grants(T, "A", "al")
    for kind in ("subscribe", "publish"):
        assert not allows(al, "TOPIC", T.client_input("A", "alice", kind), "WRITE")
    assert not allows(al, "TOPIC", T.deliver("alice"), "READ")
    assert not allows(al, "GROUP", "dls-sdk-alice", "READ")
    node = access.node_grants(T, "A")
    assert not allows(node, "TOPIC", T.link("AB", "C"), "WRITE")
    assert not allows(node, "TOPIC", T.forward("AB", "C"), "WRITE")
    assert not allows(node, "TOPIC", T.node_publish("AB"), "READ")


def test_only_nodes_write_links_and_forwards_only_operators_read_dead_letters() -> None:
    for name, g in roles().items():
        for topic in (T.link("A", "B"), T.forward("A", "B"), T.link("B", "A"),
                      T.forward("B", "A")):
            writes = allows(g, "TOPIC", topic, "WRITE")
            assert writes == (name == "node.A" and topic.split(".")[2] == "A"), (name, topic)
        assert allows(g, "TOPIC", T.deadletter, "READ") == (name == "operator.ops"), name


def test_node_may_do_what_a_node_does() -> None:
    g = access.node_grants(T, "A")
    mine = [T.node_subscribe("A"), T.node_unsubscribe("A"), T.node_publish("A"),
            T.node_snapshot("A"), T.client_input("A", "alice", "publish")]
    for topic in mine:
        for op in ("READ", "DESCRIBE", "CREATE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"):
            assert allows(g, "TOPIC", topic, op), (topic, op)
    assert allows(g, "TOPIC", T.node_snapshot("A"), "WRITE")
    for topic in (T.link("B", "A"), T.forward("B", "A")):
        assert allows(g, "TOPIC", topic, "READ") and allows(g, "TOPIC", topic, "CREATE")
    for topic in (T.link("A", "B"), T.forward("A", "B"), T.deliver("alice"), T.shared_deliver,
                  T.deadletter):
        assert allows(g, "TOPIC", topic, "WRITE") and allows(g, "TOPIC", topic, "CREATE")
        assert allows(g, "TOPIC", topic, "DESCRIBE_CONFIGS")  # what it takes
    assert not allows(g, "TOPIC", T.forward("B", "C"), "DESCRIBE_CONFIGS")
    assert allows(g, "BROKER", "kafka-cluster", "DESCRIBE_CONFIGS")
    assert not allows(g, "BROKER", "kafka-cluster", "ALTER_CONFIGS")
    for group in ("dls-node-A", "dls-node-A-ends", "dls-node-A-recovery",
                  "dls-node-A-replicas"):
        assert allows(g, "GROUP", group, "READ")
    assert allows(g, "TRANSACTIONAL_ID", "dls-node-A-tx", "WRITE")
    assert not allows(g, "TRANSACTIONAL_ID", "dls-node-B-tx", "WRITE")
    assert not allows(g, "TOPIC", T.node_publish("B"), "READ")
    assert not allows(g, "TOPIC", T.client_subscriptions("alice"), "READ")


def test_the_gateway_the_raw_writers_and_the_operators() -> None:
    m = access.mapper_grants(T)
    for topic in (T.raw_subscriptions, T.raw_unsubscriptions, T.raw_events):
        assert allows(m, "TOPIC", topic, "READ") and not allows(m, "TOPIC", topic, "WRITE")
    for topic in (T.node_subscribe("A"), T.node_unsubscribe("B"), T.node_publish("C")):
        assert allows(m, "TOPIC", topic, "WRITE")
    assert allows(m, "TOPIC", T.deadletter, "WRITE")
    assert allows(m, "GROUP", "dls-spark-map-6f1c-executor", "READ")
    assert allows(m, "TOPIC", T.node_snapshot("A"), "WRITE")  # the prefix: anything there
    named = access.mapper_grants(T, ["A", "B"])
    for topic in (T.node_subscribe("A"), T.node_unsubscribe("B"), T.node_publish("A")):
        assert allows(named, "TOPIC", topic, "WRITE")
    for topic in (T.node_snapshot("A"), T.client_input("A", "alice", "publish"),
                  T.node_publish("C")):
        assert not allows(named, "TOPIC", topic, "WRITE")
    sharded = access.mapper_grants(T, ["A"], shards=2)
    for k in (0, 1):
        for topic in (T.of_shard(k).node_subscribe("A"), T.of_shard(k).node_publish("A")):
            assert allows(sharded, "TOPIC", topic, "WRITE")
    assert not allows(sharded, "TOPIC", T.of_shard(2).node_publish("A"), "WRITE")
    assert not allows(sharded, "TOPIC", T.node_publish("A"), "WRITE")
    raw = access.raw_writer_grants(T)
    assert {g.name for g in raw} == {T.raw_subscriptions, T.raw_unsubscriptions, T.raw_events}
    assert {g.operation for g in raw} == {"WRITE", "DESCRIBE"}
    ops = access.operator_grants(T, "ops")
    assert allows(ops, "GROUP", "dls-operator-ops", "READ")
    assert not any(g.operation == "WRITE" for g in ops)


def test_client_topics_have_the_nodes_settings() -> None:
    got = dict(access.client_topics(T, "A", "alice", publish_delay_s=60))
    assert got[T.client_input("A", "alice", "subscribe")]["retention.ms"] == "-1"
    assert got[T.client_input("A", "alice", "unsubscribe")]["retention.ms"] == "-1"
    assert got[T.client_input("A", "alice", "publish")] == {
        "message.timestamp.type": "CreateTime", "message.timestamp.before.max.ms": "60000"}
    assert got[T.client_subscriptions("alice")] == {"cleanup.policy": "compact"}
    assert got[T.deliver("alice")] == {}
    shared = dict(access.client_topics(T, "A", "alice", publish_delay_s=1, shared_delivery=True))
    assert T.deliver("alice") not in shared


def test_the_properties_file_is_private(tmp_path: Path) -> None:
    path = access._write_properties(tmp_path / "d", "client.alice", "pw",
                                    {"security.protocol": "SASL_SSL",
                                     "ssl.ca.location": str(tmp_path / "ca.pem")})
    assert path == tmp_path / "d" / "client.alice.properties"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert "sasl.username=client.alice\n" in text and "sasl.password=pw\n" in text
    assert "sasl.mechanism=SCRAM-SHA-512\n" in text


@pytest.mark.parametrize("argv", [
    ["access", "add-node", "--node", "A"],
    ["access", "add-client", "--admin-config", "a", "--node", "A"],
    ["access", "add-operator", "--admin-config", "a"],
])
def test_the_command_line_wants_its_arguments(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)


def test_every_role_command_parses() -> None:
    p = build_parser()
    a = p.parse_args(["access", "add-client", "--admin-config", "a.properties", "--node", "A",
                      "--client", "alice", "--shared-delivery", "--out-dir", "out"])
    assert (a.node, a.client, a.shared_delivery, a.prefix) == ("A", "alice", True, "dls")
    for action in (["add-mapper"], ["add-raw-writer", "--name", "app"],
                   ["add-operator", "--name", "ops"], ["add-node", "--node", "A"],
                   ["remove-client", "--node", "A", "--client", "alice"]):
        assert p.parse_args(["access", *action, "--admin-config", "a"]).func


def test_revoking_replaces_the_password_never_deletes_the_credential(monkeypatch) -> None:
    """A deletion replayed by a restarted Kafka 4.2 broker can drop every user (access.py)."""
    from concurrent.futures import Future

    from confluent_kafka.admin import UserScramCredentialUpsertion

    calls: list[tuple[str, object]] = []

    def done(value: object) -> Future[object]:
        f: Future[object] = Future()
        f.set_result(value)
        return f

    class FakeAdmin:
        def delete_acls(self, filters: list[object]) -> dict[object, Future[object]]:
            calls.append(("delete_acls", filters))
            return {filters[0]: done([1, 2, 3])}

        def alter_user_scram_credentials(self, alts: list[object]) -> dict[str, Future[object]]:
            calls.append(("alter", alts))
            return {"client.alice": done(None)}

    monkeypatch.setattr(access, "_admin", lambda bootstrap, conf: FakeAdmin())
    assert access.remove_principal("b:1", {}, "client.alice") == 3
    (alts,) = [v for k, v in calls if k == "alter"]
    assert all(isinstance(a, UserScramCredentialUpsertion) for a in alts)  # type: ignore[attr-defined]
    assert [a.user for a in alts] == ["client.alice"]  # type: ignore[attr-defined]


def test_a_sharded_nodes_grants_cover_every_engine_and_no_other_node() -> None:
    t = Topics("dls")
    grants = access.node_grants(t, "A", shards=3)
    for k in range(3):
        shard = t.of_shard(k)
        for topic in (shard.node_subscribe("A"), shard.node_publish("A"),
                      shard.node_snapshot("A"), shard.client_input("A", "x", "publish")):
            assert access.allows(grants, "TOPIC", topic, "READ"), topic
        assert access.allows(grants, "TOPIC", shard.link("A", "B"), "WRITE")
        assert not access.allows(grants, "TOPIC", shard.link("B", "A"), "WRITE")
        for group in (f"dls-node-A-s{k}", f"dls-node-A-s{k}-ends", f"dls-node-A-s{k}-recovery"):
            assert access.allows(grants, "GROUP", group, "READ"), group
        assert access.allows(grants, "TRANSACTIONAL_ID", f"dls-node-A-s{k}-tx", "WRITE")
    assert access.allows(grants, "GROUP", "dls-node-A-replicas", "READ")
    assert access.allows(grants, "TOPIC", t.node_shards("A"), "READ")
    assert not access.allows(grants, "GROUP", "dls-node-A-s3", "READ")  # no such shard
    assert not access.allows(grants, "GROUP", "dls-node-AB-s0", "READ")


def test_a_client_of_a_sharded_network_gets_its_inputs_in_every_shard() -> None:
    t = Topics("dls")
    made = [name for name, _ in access.client_topics(t, "A", "alice", publish_delay_s=60,
                                                     shards=2)]
    grants = access.client_grants(t, "A", "alice")
    for k in range(2):
        for kind in ("subscribe", "unsubscribe", "publish"):
            topic = t.of_shard(k).client_input("A", "alice", kind)
            assert topic in made and access.allows(grants, "TOPIC", topic, "WRITE")
    assert t.client_input("A", "alice", "publish") not in made  # no unsharded inputs
