"""The ``dlsroute`` command: one entry point, one subcommand per task."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from connectors.kafka_config import add_kafka_config_arg
from dls.exceptions import DLSError
from dlsroute.exceptions import EventSampleError, OptionError

__all__ = ["main"]


def _cmd_simulate(args: argparse.Namespace) -> int:
    from dlsroute.tools.simulate import simulate_files

    summary = simulate_files(args.space, args.topology, args.ops, args.out, mode=args.mode,
                             client_filter=args.client_filter,
                             routing_filter=args.routing_filter,
                             exact_delivery=args.exact_delivery)
    brief = {k: summary[k] for k in ("mode", "subscriptions", "unsubscriptions", "publishes",
                                     "subscription_labels", "forwarded_subscription_labels",
                                     "forwarded_unsubscription_labels", "deliveries",
                                     "false_positives", "matched", "edge_removed")}
    brief["rejected"] = len(summary["rejected"])
    print(json.dumps(brief))
    for r in summary["rejected"]:
        print(f"rejected: {r['reason']}", file=sys.stderr)
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from dlsroute.tools.replay import replay_files

    groups = {}
    for item in args.group or []:
        node, sep, group = item.partition("=")
        if not sep or not node or not group:
            raise OptionError(f"--group must be NODE=GROUP, got {item!r}", field="group",
                              value=item)
        groups[node] = group
    summary = replay_files(args.bootstrap, args.space, args.topology, args.ops, args.out,
                           topic_prefix=args.topic_prefix, mode=args.mode,
                           attach=args.attach, groups=groups,
                           shared_delivery_partitions=args.shared_delivery_partitions,
                           kafka_config=args.kafka_config)
    print(json.dumps({k: v for k, v in summary.items() if k != "rejected"}
                     | {"rejected": len(summary["rejected"])}))
    return 0


def _cmd_labels(args: argparse.Namespace) -> int:
    from dls.edge import interior_mask
    from dls.mapping import event_label
    from dls.predicates import Subscription
    from dls.space import ContentSpace

    space = ContentSpace.from_json(args.space)
    if args.event:
        label = event_label(space, json.loads(args.event))
        print(f"{label}\t{space.format_label(label)}")
        return 0
    where = args.where
    if where.lstrip().startswith(("[", "{")):
        where = json.loads(where)
    sub = Subscription(space, where)
    labels = sub.labels()
    inner = interior_mask(sub)
    for label, flag in zip(labels.tolist()[: args.limit], inner.tolist(), strict=False):
        print(f"{label}\t{space.format_label(label)}\t{'interior' if flag else 'boundary'}")
    if len(labels) > args.limit:
        print(f"... {len(labels) - args.limit} more")
    boundary = int(len(labels) - inner.sum())
    print(f"# {len(labels)} labels, {boundary} boundary ({100.0 * boundary / len(labels):.1f} %: "
          f"only events there can be false positives), {len(labels) - boundary} interior; "
          f"{len(sub.alternatives)} alternative(s)")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.kafka_config and not args.bootstrap:
        raise OptionError("--kafka-config goes with --bootstrap (the Kafka it is for)",
                          field="kafka_config", value=args.kafka_config)
    if args.kafka or args.bootstrap:
        from dlsroute.demo_kafka import run_kafka_demo

        return run_kafka_demo(seconds=20.0 if args.seconds is None else args.seconds,
                              seed=args.seed, port=args.port, bootstrap=args.bootstrap,
                              rate=args.rate, kafka_config=args.kafka_config)
    from dlsroute.demo import run_demo

    return run_demo(seconds=5.0 if args.seconds is None else args.seconds, seed=args.seed)


def _cmd_node(args: argparse.Namespace) -> int:
    import logging
    import os
    import signal

    from broker_node.config import load_settings
    from broker_node.replicas import ReplicaSet
    from broker_node.service import NodeService

    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = load_settings(args.config, metrics_port=args.metrics_port,
                             metrics_host=args.metrics_host, bootstrap=args.bootstrap,
                             kafka_config=args.kafka_config,
                             replication_factor=args.replication_factor,
                             min_insync_replicas=args.min_insync_replicas)
    # A sharded node: this process routes the shards its replica group gives it.
    service: Any = (ReplicaSet(settings) if settings.shards > 1
                    else NodeService(settings, hard_watchdog=True))  # one node in this process
    stops = 0

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stops
        stops += 1
        if stops > 1:  # a second Ctrl+C kills
            os._exit(130)
        logging.getLogger(__name__).info(
            "signal %d: finishing the batch, committing, stopping", signum)
        service.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        service.run(max_seconds=args.max_seconds)
    finally:
        service.close()
    return 0


def _sdk_client(args: argparse.Namespace) -> Any:
    from connectors.client import Client

    return Client(args.bootstrap, args.node, args.client, args.space,
                  topic_prefix=args.topic_prefix,
                  shared_delivery_partitions=args.shared_delivery_partitions,
                  client_inputs=args.client_inputs, kafka_config=args.kafka_config,
                  replication_factor=args.replication_factor,
                  min_insync_replicas=args.min_insync_replicas, shards=args.shards)


def _cmd_subscribe(args: argparse.Namespace) -> int:
    where = json.loads(args.where) if args.where.lstrip().startswith("[") else args.where
    with _sdk_client(args) as client:
        print(client.subscribe(where, sub_id=args.id, wait=args.wait))
    return 0


def _cmd_unsubscribe(args: argparse.Namespace) -> int:
    with _sdk_client(args) as client:
        client.unsubscribe(args.id, known_only=False)  # the id came from another process
    return 0


def _cmd_publish(args: argparse.Namespace) -> int:
    with _sdk_client(args) as client:
        lines = [args.attrs] if args.attrs else sys.stdin
        for line in lines:
            if line.strip():
                print(client.publish(json.loads(line)))
        client.flush()
    return 0


def _cmd_listen(args: argparse.Namespace) -> int:
    from dls.predicates import Subscription

    with _sdk_client(args) as client:
        for i, where in enumerate(args.where or []):
            client.subscriptions[f"local-{i}"] = Subscription(client.space, where)
        n = 0
        for d in client.deliveries(max_idle=args.max_idle):
            print(json.dumps({"id": d.event_id, "attrs": d.attrs, "origin": d.origin,
                              "source": d.source}), flush=True)
            n += 1
            if args.count and n >= args.count:
                break
        print(f"delivered {client.delivered}, false positives dropped "
              f"{client.false_positives}", file=sys.stderr)
    return 0


def _add_sdk_args(s: argparse.ArgumentParser) -> None:
    s.add_argument("--bootstrap", default="127.0.0.1:9092")
    s.add_argument("--space", required=True, help="content space spec (JSON)")
    s.add_argument("--node", required=True, help="the node the client is attached to")
    s.add_argument("--client", required=True, help="client id")
    s.add_argument("--topic-prefix", default="dls")
    s.add_argument("--shared-delivery-partitions", type=int, default=0, metavar="N",
                   help="the nodes' shared_delivery_partitions (0: one topic per client)")
    s.add_argument("--client-inputs", action="store_true",
                   help="write the client's own input topics (the node's client_inputs: the "
                        "secure layout)")
    s.add_argument("--shards", type=int, default=1, metavar="N",
                   help="the nodes' shards (label shards of the network; 1: unsharded)")
    add_kafka_config_arg(s)
    add_replication_args(s)


def add_replication_args(s: argparse.ArgumentParser) -> None:
    """``--replication-factor`` and ``--min-insync-replicas`` of commands that make topics."""
    s.add_argument("--replication-factor", type=int, default=None, metavar="N",
                   help="replication factor of the topics this creates (default: the "
                        "cluster's; 3 on a cluster of three or more brokers)")
    s.add_argument("--min-insync-replicas", type=int, default=None, metavar="N",
                   help="min.insync.replicas of the topics this creates, at most the "
                        "replication factor (default: the cluster's; 2 with 3 replicas)")


def _read_event_sample(path: str, names: Sequence[str], strings: Sequence[str] = ()
                       ) -> dict[str, list[Any]]:
    """Values per attribute from a JSONL file of events (``strings``: string attributes).

    A line is an event's attributes as a JSON object, or a trace op with an ``attrs``
    object (the publish ops of ``dlsroute simulate``). Ops without ``attrs`` (subscribe,
    unsubscribe) are skipped; an attribute an event lacks adds nothing to its sample.
    """
    values: dict[str, list[Any]] = {n: [] for n in names}
    with open(path, encoding="utf-8") as fh:
        for no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise EventSampleError(f"{path}:{no}: not JSON: {exc}", field="events",
                                       value=line[:80]) from None
            if not isinstance(rec, dict):
                raise EventSampleError(f"{path}:{no}: an event must be a JSON object",
                                       field="events", value=line[:80])
            if "op" in rec or "attrs" in rec:
                rec = rec.get("attrs")
                if not isinstance(rec, dict):
                    continue
            for n in names:
                v = rec.get(n)
                if v is None:
                    continue
                if n in strings:
                    if not isinstance(v, str):
                        raise EventSampleError(f"{path}:{no}: attribute {n!r} must be a "
                                               f"string, got {v!r}", field=n, value=v)
                    values[n].append(v)
                    continue
                if isinstance(v, bool) or not isinstance(v, int | float):
                    raise EventSampleError(f"{path}:{no}: attribute {n!r} must be a number, "
                                           f"got {v!r}", field=n, value=v)
                values[n].append(float(v))
    return values


def _cmd_tune_space(args: argparse.Namespace) -> int:
    from dls.space import ContentSpace
    from dls.tuning import cell_shares, tune_space

    with open(args.space, encoding="utf-8") as fh:
        spec = json.load(fh)
    space = ContentSpace.from_spec(spec)
    names = [a.name for a in space.attributes if a.kind in ("numeric", "string")]
    if args.attributes:
        names = [n.strip() for n in args.attributes.split(",") if n.strip()]
    strings = [a.name for a in space.attributes if a.kind == "string"]
    sample = _read_event_sample(args.events, names, strings)
    empty = [n for n, v in sample.items() if not v]
    if empty:
        raise EventSampleError(f"{args.events}: no value of attribute {empty[0]!r} in the "
                               "sample", field=empty[0], value=None)
    tuned = tune_space(spec, sample, cells=args.cells)
    new = ContentSpace.from_spec(tuned)
    text = json.dumps(tuned, indent=2) + "\n"
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    for n in names:
        before, after = cell_shares(space, n, sample[n]), cell_shares(new, n, sample[n])
        print(f"{n}: {len(sample[n])} values; {len(before)} -> {len(after)} cells; largest "
              f"cell holds {before.max():.1%} -> {after.max():.1%} of the sample",
              file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    p = argparse.ArgumentParser(prog="dlsroute", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    _add_simulate(sub)
    _add_replay(sub)
    _add_labels(sub)
    _add_tune_space(sub)
    _add_node(sub)
    _add_sdk_commands(sub)
    _add_demo(sub)
    from dlsroute import access

    access.register(sub)
    # The Spark jobs keep their own subcommands next to their code.
    from spark import batch_cli, map_cli

    map_cli.register(sub)
    batch_cli.register(sub)
    return p


# The subcommands' arguments, one function per subcommand (``sub``: the subparsers action).
def _add_simulate(sub: Any) -> None:
    s = sub.add_parser("simulate", help="play a trace through an in-process overlay")
    s.add_argument("--space", required=True, help="content space spec (JSON)")
    s.add_argument("--topology", required=True, help="overlay topology (JSON)")
    s.add_argument("--ops", required=True, help="trace of ops (JSONL)")
    s.add_argument("--out", required=True, help="where to write one record per publish")
    s.add_argument("--mode", choices=["exact", "paper"], default="exact",
                   help="aggregation rule: exact counts (default) or the paper's CBF rule")
    s.add_argument("--client-filter", choices=["cbf", "direct"], default="cbf")
    s.add_argument("--routing-filter", choices=["cbf", "direct"], default="cbf")
    s.add_argument("--exact-delivery", action=argparse.BooleanOptionalAction, default=True,
                   help="each node checks its clients' deliveries against their "
                        "subscriptions, as a node does by default (delivered = matched); "
                        "--no-exact-delivery: by label, as the paper's network")
    s.set_defaults(func=_cmd_simulate)


def _add_replay(sub: Any) -> None:
    s = sub.add_parser("replay", help="play a simulate trace through real nodes on Kafka")
    s.add_argument("--bootstrap", required=True)
    s.add_argument("--space", required=True)
    s.add_argument("--topology", required=True)
    s.add_argument("--ops", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--topic-prefix", default="dls")
    s.add_argument("--mode", choices=["exact", "paper"], default="exact")
    s.add_argument("--attach", action="store_true",
                   help="the nodes already run (dlsroute node ...): start none, watch them "
                        "through Kafka")
    s.add_argument("--group", action="append", metavar="NODE=GROUP",
                   help="with --attach: a node's consumer group if not <prefix>-node-<node>")
    s.add_argument("--shared-delivery-partitions", type=int, default=0, metavar="N",
                   help="the nodes' shared_delivery_partitions (0: one topic per client)")
    add_kafka_config_arg(s)
    s.set_defaults(func=_cmd_replay)


def _add_labels(sub: Any) -> None:
    s = sub.add_parser("labels", help="show the labels of a subscription or an event")
    s.add_argument("--space", required=True)
    g = s.add_mutually_exclusive_group(required=True)
    g.add_argument("--where", help="subscription: text, JSON list or {\"any\": [...]}; "
                   "prints each label, whether its cell is interior or boundary, and a summary")
    g.add_argument("--event", help="event attributes as a JSON object")
    s.add_argument("--limit", type=int, default=50)
    s.set_defaults(func=_cmd_labels)


def _add_tune_space(sub: Any) -> None:
    s = sub.add_parser("tune-space", help="fit numeric and string cells to a sample of events "
                                          "(equi-depth breakpoints)")
    s.add_argument("--space", required=True, help="content space spec (JSON)")
    s.add_argument("--events", required=True,
                   help="sample of events (JSONL: attribute objects or trace ops)")
    s.add_argument("--attributes", default=None,
                   help="comma-separated numeric attributes to tune (default: all)")
    s.add_argument("--cells", type=int, default=None,
                   help="cells per tuned attribute (default: as many as the spec has)")
    s.add_argument("--out", default=None, help="where to write the tuned spec (default stdout)")
    s.set_defaults(func=_cmd_tune_space)


def _add_node(sub: Any) -> None:
    s = sub.add_parser("node", help="run one broker node on Kafka")
    s.add_argument("--config", required=True, help="node settings (TOML)")
    s.add_argument("--bootstrap", default=None, help="overrides the config's bootstrap")
    s.add_argument("--metrics-port", type=int, default=None,
                   help="serve Prometheus metrics on PORT (of --metrics-host)")
    s.add_argument("--metrics-host", default=None,
                   help="address the metrics page binds to (default: the config's, "
                        "127.0.0.1 unless set; 0.0.0.0 for every interface)")
    s.add_argument("--max-seconds", type=float, default=None, help="stop after this long")
    add_kafka_config_arg(s, "; overrides the config's kafka_config")
    add_replication_args(s)  # override the config's replication_factor, min_insync_replicas
    s.set_defaults(func=_cmd_node)


def _add_sdk_commands(sub: Any) -> None:
    """The commands of one SDK client: subscribe, unsubscribe, publish, listen."""
    s = sub.add_parser("subscribe", help="send a subscription; prints its id")
    _add_sdk_args(s)
    s.add_argument("--where", required=True, help="text or JSON list of predicates")
    s.add_argument("--id", default=None, help="subscription id (default: generated)")
    s.add_argument("--wait", type=float, default=None, metavar="SECONDS",
                   help="wait until the node has applied it (fails after SECONDS)")
    s.set_defaults(func=_cmd_subscribe)

    s = sub.add_parser("unsubscribe", help="cancel a subscription by id")
    _add_sdk_args(s)
    s.add_argument("--id", required=True)
    s.set_defaults(func=_cmd_unsubscribe)

    s = sub.add_parser("publish", help="publish events (JSON attrs; one per stdin line)")
    _add_sdk_args(s)
    s.add_argument("--attrs", default=None, help="one event's attributes as JSON")
    s.set_defaults(func=_cmd_publish)

    s = sub.add_parser("listen", help="print deliveries, filtered exactly by the client's "
                       "live subscriptions (kept in Kafka)")
    _add_sdk_args(s)
    s.add_argument("--where", action="append",
                   help="filter by this too, besides the client's live subscriptions "
                   "(repeatable)")
    s.add_argument("--count", type=int, default=0, help="stop after this many")
    s.add_argument("--max-idle", type=float, default=None,
                   help="stop after this many idle seconds")
    s.set_defaults(func=_cmd_listen)


def _add_demo(sub: Any) -> None:
    s = sub.add_parser("demo", help="run the demo (in-process, or on a real Kafka: --kafka)")
    s.add_argument("--seconds", type=float, default=None,
                   help="how long quotes stream (default 5, or 20 with --kafka)")
    s.add_argument("--seed", type=int, default=7)
    s.add_argument("--kafka", action="store_true",
                   help="on the local Kafka of docker/kafka/kafka.sh (started, then stopped, "
                        "unless it already runs)")
    s.add_argument("--port", type=int, default=9092, help="the local Kafka's port (--kafka)")
    s.add_argument("--bootstrap", default=None,
                   help="use this Kafka instead (implies --kafka; starts and stops nothing)")
    s.add_argument("--rate", type=float, default=300.0,
                   help="quotes per second with --kafka (default 300)")
    add_kafka_config_arg(s, "; with --bootstrap")
    s.set_defaults(func=_cmd_demo)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; errors about input print one clear line and exit 2."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except DLSError as exc:
        print(f"dlsroute {args.command}: {exc}", file=sys.stderr)
        return 2
    except (OSError, json.JSONDecodeError) as exc:
        print(f"dlsroute {args.command}: {exc}", file=sys.stderr)
        return 2
