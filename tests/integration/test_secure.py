"""The secure profile, attacked with the attacker's own valid credentials (docs/security.md).

On the secure local Kafka (SASL_SSL, SCRAM-SHA-512, ACLs; ``secure_kafka``), principals are
made as an operator would (:mod:`dlsroute.access`): node ``A``, clients alice and bob at
``A``, an operator. Bob, a client in good standing, then tries what the threat model says
a client must not do, and each attempt fails with an authorization error; alice and the
node can do what their roles need; a wrong password or none is refused at connect; a
removed client loses access.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from connectors.client_state import SubscriptionStore
from connectors.kafka import admin, consumer_config, ensure_topics, producer_config
from connectors.kafka_config import load_kafka_config
from connectors.topic_settings import enforce_topic_config
from connectors.topics import CONTROL_TOPIC_CONFIG, Topics
from dlsroute import access

pytestmark = pytest.mark.integration

DENIED = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
          KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
          KafkaError.CLUSTER_AUTHORIZATION_FAILED}


@dataclass
class Net:
    """One network's principals on the secure broker."""

    bootstrap: str
    topics: Topics
    admin: dict[str, str]
    admin_file: Path
    alice: str
    bob: str
    files: dict[str, Path]

    def conf(self, who: str) -> dict[str, str]:
        """The librdkafka settings of ``who`` (a key of ``files``)."""
        return load_kafka_config(self.files[who])


