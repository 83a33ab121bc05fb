"""What the harness's processes share: the content space, random predicates, JSONL files."""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
from pathlib import Path
from typing import IO, Any

#: A small content space: few labels, so that subscriptions overlap and events match often.
SPACE: dict[str, Any] = {"attributes": [
    {"name": "sym", "type": "discrete", "values": ["A", "B", "C", "D"]},
    {"name": "price", "type": "numeric", "low": 0, "high": 100, "granules": 8}]}
SYMS: tuple[str, ...] = tuple(SPACE["attributes"][0]["values"])
PRICE_LOW, PRICE_HIGH = 0.0, 100.0


def now() -> float:
    """Wall-clock seconds: every process of a run shares the machine's clock."""
    return time.time()


def random_where(rng: random.Random) -> list[dict[str, Any]]:
    """A random subscription in JSON form: a set of symbols and a price interval."""
    syms = sorted(rng.sample(SYMS, rng.randint(1, 2)))
    low = round(rng.uniform(PRICE_LOW, 70.0), 2)
    high = round(min(PRICE_HIGH, low + rng.uniform(10.0, 60.0)), 2)
    return [{"attr": "sym", "op": "in", "values": syms},
            {"attr": "price", "op": "between", "low": low, "high": high}]


def random_event(rng: random.Random) -> dict[str, Any]:
    """Random event attributes over :data:`SPACE`."""
    return {"sym": rng.choice(SYMS), "price": round(rng.uniform(PRICE_LOW, PRICE_HIGH), 3)}


class JsonLines:
    """An append-only JSONL file, flushed after every line (a SIGKILL loses at most one).

    Safe for the threads of one process (a line is written in one call under the GIL).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        cut = False
        if path.exists() and path.stat().st_size:
            with path.open("rb") as fh:
                fh.seek(-1, os.SEEK_END)
                cut = fh.read(1) != b"\n"
        self._fh: IO[str] = path.open("a", encoding="utf-8", buffering=1)
        if cut:  # the last process was killed mid-line: end that line, it stays unread
            self._fh.write("\n")

    def write(self, **rec: Any) -> None:
        self._fh.write(json.dumps(rec, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._fh.close()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file; a last line cut by a SIGKILL is skipped."""
    if not path.exists():
        return []
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break  # cut short by a kill
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def stop_requested(run_dir: Path, what: str) -> bool:
    """True once the harness created ``run_dir/<what>`` (e.g. ``stop-churn``)."""
    return os.path.exists(run_dir / what)


def process_args(doc: str | None, name_flag: str, argv: list[str] | None,
                 more: dict[str, dict[str, Any]]) -> argparse.Namespace:
    """The command line of a client or publisher process (``more``: its own options).

    Also sends its warnings to stderr (the harness keeps one log file per process).
    """
    p = argparse.ArgumentParser(description=doc)
    for flag in ("--bootstrap", "--node", name_flag, "--prefix", "--space"):
        p.add_argument(flag, required=True)
    p.add_argument("--run-dir", required=True, type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shards", type=int, default=1,
                   help="label shards of the network (the SDK's Client(shards=))")
    for flag, kwargs in more.items():
        p.add_argument(flag, **kwargs)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    return p.parse_args(argv)


class RawWriter:
    """Writes JSON records to the raw topics the Spark mapping job reads (``dls.raw.*``).

    The path without the SDK's mapping: ``spark-map`` maps each record to its node's topic.
    ``subscribe`` and ``unsubscribe`` return once Kafka acknowledged the raw record; the
    client then waits for the node's acknowledgement of a subscription
    (:mod:`benchmarks.chaos.client`).
    """

    def __init__(self, bootstrap: str, prefix: str, node: str, client: str,
                 **kafka: Any) -> None:
        from confluent_kafka import Producer

        from connectors.kafka import producer_config
        from connectors.topics import Topics

        self.node, self.client, self.topics = node, client, Topics(prefix)
        self.producer = Producer(producer_config(bootstrap, **kafka))

    def _record(self, **fields: Any) -> bytes:
        return json.dumps({"node": self.node, "client": self.client, **fields}).encode()

    def event(self, eid: str, attrs: dict[str, Any]) -> None:
        self.producer.produce(self.topics.raw_events, self._record(id=eid, attrs=attrs))
        self.producer.poll(0)

    def subscribe(self, sid: str, where: Any) -> None:
        self._send(self.topics.raw_subscriptions, self._record(id=sid, where=where))

    def unsubscribe(self, sid: str) -> None:
        self._send(self.topics.raw_unsubscriptions, self._record(id=sid))

    def _send(self, topic: str, value: bytes, timeout: float = 30.0) -> None:
        self.producer.produce(topic, value)
        if self.producer.flush(timeout):
            raise TimeoutError(f"{topic}: not acknowledged within {timeout} s")

    def flush(self, timeout: float) -> int:
        return int(self.producer.flush(timeout))
