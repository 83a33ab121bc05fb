"""``dlsroute access``: Kafka users and ACLs for the secure profile (docs/security.md).

Every role is a SCRAM-SHA-512 user (principal ``User:<name>``) with a random password and
exactly the ACLs its role needs, granted by an admin (``--admin-config``: a librdkafka
properties file of a super user, e.g. ``.cache/kafka/secure/admin.properties`` of
``make kafka-up SECURE=1``):

==========================  ==================================================================
principal                   may
==========================  ==================================================================
``node.A``                  read its inputs (``P.node.A.*``: the shared ones, its clients' own,
                            its snapshots), the links and forwarded events of the network;
                            write its snapshots, its own outgoing links and forwards
                            (``P.link.A.*``, ``P.fwd.A.*``), deliveries (``P.deliver*``) and
                            dead letters; create and repair the topics it makes; its groups
                            and its transactional id
``client.alice``            write her own inputs at her node (``P.node.A.client.alice.*``),
                            read her deliveries (``P.deliver.alice``; with
                            ``--shared-delivery`` the shared ``P.deliver``, i.e. the whole
                            network is one tenant), read and write her subscriptions topic;
                            her SDK groups
``mapper``                  the Spark mapping job, a trusted gateway: read the raw topics, write
                            the nodes' shared inputs (``P.node.*``) and dead letters; its groups
``raw.X``                   an application writing the raw topics. The mapping job trusts the
                            client named in a raw record: a raw writer is trusted like the
                            gateway itself
``operator.X``              read the dead letters (other clients' raw bytes)
==========================  ==================================================================

Nobody else (only the admin, a super user) writes link or forwarded-event topics, and nobody
else reads dead letters. Each command prints the path of the properties file it wrote for
the new principal (``<out-dir>/<principal>.properties``, mode 0600); the password is in that
file and nowhere else. Group and topic names are granted LITERAL where the code knows them
(``P-sdk-al`` is no prefix of ``P-sdk-alice``'s groups), PREFIXED only where names end with
a separator (``P.node.A.``) or the name is made by a library (Spark's groups).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from connectors.exceptions import ConnectorError
from connectors.kafka import admin, ensure_topics
from connectors.kafka_config import load_kafka_config
from connectors.replication import TopicReplication, topic_replication
from connectors.topics import CONTROL_TOPIC_CONFIG, Topics, check_name
from dls.exceptions import DLSError
from dls.shards import check_shards
from dlsroute.exceptions import OptionError

__all__ = [
    "DEFAULT_OUT_DIR",
    "Grant",
    "add_principal",
    "allows",
    "client_grants",
    "client_topics",
    "mapper_grants",
    "node_grants",
    "operator_grants",
    "raw_writer_grants",
    "register",
    "remove_principal",
]

DEFAULT_OUT_DIR = Path(".cache/kafka/secure")
"""Where the principals' properties files go unless ``--out-dir`` says otherwise."""

SCRAM_ITERATIONS = 8192
"""Iterations of the SCRAM-SHA-512 credentials made here (Kafka's minimum is 4096)."""

_R, _W, _C, _D = "READ", "WRITE", "CREATE", "DESCRIBE"
_DC, _AC = "DESCRIBE_CONFIGS", "ALTER_CONFIGS"


@dataclass(frozen=True, order=True)
class Grant:
    """One ALLOW ACL: ``operation`` on the ``kind`` resource ``name`` (``pattern``)."""

    kind: str  # TOPIC, GROUP, TRANSACTIONAL_ID, BROKER (the cluster: "kafka-cluster")
    name: str
    pattern: str  # LITERAL or PREFIXED
    operation: str

    def binding(self, principal: str) -> AclBinding:
        """The ACL for ``User:<principal>`` from any host."""
        return AclBinding(ResourceType[self.kind], self.name,
                          ResourcePatternType[self.pattern], f"User:{principal}", "*",
                          AclOperation[self.operation], AclPermissionType.ALLOW)