@pytest.fixture(scope="module")
def net(secure_kafka: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    bootstrap, admin_file = secure_kafka
    out = tmp_path_factory.mktemp("principals")
    tag = uuid.uuid4().hex[:8]
    t = Topics(f"s{tag}")
    adm = load_kafka_config(admin_file)
    alice, bob = f"alice-{tag}", f"bob-{tag}"
    files = {
        "node": access.add_principal(bootstrap, adm, f"node.A{tag}",
                                     access.node_grants(t, f"A{tag}"), out_dir=out),
        "operator": access.add_principal(bootstrap, adm, f"operator.o{tag}",
                                         access.operator_grants(t, f"o{tag}"), out_dir=out,
                                         topics=[(t.deadletter, {})]),
    }
    for name in (alice, bob):
        files[name] = access.add_principal(
            bootstrap, adm, f"client.{name}", access.client_grants(t, f"A{tag}", name),
            out_dir=out, topics=access.client_topics(t, f"A{tag}", name, publish_delay_s=60))
    yield Net(bootstrap, t, adm, admin_file, alice, bob, files)
    for principal in (f"node.A{tag}", f"operator.o{tag}", f"client.{alice}", f"client.{bob}"):
        access.remove_principal(bootstrap, adm, principal)
    client = admin(bootstrap, **adm)
    names = [n for n in client.list_topics(timeout=10).topics if n.startswith(f"{t.prefix}.")]
    if names:
        for fut in client.delete_topics(names, operation_timeout=10).values():
            fut.result(timeout=30)


def _node(net: Net) -> str:
    return net.alice.replace("alice-", "A")


def produce(net: Net, who: str, topic: str, value: bytes = b"x",
            **extra: Any) -> int | None:
    """Write one message as ``who``; None on success, else the error code."""
    codes: list[int | None] = []
    producer = Producer(producer_config(net.bootstrap, **net.conf(who), **extra))
    try:
        producer.produce(topic, value, on_delivery=lambda err, _msg: codes.append(
            None if err is None else err.code()))
        producer.flush(15)
    except KafkaException as exc:
        return int(exc.args[0].code())
    assert codes, f"no delivery report for {topic}"
    return codes[0]


def consume(net: Net, who: str, topic: str, group: str, *, commit: bool = False,
            subscribe: bool = False, timeout: float = 15.0) -> bytes | int:
    """Read the first message of ``topic`` as ``who``: its value, or the error code.

    ``subscribe``: join ``group`` (an unauthorised topic is then reported at once; an
    assigned consumer would only read nothing), else assign partition 0.
    """
    consumer = Consumer(consumer_config(net.bootstrap, group, **net.conf(who)))
    try:
        if subscribe:
            consumer.subscribe([topic])
        else:
            consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() in DENIED or msg.error().fatal():
                    return int(msg.error().code())
                continue
            if commit:
                code = _commit(consumer, msg)
                if code is not None:
                    return code
            return bytes(msg.value() or b"")
        raise AssertionError(f"nothing read from {topic} as {who} in {timeout} s")
    finally:
        consumer.close()


def _refused(net: Net, conf: dict[str, str]) -> list[KafkaError]:
    """The errors of a client with ``conf`` that gets no metadata (it is dropped after)."""
    seen: list[KafkaError] = []
    client = admin(net.bootstrap, **conf, error_cb=seen.append, log_level=0)
    with pytest.raises(KafkaException):
        client.list_topics(timeout=3)
    client.poll(0.5)  # serves error_cb
    del client
    return seen


# A group coordinator not there yet: on a fresh broker the first commit creates
# __consumer_offsets, and until it is loaded commits answer with these.
_NOT_YET = {KafkaError._WAIT_COORD, KafkaError.COORDINATOR_NOT_AVAILABLE,
            KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR,
            KafkaError._TIMED_OUT}


def _commit(consumer: Consumer, msg: Any, timeout: float = 60.0) -> int | None:
    """Commit past ``msg``; None when done, else the (non-transient) error code."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            consumer.commit(message=msg, asynchronous=False)
            return None
        except KafkaException as exc:
            code = int(exc.args[0].code())
            if code not in _NOT_YET or time.monotonic() > deadline:
                return code
            time.sleep(0.2)


def test_no_credentials_or_a_wrong_password_is_refused_at_connect(net: Net) -> None:
    good = net.conf(net.alice)
    wrong = {**good, "sasl.password": good["sasl.password"] + "x"}
    seen = _refused(net, wrong)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in seen), seen
    assert any("invalid credentials" in e.str() or "Authentication failed" in e.str()
               for e in seen), seen
    # No SASL at all (TLS only), and neither TLS nor SASL: no answer but a refusal.
    for anonymous in ({"security.protocol": "SSL", "ssl.ca.location": good["ssl.ca.location"]},
                      {"security.protocol": "PLAINTEXT"}):
        _refused(net, anonymous)


def test_alice_does_what_a_client_does(net: Net) -> None:
    t, node, me = net.topics, _node(net), net.alice
    for kind in ("subscribe", "unsubscribe", "publish"):
        assert produce(net, me, t.client_input(node, me, kind)) is None, kind
    # Her deliveries, written by her node, read and committed under her group.
    assert produce(net, "node", t.deliver(me), b"for alice") is None
    assert consume(net, me, t.deliver(me), f"{t.prefix}-sdk-{me}", commit=True) == b"for alice"
    # Her subscriptions topic, through the SDK's store (groups P-sdk-alice-state).
    conf = net.conf(me)
    producer = Producer(producer_config(net.bootstrap, **conf))
    store = SubscriptionStore(net.bootstrap, t.client_subscriptions(me),
                              f"{t.prefix}-sdk-{me}-state", producer, conf)
    try:
        store.put("s1", ["p < 3"], node, sent=True)
        assert [r.sub_id for r in store.read_new()] == ["s1"]
    finally:
        store.close()


def test_node_does_what_a_node_does(net: Net) -> None:
    t, node = net.topics, _node(net)
    conf = net.conf("node")
    control = [t.node_subscribe(node), t.node_unsubscribe(node), t.link(node, "B"),
               t.link("B", node)]
    ensure_topics(net.bootstrap, control, config=CONTROL_TOPIC_CONFIG, kafka=conf)
    enforce_topic_config(net.bootstrap, control, CONTROL_TOPIC_CONFIG, why="test", kafka=conf)
    ensure_topics(net.bootstrap, [t.node_publish(node), t.node_snapshot(node), t.deadletter,
                                  t.forward(node, "B"), t.forward("B", node),
                                  t.deliver("carol")], kafka=conf)
    for topic in (t.link(node, "B"), t.forward(node, "B"), t.deadletter, t.deliver("carol"),
                  t.node_snapshot(node)):
        assert produce(net, "node", topic) is None, topic
    # Its inputs: a client's own input topic, read in the node's group (pattern and all).
    assert produce(net, net.alice, t.client_input(node, net.alice, "publish"), b"ev") is None
    got = consume(net, "node", t.client_input(node, net.alice, "publish"),
                  f"{t.prefix}-node-{node}", commit=True)
    assert got in (b"x", b"ev")
    # Exactly once: its transactional id.
    tx = Producer(producer_config(net.bootstrap, transactional_id=f"{t.prefix}-node-{node}-tx",
                                  **conf))
    tx.init_transactions(20)
    tx.begin_transaction()
    tx.produce(t.forward(node, "B"), b"tx")
    tx.commit_transaction(20)


def test_bob_cannot_read_alices_deliveries(net: Net) -> None:
    t = net.topics
    assert produce(net, "node", t.deliver(net.alice), b"secret") is None
    got = consume(net, net.bob, t.deliver(net.alice), f"{t.prefix}-sdk-{net.bob}",
                  subscribe=True)
    assert got == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Nor can he use alice's group (to move her committed offsets, say).
    assert produce(net, "node", t.deliver(net.bob)) is None
    group = f"{t.prefix}-sdk-{net.alice}"
    bob = admin(net.bootstrap, **net.conf(net.bob))
    for attempt in (
            lambda: bob.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
                group, [TopicPartition(t.deliver(net.bob), 0, 1)])]),
            lambda: bob.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
                group, [TopicPartition(t.deliver(net.alice), 0)])])):
        with pytest.raises(KafkaException) as denied:
            for fut in attempt().values():
                fut.result(timeout=30)
        assert denied.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_bob_cannot_write_alices_inputs(net: Net) -> None:
    t, node = net.topics, _node(net)
    for kind in ("subscribe", "unsubscribe", "publish"):
        assert produce(net, net.bob, t.client_input(node, net.alice, kind)) \
            == KafkaError.TOPIC_AUTHORIZATION_FAILED, kind
    # Nor the nodes' shared inputs (only the mapping job, a gateway, writes those).
    ensure_topics(net.bootstrap, [t.node_subscribe(node)], kafka=net.admin)
    assert produce(net, net.bob, t.node_subscribe(node)) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_bob_cannot_write_links_or_forwarded_events(net: Net) -> None:
    t, node = net.topics, _node(net)
    ensure_topics(net.bootstrap, [t.link(node, "B"), t.forward(node, "B"), t.link("B", node)],
                  kafka=net.conf("node"))
    for topic in (t.link(node, "B"), t.forward(node, "B"), t.link("B", node)):
        assert produce(net, net.bob, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED, topic


def test_bob_cannot_read_dead_letters_an_operator_can(net: Net) -> None:
    t = net.topics
    assert produce(net, "node", t.deadletter, b"raw bytes of someone") is None
    assert consume(net, net.bob, t.deadletter, f"{t.prefix}-sdk-{net.bob}", subscribe=True) \
        == KafkaError.TOPIC_AUTHORIZATION_FAILED
    group = f"{t.prefix}-operator-{net.files['operator'].stem.split('.', 1)[1]}"
    assert isinstance(consume(net, "operator", t.deadletter, group, commit=True), bytes)


def test_a_removed_client_loses_access(net: Net, capsys: pytest.CaptureFixture[str]) -> None:
    t, node = net.topics, _node(net)
    victim = f"carol-{uuid.uuid4().hex[:6]}"
    net.files[victim] = access.add_principal(
        net.bootstrap, net.admin, f"client.{victim}", access.client_grants(t, node, victim),
        out_dir=net.files["node"].parent,
        topics=access.client_topics(t, node, victim, publish_delay_s=60))
    topic = t.client_input(node, victim, "publish")
    codes: list[int | None] = []
    producer = Producer(producer_config(net.bootstrap, **net.conf(victim)))
    producer.produce(topic, b"before", on_delivery=lambda e, _m: codes.append(e and e.code()))
    producer.flush(15)
    assert codes == [None]
    t0 = time.monotonic()
    access.remove_principal(net.bootstrap, net.admin, f"client.{victim}")
    removed = time.monotonic()
    # Her open connection: the next write fails as soon as the ACLs are gone.
    while time.monotonic() - removed < 30:
        codes.clear()
        producer.produce(topic, b"after", on_delivery=lambda e, _m: codes.append(e and e.code()))
        producer.flush(15)
        if codes and codes[0] is not None:
            break
        time.sleep(0.05)
    denied = time.monotonic()
    assert codes and codes[0] == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # A new connection with her (deleted) credential is refused at authentication.
    seen = _refused(net, net.conf(victim))
    assert any(e.code() == KafkaError._AUTHENTICATION for e in seen), seen
    with capsys.disabled():
        print(f"\n  revoked client: removal took {removed - t0:.3f} s, its open connection "
              f"was refused {denied - removed:.3f} s after")


def test_the_access_command_prints_the_file_and_removes_the_user(
        net: Net, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dlsroute.cli import main

    who = f"dave-{uuid.uuid4().hex[:6]}"
    common = ["--admin-config", str(net.admin_file), "--bootstrap", net.bootstrap,
              "--prefix", net.topics.prefix, "--out-dir", str(tmp_path)]
    assert main(["access", "add-client", *common, "--node", _node(net), "--client", who]) == 0
    out = capsys.readouterr().out.strip()
    assert out == str(tmp_path / f"client.{who}.properties")  # its path, nothing else
    assert oct(Path(out).stat().st_mode & 0o777) == "0o600"
    net.files[who] = Path(out)
    assert produce(net, who, net.topics.client_input(_node(net), who, "publish")) is None
    assert main(["access", "remove-client", *common, "--node", _node(net), "--client", who]) == 0
    assert not Path(out).exists()


def test_the_broker_takes_no_anonymous_connection(secure_kafka: tuple[str, Path]) -> None:
    bootstrap, admin_file = secure_kafka
    port = bootstrap.rsplit(":", 1)[1]
    props = admin_file.parent.parent / f"secure-broker-{port}" / "server.properties"
    conf = dict(line.split("=", 1) for line in props.read_text().splitlines()
                if "=" in line and not line.startswith("#"))
    protocols = dict(p.split(":") for p in conf["listener.security.protocol.map"].split(","))
    listeners = [item.split("://")[0] for item in conf["listeners"].split(",")]
    assert {protocols[name] for name in listeners} == {"SASL_SSL"}
    assert conf["listener.name.sasl_ssl.sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert conf["authorizer.class.name"].endswith("StandardAuthorizer")
    assert conf["allow.everyone.if.no.acl.found"] == "false"
    assert conf["super.users"] == "User:admin"
    assert conf["auto.create.topics.enable"] == "false"
    for secret in (props, admin_file, admin_file.with_name("admin.password")):
        assert secret.stat().st_mode & 0o077 == 0, secret
