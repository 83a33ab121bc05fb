"""Subcommands of the ``dlsroute`` command for the Spark batch jobs (workload, analyze).

pyspark is imported inside the command functions only, so that ``dlsroute --help`` and the
other subcommands start without it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from connectors.kafka_config import add_kafka_config_arg
from spark.exceptions import SparkArgumentError

__all__ = ["register"]

#: What --kafka-config is for Spark's commands
SPARK_CLIENT = "; translated for Spark's Java client"


def _nodes(text: str) -> tuple[str, ...]:
    """``--nodes 3`` -> ``n0, n1, n2``; ``--nodes A,B,C`` -> those names."""
    text = text.strip()
    if text.isdigit():
        return tuple(f"n{i}" for i in range(int(text)))
    return tuple(t.strip() for t in text.split(",") if t.strip())


def _cmd_workload(args: argparse.Namespace) -> int:
    from connectors.topics import Topics
    from spark.workload import WorkloadError, WorkloadSpec, generate, write_files, write_kafka

    spec = WorkloadSpec(
        distribution=args.distribution, d=args.d, g=args.g, n_subs=args.subscriptions,
        n_events=args.events, n_clients=args.clients, nodes=_nodes(args.nodes),
        length_cells=args.length_cells, zipf_s=args.zipf_s, domain_high=args.domain_high,
        unsub_fraction=args.unsub_fraction, seed=args.seed, partitions=args.partitions)
    if (args.out is None) == (args.bootstrap is None):
        raise WorkloadError("give exactly one of --out (files) and --bootstrap (Kafka)",
                            field="out", value=args.out)
    topics = Topics(args.topic_prefix)  # checked before Spark starts
    from connectors.kafka_config import load_kafka_config, spark_options
    from spark.session import spark_session

    kafka = load_kafka_config(args.kafka_config)
    spark_options(kafka)  # a setting the Java client cannot take fails before Spark starts
    spark = spark_session("dlsroute-workload", master=args.master,
                          kafka=args.bootstrap is not None)
    w = generate(spark, spec)
    if args.out is not None:
        meta = write_files(w, args.out, args.format)
    else:
        meta = write_kafka(w, args.bootstrap, topics, partitions=args.topic_partitions,
                           kafka=kafka)
        if args.space_out:
            from spark.workload import space_spec

            with open(args.space_out, "w", encoding="utf-8") as f:
                json.dump(space_spec(spec), f, indent=1)
                f.write("\n")
    print(json.dumps(meta))
    return 0


def _cmd_analyze(args: argparse.Namespace) -> int:
    from dls.space import ContentSpace
    from spark.analyze import analyze, format_table, parse_filter_sizes, plot, read_raw

    space = ContentSpace.from_json(args.space)
    sizes = parse_filter_sizes(args.filter_sizes or "")
    kafka = any(s is not None and s.startswith("kafka:")
                for s in (args.subscriptions, args.events))
    from connectors.kafka_config import load_kafka_config, spark_options
    from spark.session import spark_session

    java = spark_options(load_kafka_config(args.kafka_config))
    if java:  # a group of our prefix, so that an ACL can grant it
        java["groupIdPrefix"] = f"{args.topic_prefix}-spark-analyze"
    spark = spark_session("dlsroute-analyze", master=args.master, kafka=kafka)
    subs = read_raw(spark, args.subscriptions, bootstrap=args.bootstrap, kafka_options=java)
    if args.sample is not None:
        subs = subs.sample(fraction=args.sample, seed=0)
    events = (read_raw(spark, args.events, bootstrap=args.bootstrap, kafka_options=java)
              if args.events is not None else None)
    result = analyze(spark, space, subs, events, filter_sizes=sizes,
                     max_events=args.max_events)
    result["sources"] = {"subscriptions": args.subscriptions, "events": args.events,
                         "sample": args.sample}
    print(format_table(result))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    if args.plot:
        try:
            path = plot(result, args.plot)
        except ImportError:
            print("analyze: matplotlib is not installed; no plot", file=sys.stderr)
        else:
            print(f"plot: {path}")
    return 0


def _fraction(text: str) -> float:
    v = float(text)
    if not 0.0 < v <= 1.0:
        raise SparkArgumentError(f"--sample must be in (0, 1], got {text}", field="--sample",
                                 value=text)
    return v


def register(sub: Any) -> None:
    """Add this module's subcommands to the ``dlsroute`` subparsers ``sub``."""
    s = sub.add_parser(
        "workload", help="generate the paper's §6.1 workload on Spark (files or Kafka)",
        description="Uniform or Zipf box subscriptions and point events over d integer "
                    "attributes a0.. in [0, domain-high], g cells each; deterministic in "
                    "--seed whatever the partitioning. Writes raw records (JSON lines or "
                    "Parquet) and space.json under --out, or JSON records to the raw topics "
                    "of a Kafka (--bootstrap).")
    s.add_argument("--distribution", choices=("uniform", "zipf"), default="uniform")
    s.add_argument("--d", type=int, default=3, help="attributes (default 3)")
    s.add_argument("--g", type=int, default=32, help="cells per attribute (default 32)")
    s.add_argument("--subscriptions", type=int, default=10_000)
    s.add_argument("--events", type=int, default=10_000)
    s.add_argument("--clients", type=int, default=100)
    s.add_argument("--nodes", default="1",
                   help="a count (names n0..) or comma-separated names (default 1)")
    s.add_argument("--length-cells", type=float, default=2.0,
                   help="longest interval, in cells (default 2)")
    s.add_argument("--zipf-s", type=float, default=1.2, help="Zipf exponent (default 1.2)")
    s.add_argument("--domain-high", type=int, default=2**20 - 1)
    s.add_argument("--unsub-fraction", type=float, default=0.0,
                   help="share of subscriptions also unsubscribed (default 0)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--partitions", type=int, default=2, help="Spark partitions (default 2)")
    s.add_argument("--out", default=None, help="output directory (files)")
    s.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    s.add_argument("--bootstrap", default=None, help="write to this Kafka instead of files")
    s.add_argument("--topic-prefix", default="dls")
    s.add_argument("--topic-partitions", type=int, default=2,
                   help="partitions of raw topics created here (default 2)")
    s.add_argument("--space-out", default=None,
                   help="with --bootstrap: also write the space spec to this file")
    s.add_argument("--master", default="local[2]")
    add_kafka_config_arg(s, SPARK_CLIENT)
    s.set_defaults(func=_cmd_workload)

    s = sub.add_parser(
        "analyze", help="label-set sizes, quantisation and Bloom FP rates of a sample (Spark)",
        description="For a space and a sample of raw subscriptions (and events) from files "
                    "(JSON lines or Parquet) or topics (kafka:TOPIC): label-set size "
                    "distribution, distinct labels, expected quantisation false-positive "
                    "rate, expected Bloom false-positive rate of given filter sizes; a table, "
                    "and optionally JSON and a PNG plot.")
    s.add_argument("--space", required=True, help="content space spec (JSON)")
    s.add_argument("--subscriptions", required=True, help="path or kafka:TOPIC")
    s.add_argument("--events", default=None, help="path or kafka:TOPIC (optional)")
    s.add_argument("--bootstrap", default=None, help="Kafka of kafka:TOPIC sources")
    s.add_argument("--filter-sizes", default=None,
                   help="filters to evaluate, M or M:K comma separated (K default optimal)")
    s.add_argument("--sample", type=_fraction, default=None,
                   help="analyse this fraction of the subscriptions")
    s.add_argument("--max-events", type=int, default=100_000,
                   help="events used for the exact check (default 100000)")
    s.add_argument("--out", default=None, help="write the result as JSON here")
    s.add_argument("--plot", default=None, help="write a PNG plot here")
    s.add_argument("--master", default="local[2]")
    s.add_argument("--topic-prefix", default="dls",
                   help="with --kafka-config: the network's prefix (the Spark group "
                        "<prefix>-spark-analyze-*)")
    add_kafka_config_arg(s, SPARK_CLIENT)
    s.set_defaults(func=_cmd_analyze)