# Operations that imply DESCRIBE on the same resource (Kafka's authorizer rule).
_IMPLY_DESCRIBE = frozenset({"READ", "WRITE", "DELETE", "ALTER"})


def allows(grants: Iterable[Grant], kind: str, name: str, operation: str) -> bool:
    """Tell whether ``grants`` allow ``operation`` on the ``kind`` resource ``name``.

    Kafka's matching: a LITERAL grant names the resource exactly, a PREFIXED one any name
    that starts with it; READ, WRITE, DELETE and ALTER imply DESCRIBE (and ALTER_CONFIGS
    implies DESCRIBE_CONFIGS). For checking the tables without a broker.
    """
    for g in grants:
        if g.kind != kind:
            continue
        if not (name == g.name if g.pattern == "LITERAL" else name.startswith(g.name)):
            continue
        if g.operation == operation or (
                operation == "DESCRIBE" and g.operation in _IMPLY_DESCRIBE) or (
                operation == "DESCRIBE_CONFIGS" and g.operation == "ALTER_CONFIGS"):
            return True
    return False


def _grants(kind: str, pattern: str, names: Iterable[str], ops: Iterable[str]) -> list[Grant]:
    ops = list(ops)
    return [Grant(kind, n, pattern, op) for n in names for op in ops]


def _topics(pattern: str, names: Iterable[str], *ops: str) -> list[Grant]:
    return _grants("TOPIC", pattern, names, ops)


def _groups(names: Iterable[str], pattern: str = "LITERAL") -> list[Grant]:
    return _grants("GROUP", pattern, names, (_R, _D))


def node_grants(topics: Topics, node: str, shards: int = 1) -> list[Grant]:
    """What node ``node``'s principal may do (the module text); sorted, no repeats.

    Its groups and transactional id are the defaults of :class:`NodeSettings` (a node with
    another ``group_id`` needs those instead); with ``shards`` > 1, those of each shard's
    engine too (``<group>-s<k>``; the shard topics lie under the node's prefixes).
    """
    check_name(node, "node")
    p = topics.prefix
    mine = f"{p}.node.{node}."
    group = f"{p}-node-{node}"
    out = (_topics("PREFIXED", [mine], _R, _W, _C, _D, _DC, _AC)
           # Links: it reads its neighbours', creates both directions and repairs their
           # settings (control topics); it writes only its own.
           + _topics("PREFIXED", [f"{p}.link."], _R, _D, _C, _DC, _AC)
           + _topics("PREFIXED", [f"{p}.fwd."], _R, _D, _C)
           + _topics("PREFIXED", [f"{p}.link.{node}.", f"{p}.fwd.{node}."], _W)
           + _topics("PREFIXED", [f"{p}.fwd.{node}."], _DC)
           + _topics("PREFIXED", [topics.shared_deliver], _W, _C, _D, _DC)
           + _topics("LITERAL", [topics.deadletter], _W, _C, _D, _DC)
           # what the topics it writes, and the brokers, take (broker_node.oversize)
           + _grants("BROKER", "LITERAL", ["kafka-cluster"], (_DC,))
           + _groups([group, f"{group}-ends", f"{group}-recovery", f"{group}-replicas"])
           + _grants("TRANSACTIONAL_ID", "LITERAL", [f"{group}-tx"], (_W, _D)))
    for k in range(shards if shards > 1 else 0):
        engine = f"{group}-s{k}"
        out += (_groups([engine, f"{engine}-ends", f"{engine}-recovery"])
                + _grants("TRANSACTIONAL_ID", "LITERAL", [f"{engine}-tx"], (_W, _D)))
    return sorted(set(out))


