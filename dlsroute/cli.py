"""The ``dlsroute`` command: one entry point, one subcommand per task."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from dls.exceptions import DLSError

__all__ = ["main"]


def _cmd_simulate(args: argparse.Namespace) -> int:
    from broker_node.simulate import simulate_files

    summary = simulate_files(args.space, args.topology, args.ops, args.out, mode=args.mode,
                             client_filter=args.client_filter,
                             routing_filter=args.routing_filter)
    brief = {k: summary[k] for k in ("mode", "subscriptions", "unsubscriptions", "publishes",
                                     "subscription_labels", "forwarded_subscription_labels",
                                     "forwarded_unsubscription_labels", "deliveries",
                                     "false_positives", "matched")}
    brief["rejected"] = len(summary["rejected"])
    print(json.dumps(brief))
    for r in summary["rejected"]:
        print(f"rejected: {r['reason']}", file=sys.stderr)
    return 0


def _cmd_labels(args: argparse.Namespace) -> int:
    from dls.mapping import event_label
    from dls.predicates import Subscription
    from dls.space import ContentSpace

    space = ContentSpace.from_json(args.space)
    if args.event:
        label = event_label(space, json.loads(args.event))
        print(f"{label}\t{space.format_label(label)}")
        return 0
    where = args.where
    if where.lstrip().startswith("["):
        where = json.loads(where)
    labels = Subscription(space, where).labels()
    for label in labels.tolist()[: args.limit]:
        print(f"{label}\t{space.format_label(label)}")
    if len(labels) > args.limit:
        print(f"... {len(labels) - args.limit} more ({len(labels)} labels)")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from dlsroute.demo import run_demo

    return run_demo(seconds=args.seconds, seed=args.seed)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    p = argparse.ArgumentParser(prog="dlsroute", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("simulate", help="play a trace through an in-process overlay")
    s.add_argument("--space", required=True, help="content space spec (JSON)")
    s.add_argument("--topology", required=True, help="overlay topology (JSON)")
    s.add_argument("--ops", required=True, help="trace of ops (JSONL)")
    s.add_argument("--out", required=True, help="where to write one record per publish")
    s.add_argument("--mode", choices=["exact", "paper"], default="exact",
                   help="aggregation rule: exact counts (default) or the paper's CBF rule")
    s.add_argument("--client-filter", choices=["cbf", "direct"], default="cbf")
    s.add_argument("--routing-filter", choices=["cbf", "direct"], default="cbf")
    s.set_defaults(func=_cmd_simulate)

    s = sub.add_parser("labels", help="show the labels of a subscription or an event")
    s.add_argument("--space", required=True)
    g = s.add_mutually_exclusive_group(required=True)
    g.add_argument("--where", help="subscription, text or JSON list")
    g.add_argument("--event", help="event attributes as a JSON object")
    s.add_argument("--limit", type=int, default=50)
    s.set_defaults(func=_cmd_labels)

    s = sub.add_parser("demo", help="run the demo")
    s.add_argument("--seconds", type=float, default=5.0)
    s.add_argument("--seed", type=int, default=7)
    s.set_defaults(func=_cmd_demo)
    return p


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
