"""What TLS and SASL cost: the one-partition node on the secure profile beside the plaintext one.

Run (both local brokers up: ``make kafka-up`` and ``make kafka-up SECURE=1``)::

    .venv/bin/python -m benchmarks.secure --bootstrap 127.0.0.1:9092 \\
        --secure-bootstrap 127.0.0.1:9392 \\
        --secure-config .cache/kafka/secure/admin.properties [--events N] [--rounds R]
        [--node-config FILE] [--out benchmarks/results/secure.json]

Each round, on each profile in turn (the order alternates, so that drift of the shared
machine hits both alike), under a fresh topic prefix:

1. ``--subscriptions`` subscriptions of as many clients (a random box each) are produced
   to node A's subscribe topic; node A (no neighbours, exactly once, one partition per
   topic, default settings) starts and applies them (each matches about 1% of the events:
   with 1,000 of them an event goes to about ten clients). Then ``--events`` events (d = 3
   uniform attributes, 32 cells each) are produced to its publish topic, as
   ``Client.publish`` writes them, in two halves: both systems read the first (a warm-up:
   the first transactions to hundreds of fresh delivery partitions stall), then the
   second, which is measured.
2. ``passthrough``: a consumer (read_committed) and a transactional producer forward every
   event to one topic, per batch in one transaction: the loop of the node without DLS.
3. ``dls``: the node routes every event.

Both read the same events with the same batch size. ``throughput`` is events/s over the
window of :func:`benchmarks.kafka.window`; the records also hold the median over batches.
On the secure profile every Kafka client connects over SASL_SSL with SCRAM-SHA-512: the
passthrough and the workload's writers with ``--secure-config`` (a super user), the node
under a principal of its own with exactly a node's ACLs, made for the round by
:func:`dlsroute.access.add_principal` and removed after (``--node-config FILE`` uses that
file instead). The ratio
``secure / plaintext`` of each system's median throughput over the rounds is the cost of
TLS and SASL; ``dls / passthrough`` on each profile says whether the node keeps its share.

Output: ``secure.json`` (records ``{"benchmark", "system", "params", "metric", "value",
"unit"}``) and ``secure.meta.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Producer

from benchmarks.core import write_results
from benchmarks.kafka import delete_run_topics, drive, passthrough, produce_all, window
from broker_node.config import NodeSettings
from broker_node.service import NodeService
from connectors.kafka import ensure_topics, producer_config
from connectors.kafka_config import load_kafka_config
from connectors.serde import encode_label_subscription, encode_raw_event
from connectors.topics import HEADER_EVENT_ID, HEADER_LABEL, HEADER_ORIGIN, Topics, encode_label
from dls.mapping import event_label
from dls.predicates import Subscription
from dls.space import ContentSpace
from dlsroute import access

__all__ = ["main", "run_round"]

log = logging.getLogger("dlsroute.bench.secure")

DEFAULT_OUT = Path("benchmarks/results/secure.json")
SPEC = {"attributes": [{"name": f"a{i}", "type": "numeric", "low": 0, "high": 1000,
                        "granules": 32} for i in range(3)]}


def _workload(space: ContentSpace, n_events: int, n_subs: int, seed: int
              ) -> tuple[list[bytes], list[list[tuple[str, bytes]]], list[bytes]]:
    """Events (values and headers, as ``Client.publish`` writes them) and subscriptions."""
    rng = np.random.default_rng(seed)
    values, headers = [], []
    for i, row in enumerate(rng.integers(0, 1000, size=(n_events, 3))):
        attrs = {f"a{j}": int(v) for j, v in enumerate(row)}
        eid = f"e{i}"
        values.append(encode_raw_event("A", "pub", eid, attrs))
        headers.append([(HEADER_LABEL, encode_label(event_label(space, attrs))),
                        (HEADER_ORIGIN, b"A/pub"), (HEADER_EVENT_ID, eid.encode())])
    subs = []
    for i in range(n_subs):  # a box of about 22% per side: ~1% of the events match
        lo = rng.integers(0, 785, size=3)
        where = " and ".join(f"a{j} between {int(lo[j])} and {int(lo[j]) + 215}"
                             for j in range(3))
        labels = Subscription(space, where).labels()
        subs.append(encode_label_subscription(f"c{i}", f"s{i}", labels, None))
    return values, headers, subs


def run_round(profile: str, bootstrap: str, kafka: Mapping[str, str], node_config: Path | None,
              space_path: Path, work: tuple[list[bytes], list[Any], list[bytes]],
              batch_size: int) -> list[dict[str, Any]]:
    """One round on one profile: passthrough, then the node; its records."""
    values, headers, subs = work
    prefix = f"sb{uuid.uuid4().hex[:8]}"
    t = Topics(prefix)
    kafka = dict(kafka)
    publish, out_topic = t.node_publish("A"), f"{prefix}.passthrough"
    ensure_topics(bootstrap, [publish, t.node_subscribe("A"), out_topic], kafka=kafka)
    producer = Producer(producer_config(bootstrap, **kafka))
    produce_all(producer, t.node_subscribe("A"), subs)
    n = len(values)
    params = {"profile": profile, "events": n - n // 2, "subscriptions": len(subs),
              "batch_size": batch_size}
    records: list[dict[str, Any]] = []

    def record(system: str, win: Any) -> None:
        for metric, value, unit in [("throughput", win.rate, "events/s"),
                                    ("throughput_median_batch", win.median_rate, "events/s"),
                                    ("messages_out", win.messages, "messages"),
                                    ("message_throughput", win.message_rate, "messages/s")]:
            records.append({"benchmark": "secure", "system": system, "params": params,
                            "metric": metric, "value": value, "unit": unit})
        log.info("%-9s %-12s %9.0f events/s (median batch %.0f)", profile, system, win.rate,
                 win.median_rate)

    principal = None
    if node_config is None and kafka:  # the node under a principal of its own, as deployed
        principal = f"node.A-{prefix}"
        node_config = access.add_principal(bootstrap, dict(kafka), principal,
                                           access.node_grants(t, "A"),
                                           out_dir=space_path.parent)
    settings = NodeSettings(node="A", space=space_path, bootstrap=bootstrap,
                            topic_prefix=prefix, batch_size=batch_size,
                            kafka_config=node_config, snapshot_every_messages=0)
    service = NodeService(settings)
    half = n // 2
    try:
        service.start()  # the node's loop runs only while driven, below
        drive(service, lambda: len(service.state) >= len(subs), 300, "subscriptions")
        # The first half warms both up (the first transactions to hundreds of fresh
        # delivery partitions stall); the second half is measured.
        for part, measured in ((slice(0, half), False), (slice(half, n), True)):
            produce_all(producer, publish, values[part], headers[part])
            m = len(values[part])
            samples = passthrough(bootstrap, publish, f"{prefix}-pass", m, batch_size, 0.1,
                                  transactional=True, out_topic=out_topic, kafka=kafka)
            if measured:
                record("passthrough", window(samples, m))
            target = service.metrics.events_in + m
            samples = drive(service, lambda t=target: service.metrics.events_in >= t, 300,
                            "events")
            if measured:
                record("dls", window(samples, m))
    finally:
        service.close()
        if principal is not None:
            access.remove_principal(bootstrap, dict(kafka), principal)
    delete_run_topics(bootstrap, prefix, kafka=kafka)
    return records


def summary(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median throughput of each system on each profile, and the ratios."""
    out: list[dict[str, Any]] = []
    med: dict[tuple[str, str], float] = {}
    for system in ("passthrough", "dls"):
        for profile in ("plaintext", "secure"):
            vals = [r["value"] for r in records if r["system"] == system
                    and r["metric"] == "throughput" and r["params"]["profile"] == profile]
            if vals:
                med[system, profile] = float(np.median(vals))
                out.append({"benchmark": "secure", "system": system,
                            "params": {"profile": profile, "rounds": len(vals)},
                            "metric": "throughput_median", "value": med[system, profile],
                            "unit": "events/s"})
        if (system, "plaintext") in med and (system, "secure") in med:
            out.append({"benchmark": "secure", "system": system, "params": {},
                        "metric": "secure_over_plaintext",
                        "value": med[system, "secure"] / med[system, "plaintext"],
                        "unit": "ratio"})
    for profile in ("plaintext", "secure"):
        if ("dls", profile) in med and ("passthrough", profile) in med:
            out.append({"benchmark": "secure", "system": "dls", "params": {"profile": profile},
                        "metric": "dls_over_passthrough",
                        "value": med["dls", profile] / med["passthrough", profile],
                        "unit": "ratio"})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run the rounds and write the records."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092", help="the plaintext broker")
    ap.add_argument("--secure-bootstrap", default="127.0.0.1:9392", help="the secure broker")
    ap.add_argument("--secure-config", type=Path,
                    default=Path(".cache/kafka/secure/admin.properties"),
                    help="librdkafka settings for the secure broker (its admin's, or any "
                         "principal allowed the topics)")
    ap.add_argument("--node-config", type=Path, default=None,
                    help="the node's settings on the secure broker (default: a node principal "
                         "made for each round with --secure-config)")
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--subscriptions", type=int, default=1_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=1_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--profiles", type=lambda v: v.split(","), default=["plaintext", "secure"],
                    help="comma-separated: plaintext, secure (default both)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("dlsroute").setLevel(logging.WARNING)
    log.setLevel(logging.INFO)
    started, t0 = datetime.now(UTC).isoformat(timespec="seconds"), time.monotonic()
    secure_kafka = (load_kafka_config(args.secure_config) if "secure" in args.profiles
                    else {})
    with tempfile.TemporaryDirectory() as tmp:
        space_path = Path(tmp) / "space.json"
        space_path.write_text(json.dumps(SPEC))
        space = ContentSpace.from_json(space_path)
        work = _workload(space, args.events, args.subscriptions, args.seed)
        profiles = {"plaintext": (args.bootstrap, {}, None),
                    "secure": (args.secure_bootstrap, secure_kafka, args.node_config)}
        records: list[dict[str, Any]] = []
        for r in range(args.rounds):
            order = ["plaintext", "secure"] if r % 2 == 0 else ["secure", "plaintext"]
            for profile in (p for p in order if p in args.profiles):
                bootstrap, kafka, node_config = profiles[profile]
                records += run_round(profile, bootstrap, kafka, node_config, space_path,
                                     work, args.batch_size)
    records += summary(records)
    for rec in records:
        if rec["metric"] in ("secure_over_plaintext", "dls_over_passthrough"):
            log.info("%s %s %s: %.2f", rec["system"], rec["params"], rec["metric"],
                     rec["value"])
    write_results(args.out, records, benchmark="secure", module="benchmarks.secure",
                  argv=argv, started=started, wall=time.monotonic() - t0,
                  settings=vars(args) | {"out": str(args.out),
                                         "secure_config": str(args.secure_config),
                                         "node_config": str(args.node_config)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
