"""A content router as a Kafka user writes it with quixstreams: every subscription checked.

Reads the events the dlsroute SDK publishes (RawEvent, Avro single-object encoding: two
marker bytes and the schema's 8-byte fingerprint, then the body) and writes, exactly once,
one JSON message per event that matches something: its id, its attributes and its
clients (each once). The subscriptions are columns in a ``.npz`` file (``benchmarks.node``
writes it): ``syms`` (n, symbols) bool, ``price_lo/hi``, ``change_lo/hi`` (-inf/inf where
free), ``volume_lo`` (-1 where free), ``owners`` (client index), ``clients``, ``symbols``.

    python quix_router.py --bootstrap HOST:PORT --input T --output T --group G \
        --subs subs.npz --schema RawEvent.avsc [--commit-interval S] [--commit-every N]
        [--poll-timeout S]

Runs in ``benchmarks.node``'s own venv (quixstreams, fastavro, numpy); imports nothing of
dlsroute.
"""

import argparse
import io
import json

import fastavro
import numpy as np
from quixstreams import Application


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("--bootstrap", "--input", "--output", "--group", "--subs", "--schema"):
        ap.add_argument(name, required=True)
    ap.add_argument("--commit-interval", type=float, default=5.0)
    ap.add_argument("--commit-every", type=int, default=0)
    ap.add_argument("--poll-timeout", type=float, default=1.0)
    a = ap.parse_args()

    s = np.load(a.subs)
    by_sym = {sym: np.ascontiguousarray(s["syms"][:, j])  # one column per symbol
              for j, sym in enumerate(s["symbols"].tolist())}
    p_lo, p_hi = s["price_lo"], s["price_hi"]
    c_lo, c_hi = s["change_lo"], s["change_hi"]
    v_lo, owners, clients = s["volume_lo"], s["owners"], s["clients"]
    with open(a.schema) as f:
        schema = fastavro.parse_schema(json.load(f))

    def route(value: bytes) -> dict:
        if value[:2] != b"\xc3\x01":
            raise ValueError("not an Avro single-object message")
        event: dict = fastavro.schemaless_reader(  # type: ignore[assignment]
            io.BytesIO(value[10:]), schema)
        at = event["attrs"]
        price, change, volume = at["price"], at["change"], at["volume"]
        hit = (by_sym[at["sym"]] & (p_lo <= price) & (price <= p_hi)
               & (c_lo <= change) & (change <= c_hi) & (v_lo <= volume))
        names = clients[np.unique(owners[hit])].tolist()
        return {"id": event["id"], "attrs": at, "clients": names}

    app = Application(broker_address=a.bootstrap, consumer_group=a.group,
                      auto_offset_reset="earliest", processing_guarantee="exactly-once",
                      commit_interval=a.commit_interval, commit_every=a.commit_every,
                      consumer_poll_timeout=a.poll_timeout)
    events = app.topic(a.input, value_deserializer="bytes")
    deliveries = app.topic(a.output, value_serializer="json")
    sdf = app.dataframe(events).apply(route).filter(lambda d: bool(d["clients"]))
    sdf.to_topic(deliveries)
    app.run()


if __name__ == "__main__":
    main()
