"""Subcommands of the ``dlsroute`` command for the Spark streaming mapping job (spark-map).

pyspark is imported inside the command, so ``dlsroute --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from typing import Any

from connectors.kafka_config import add_kafka_config_arg
from spark.batch_cli import SPARK_CLIENT

__all__ = ["register"]


def _cmd_spark_map(args: argparse.Namespace) -> int:
    from connectors.topics import MAX_SHARDS, Topics, check_name
    from dls.space import ContentSpace

    space = ContentSpace.from_json(args.space)  # bad input fails before Spark starts
    topics = Topics(args.topic_prefix)
    nodes = [check_name(n, "--nodes") for n in args.nodes.split(",") if n] if args.nodes else []
    if args.max_offsets is not None and args.max_offsets < 1:
        print(f"dlsroute spark-map: --max-offsets must be at least 1, got {args.max_offsets}",
              file=sys.stderr)
        return 2
    if not 1 <= args.shards <= MAX_SHARDS:
        print(f"dlsroute spark-map: --shards must be in [1, {MAX_SHARDS}], got {args.shards}",
              file=sys.stderr)
        return 2

    from connectors.kafka_config import load_kafka_config, spark_options
    from spark.retention import checkpoint_gaps
    from spark.session import spark_session
    from spark.stream import input_rows, prepare_topics, start_query

    kafka = load_kafka_config(args.kafka_config)
    java = spark_options(kafka)  # fails before Spark starts on a setting Java lacks
    if args.checkpoint and (gaps := checkpoint_gaps(args.checkpoint, args.bootstrap, kafka)
                            ) and not args.accept_data_loss:
        print(f"dlsroute spark-map: retention deleted raw records the checkpoint "
              f"{args.checkpoint} had not read: " + "; ".join(
                  f"{g.topic}[{g.partition}] offsets {g.start} to {g.first - 1} "
                  f"({g.messages} records)" for g in gaps)
              + ". They are lost; --accept-data-loss goes on from the first offsets left",
              file=sys.stderr)
        return 1
    prepare_topics(args.bootstrap, topics, nodes, kafka=kafka, shards=args.shards)
    spark = spark_session("dlsroute-spark-map", master=args.master)
    started = time.monotonic()
    query = start_query(spark, space, args.bootstrap, topics=topics,
                        checkpoint=args.checkpoint, once=args.once,
                        trigger_seconds=args.trigger_seconds,
                        starting_offsets=args.starting_offsets,
                        max_offsets_per_trigger=args.max_offsets, query_name="dls-spark-map",
                        kafka_options=java, shards=args.shards,
                        fail_on_data_loss=not args.accept_data_loss)

    stopping = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        # query.stop() inside the handler re-enters Py4J while the main thread waits in
        # it ("reentrant call"): the handler only asks; the main thread stops the query.
        del signum, frame
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    try:
        while not stopping.is_set() and query.isActive:
            query.awaitTermination(1)
    except KeyboardInterrupt:
        pass
    finally:
        if query.isActive:
            query.stop()
        rows = input_rows(query)
        error = query.exception()
        spark.stop()
    print(json.dumps({"raw_records": rows, "seconds": round(time.monotonic() - started, 1),
                      "once": args.once}))
    if error is not None:
        print(f"dlsroute spark-map: the query failed: {error}", file=sys.stderr)
        if "failOnDataLoss" in str(error):
            print("dlsroute spark-map: retention deleted raw records before the job read "
                  "them; they are lost: --accept-data-loss goes on from the first offsets "
                  "left", file=sys.stderr)
        return 1
    return 0


def register(sub: Any) -> None:
    """Add this module's subcommands to the ``dlsroute`` subparsers ``sub``."""
    s = sub.add_parser(
        "spark-map",
        help="Spark streaming job: raw subscriptions/unsubscriptions/events -> node topics",
        description="Read dls.raw.{subscriptions,unsubscriptions,events} (Avro or JSON), map "
                    "them to DLS labels in Spark SQL and write label-set (un)subscriptions "
                    "and labelled events to the nodes' topics; bad records go to "
                    "dls.deadletter.")
    s.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers, HOST:PORT")
    s.add_argument("--space", required=True, help="content space spec (JSON file)")
    s.add_argument("--checkpoint", default=None,
                   help="checkpoint folder: a restart resumes where the last run stopped "
                        "(default: a temporary folder, no resuming)")
    s.add_argument("--once", action="store_true",
                   help="process what is in the raw topics now, then stop (availableNow)")
    s.add_argument("--topic-prefix", default="dls", help="topic name prefix (default dls)")
    s.add_argument("--nodes", default=None,
                   help="comma-separated nodes whose input topics to create first (control "
                        "topics with unlimited retention, as the nodes make them)")
    s.add_argument("--shards", type=int, default=1,
                   help="the network's label shards (the nodes' `shards` setting): above 1 "
                        "each record goes to its shards' node topics, as the SDK sends it "
                        "(default 1)")
    s.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    s.add_argument("--trigger-seconds", type=float, default=1.0,
                   help="micro-batch interval without --once (default 1)")
    s.add_argument("--starting-offsets", choices=("earliest", "latest"), default="earliest",
                   help="where a run without a checkpoint starts (default earliest)")
    s.add_argument("--accept-data-loss", action="store_true",
                   help="go on when retention deleted raw records the checkpoint had not "
                        "read (each gap is logged as an error; without this flag the "
                        "command stops, naming them)")
    s.add_argument("--max-offsets", type=int, default=None,
                   help="at most this many raw records per micro-batch")
    add_kafka_config_arg(s, SPARK_CLIENT)
    s.set_defaults(func=_cmd_spark_map)