def client_grants(topics: Topics, node: str, client: str, *,
                  shared_delivery: bool = False) -> list[Grant]:
    """What client ``client`` at ``node`` may do (the module text); sorted, no repeats.

    ``shared_delivery``: it may read the shared delivery topic too, where it sees every
    client's deliveries: the network (its prefix) is then one tenant.
    """
    group = f"{topics.prefix}-sdk-{client}"
    out = (_topics("PREFIXED", [topics.client_input_prefix(node, client)], _W, _D)
           + _topics("LITERAL", [topics.deliver(client)], _R, _D)
           + _topics("LITERAL", [topics.client_subscriptions(client)], _R, _W, _D)
           + _groups([group, f"{group}-state", f"{group}-ack", f"{group}-drain"]))
    if shared_delivery:
        out += _topics("LITERAL", [topics.shared_deliver], _R, _D)
    return sorted(set(out))


def mapper_grants(topics: Topics, nodes: Sequence[str] = (), shards: int = 1) -> list[Grant]:
    """What the Spark mapping job's principal may do; sorted, no repeats.

    ``nodes``: it writes exactly these nodes' three shared input topics (LITERAL), of each
    of ``shards`` label shards in a sharded network (``spark-map --shards``); none: every
    topic under ``P.node.`` (PREFIXED: any node, present or future, but also the nodes'
    snapshots and the clients' own input topics, which a trusted gateway never writes; name
    the nodes to rule that out).
    """
    p = topics.prefix
    raw = [topics.raw_subscriptions, topics.raw_unsubscriptions, topics.raw_events]
    parts = [topics] if shards == 1 else [topics.of_shard(k) for k in range(shards)]
    inputs = (_topics("LITERAL", [t for n in nodes for s in parts for t in (
        s.node_subscribe(n), s.node_unsubscribe(n), s.node_publish(n))], _W, _D)
        if nodes else _topics("PREFIXED", [f"{p}.node."], _W, _D))
    out = (_topics("LITERAL", raw, _R, _D)
           + inputs
           + _topics("LITERAL", [topics.deadletter], _W, _D)
           + _groups([f"{p}-spark-map", f"{p}-spark-analyze"], "PREFIXED"))
    return sorted(set(out))


def raw_writer_grants(topics: Topics) -> list[Grant]:
    """What an application writing the raw topics may do; sorted, no repeats."""
    raw = [topics.raw_subscriptions, topics.raw_unsubscriptions, topics.raw_events]
    return sorted(set(_topics("LITERAL", raw, _W, _D)))


def operator_grants(topics: Topics, name: str) -> list[Grant]:
    """What operator ``name`` may do: read the dead letters (group ``P-operator-<name>``)."""
    check_name(name, "name")
    return sorted(set(_topics("LITERAL", [topics.deadletter], _R, _D)
                      + _groups([f"{topics.prefix}-operator-{name}"])))


def client_topics(topics: Topics, node: str, client: str, *, publish_delay_s: float,
                  shared_delivery: bool = False, shards: int = 1
                  ) -> list[tuple[str, dict[str, str]]]:
    """The topics ``access add-client`` creates for the client, with their settings.

    Its three input topics (subscribe and unsubscribe are control topics; publish refuses
    records older than ``publish_delay_s``, as a node's publish topic does), its delivery
    topic (not with shared delivery: the nodes make the shared one) and its subscriptions
    topic (compacted). With ``shards`` > 1, the three inputs of each shard.
    """
    from connectors.client_state import SUBSCRIPTIONS_TOPIC_CONFIG

    control = dict(CONTROL_TOPIC_CONFIG)
    out = []
    for t in ([topics] if shards == 1 else [topics.of_shard(k) for k in range(shards)]):
        out += [(t.client_input(node, client, "subscribe"), control),
                (t.client_input(node, client, "unsubscribe"), control),
                (t.client_input(node, client, "publish"),
                 {"message.timestamp.type": "CreateTime",
                  "message.timestamp.before.max.ms": str(int(publish_delay_s * 1000))})]
    out.append((topics.client_subscriptions(client), dict(SUBSCRIPTIONS_TOPIC_CONFIG)))
    if not shared_delivery:
        out.append((topics.deliver(client), {}))
    return out


# -- talking to Kafka ---------------------------------------------------------------------
def _admin(bootstrap: str, conf: dict[str, str]) -> AdminClient:
    return admin(bootstrap, **conf)


def _wait_all(futures: dict[Any, Any], what: str) -> None:
    for key, fut in futures.items():
        try:
            fut.result(timeout=30)
        except KafkaException as exc:
            raise ConnectorError(f"{what} {key}: {exc.args[0] if exc.args else exc}",
                                 field="access", value=str(key)) from exc


def _write_properties(out_dir: Path, principal: str, password: str,
                      admin_conf: dict[str, str]) -> Path:
    """``<out_dir>/<principal>.properties`` (mode 0600) with the principal's settings."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{principal}.properties"
    lines = [f"# {principal}: written by dlsroute access (librdkafka names)",
             f"security.protocol={admin_conf.get('security.protocol', 'SASL_SSL')}",
             "sasl.mechanism=SCRAM-SHA-512", f"sasl.username={principal}",
             f"sasl.password={password}"]
    if "ssl.ca.location" in admin_conf:
        lines.append(f"ssl.ca.location={Path(admin_conf['ssl.ca.location']).resolve()}")
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, ("\n".join(lines) + "\n").encode())
    finally:
        os.close(fd)
    tmp.replace(path)
    return path


def add_principal(bootstrap: str, admin_conf: dict[str, str], principal: str,
                  grants: Sequence[Grant], *, out_dir: Path = DEFAULT_OUT_DIR,
                  topics: Sequence[tuple[str, dict[str, str]]] = (),
                  replication: TopicReplication | None = None) -> Path:
    """Create (or renew) ``principal``: its topics, a new password, its ACLs; the file.

    Run again for the same principal it gives it a new password (the old file stops
    working) and grants the same ACLs (granting one twice is a no-op). ``replication``:
    of the topics it creates (None: the cluster's defaults).

    Raises:
        ConnectorError: Kafka refused a step (the admin is no super user, ...).
    """
    client = _admin(bootstrap, admin_conf)
    for name, config in topics:
        ensure_topics(bootstrap, [name], config=config, kafka=admin_conf,
                      **(replication or topic_replication(None, None)))
    password = secrets.token_urlsafe(32)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
    _wait_all(client.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(principal, info, password.encode())]),
        "setting the SCRAM credential of")
    if grants:
        _wait_all(client.create_acls([g.binding(principal) for g in grants]),
                  "creating the ACL")
    return _write_properties(out_dir, principal, password, admin_conf)


def remove_principal(bootstrap: str, admin_conf: dict[str, str], principal: str) -> int:
    """Revoke ``principal``: every ACL of it deleted, its password replaced; the ACLs deleted.

    Its open connections keep authenticated until they re-authenticate (the broker's
    ``connections.max.reauth.ms``), but every request is authorised against the ACLs,
    which are gone once the deletion has reached the broker; a new connection fails
    authentication.

    The SCRAM credential is overwritten with a random password that is thrown away, not
    deleted: Kafka 4.2's ``ScramDelta.apply()`` (metadata/src/main/java/org/apache/kafka/
    image/ScramDelta.java) can drop EVERY user's credential when a restarted broker replays
    a deletion (once a removal empties the mechanism's map it drops that map, which on a
    replay from nothing depends on hash order, and adds the users that follow to the
    detached map): after one deletion and a restart no one, admin included, could log in
    (reproduced on the local secure broker).
    """
    client = _admin(bootstrap, admin_conf)
    # None: any resource name, any host (the stubs say str; librdkafka takes NULL).
    flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY,  # type: ignore[arg-type]
                           f"User:{principal}", None, AclOperation.ANY,  # type: ignore[arg-type]
                           AclPermissionType.ANY)
    deleted = 0
    for _, fut in client.delete_acls([flt]).items():
        deleted += len(fut.result(timeout=30))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
    _wait_all(client.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(principal, info, secrets.token_bytes(32))]),
        "replacing the SCRAM credential of")
    return deleted


# -- the command line ---------------------------------------------------------------------
def _bootstrap_and_conf(args: argparse.Namespace) -> tuple[str, dict[str, str]]:
    conf = load_kafka_config(args.admin_config)
    return args.bootstrap, conf


def _replication(args: argparse.Namespace) -> TopicReplication:
    """``--replication-factor`` and ``--min-insync-replicas``, checked."""
    return topic_replication(args.replication_factor, args.min_insync_replicas,
                             names=("replication_factor", "min_insync_replicas"))


def _cmd_add_node(args: argparse.Namespace) -> int:
    bootstrap, conf = _bootstrap_and_conf(args)
    t = Topics(args.prefix)
    path = add_principal(bootstrap, conf, f"node.{check_name(args.node, '--node')}",
                         node_grants(t, args.node, args.shards), out_dir=Path(args.out_dir))
    print(path)
    return 0


def _cmd_add_client(args: argparse.Namespace) -> int:
    bootstrap, conf = _bootstrap_and_conf(args)
    t = Topics(args.prefix)
    check_name(args.node, "--node")
    check_name(args.client, "--client")
    delay = args.publish_delay_s
    if delay is None:
        from broker_node.config import NodeSettings

        delay = NodeSettings.model_fields["publish_delay_s"].default
    if delay <= 0:
        raise OptionError(f"--publish-delay-s must be > 0, got {delay}",
                          field="publish_delay_s", value=delay)
    path = add_principal(
        bootstrap, conf, f"client.{args.client}",
        client_grants(t, args.node, args.client, shared_delivery=args.shared_delivery),
        out_dir=Path(args.out_dir),
        topics=client_topics(t, args.node, args.client, publish_delay_s=float(delay),
                             shared_delivery=args.shared_delivery, shards=args.shards),
        replication=_replication(args))
    print(path)
    return 0


def _cmd_remove_client(args: argparse.Namespace) -> int:
    bootstrap, conf = _bootstrap_and_conf(args)
    principal = f"client.{check_name(args.client, '--client')}"
    n = remove_principal(bootstrap, conf, principal)
    stale = Path(args.out_dir) / f"{principal}.properties"
    if stale.exists():
        stale.unlink()
    print(f"removed {principal}: its {n} ACLs deleted, its password replaced by one nobody "
          f"knows", file=sys.stderr)
    return 0


def _cmd_add_mapper(args: argparse.Namespace) -> int:
    bootstrap, conf = _bootstrap_and_conf(args)
    t = Topics(args.prefix)
    raw: list[tuple[str, dict[str, str]]] = [
        (n, {}) for n in (t.raw_subscriptions, t.raw_unsubscriptions, t.raw_events,
                          t.deadletter)]
    nodes = [check_name(n, "--nodes") for n in args.nodes.split(",") if n] \
        if args.nodes else []
    try:
        shards = check_shards(args.shards)
    except DLSError as exc:
        print(f"dlsroute access add-mapper: --shards: {exc}", file=sys.stderr)
        return 2
    path = add_principal(bootstrap, conf, "mapper", mapper_grants(t, nodes, shards),
                         out_dir=Path(args.out_dir), topics=raw, replication=_replication(args))
    print(path)
    return 0


def _cmd_add_raw_writer(args: argparse.Namespace) -> int:
    bootstrap, conf = _bootstrap_and_conf(args)
    t = Topics(args.prefix)
    raw: list[tuple[str, dict[str, str]]] = [
        (n, {}) for n in (t.raw_subscriptions, t.raw_unsubscriptions, t.raw_events)]
    path = add_principal(bootstrap, conf, f"raw.{check_name(args.name, '--name')}",
                         raw_writer_grants(t), out_dir=Path(args.out_dir), topics=raw,
                         replication=_replication(args))
    print(path)
    return 0


def _cmd_add_operator(args: argparse.Namespace) -> int:
    bootstrap, conf = _bootstrap_and_conf(args)
    t = Topics(args.prefix)
    path = add_principal(bootstrap, conf, f"operator.{check_name(args.name, '--name')}",
                         operator_grants(t, args.name), out_dir=Path(args.out_dir),
                         topics=[(t.deadletter, {})], replication=_replication(args))
    print(path)
    return 0


def register(sub: Any) -> None:
    """Add ``dlsroute access ...`` to the ``dlsroute`` subparsers ``sub``."""
    p = sub.add_parser("access", help="users and ACLs of the secure profile (SCRAM, ACLs)",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    acts = p.add_subparsers(dest="action", required=True)

    def common(s: argparse.ArgumentParser) -> None:
        s.add_argument("--admin-config", required=True, metavar="FILE",
                       help="a super user's librdkafka settings (make kafka-up SECURE=1: "
                            ".cache/kafka/secure/admin.properties)")
        s.add_argument("--bootstrap", default="127.0.0.1:9392",
                       help="the Kafka (default 127.0.0.1:9392, the local secure one)")
        s.add_argument("--prefix", default="dls", help="the network's topic prefix")
        s.add_argument("--replication-factor", type=int, default=None, metavar="N",
                       help="replication factor of the topics this creates (default: the "
                            "cluster's)")
        s.add_argument("--min-insync-replicas", type=int, default=None, metavar="N",
                       help="min.insync.replicas of the topics this creates, at most the "
                            "replication factor (default: the cluster's)")
        s.add_argument("--out-dir", default=str(DEFAULT_OUT_DIR),
                       help=f"where the principal's properties file goes ({DEFAULT_OUT_DIR})")

    s = acts.add_parser("add-node", help="user node.NODE with a node's ACLs")
    common(s)
    s.add_argument("--node", required=True)
    s.add_argument("--shards", type=int, default=1,
                   help="the network's label shards (the node's shards setting)")
    s.set_defaults(func=_cmd_add_node)

    s = acts.add_parser("add-client", help="user client.CLIENT at NODE, with its topics")
    common(s)
    s.add_argument("--node", required=True)
    s.add_argument("--shards", type=int, default=1,
                   help="the network's label shards (its input topics in each)")
    s.add_argument("--client", required=True)
    s.add_argument("--shared-delivery", action="store_true",
                   help="it may read the shared delivery topic (the network is one tenant)")
    s.add_argument("--publish-delay-s", type=float, default=None,
                   help="the node's publish_delay_s (default: the node's default)")
    s.set_defaults(func=_cmd_add_client)

    s = acts.add_parser("remove-client", help="revoke user client.CLIENT: all its ACLs "
                        "deleted, its password replaced")
    common(s)
    s.add_argument("--node", required=True)
    s.add_argument("--client", required=True)
    s.set_defaults(func=_cmd_remove_client)

    s = acts.add_parser("add-mapper", help="user mapper: the Spark mapping job (a gateway)")
    common(s)
    s.add_argument("--nodes", default=None,
                   help="comma-separated nodes whose inputs it may write (default: every "
                        "topic under <prefix>.node., snapshots and clients' own inputs too)")
    s.add_argument("--shards", type=int, default=1,
                   help="the network's label shards (as spark-map --shards): with --nodes, "
                        "the inputs of every shard of those nodes")
    s.set_defaults(func=_cmd_add_mapper)

    s = acts.add_parser("add-raw-writer", help="user raw.NAME: writes the raw topics "
                        "(trusted like the gateway)")
    common(s)
    s.add_argument("--name", required=True)
    s.set_defaults(func=_cmd_add_raw_writer)

    s = acts.add_parser("add-operator", help="user operator.NAME: reads the dead letters")
    common(s)
    s.add_argument("--name", required=True)
    s.set_defaults(func=_cmd_add_operator)
