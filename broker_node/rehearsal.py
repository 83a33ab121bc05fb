"""Every kernel a node calls, compiled before its first batch: a short rehearsal, no Kafka.

:func:`dls.bank.warm_up_kernels` compiles the core's kernels on tiny inputs of the types a
broker passes. The exact check at the edge (the label index and its slices, the edge walk,
the reader of events' numbers) gets its types only from the node's own path, so
:func:`rehearse` walks that path: a node in this process, whose producer drops what it is
given, takes subscriptions as the SDK sends them (compiled rows and where texts, simple and
general), routes events, drops subscriptions, is rebuilt from its own export (the bulk
lay-out of a restart) and does all of it again with its cells sliced.

Without it, each node process compiles these kernels on its first subscription and its
first event: about 10 s on an idle machine, minutes on a loaded one, while the node routes
nothing. Numba keeps what it compiles on disk (:mod:`dls._jit`), so an image build
rehearses once (docker/images.sh) and a node start then loads the kernels in about a
second (:meth:`broker_node.service.NodeService.start`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Message

from broker_node import snapshot
from broker_node.config import NodeSettings
from connectors.serde import (
    encode_label_subscription,
    encode_label_unsubscription,
    encode_raw_event,
)
from connectors.topics import HEADER_EVENT_ID, HEADER_LABEL, HEADER_ORIGIN, encode_label
from dls import _jit
from dls.bank import warm_up_kernels
from dls.exact_row import RowLayout
from dls.mapping import event_label
from dls.predicates import Subscription
from dls.space import ContentSpace

__all__ = ["rehearse"]

log = logging.getLogger(__name__)

Output = tuple[bytes, list[tuple[str, str | bytes | None]]]  # a message's value and headers

#: Every kind of attribute an edge row or a general subscription holds.
SPACE = {"attributes": [
    {"name": "sym", "type": "discrete", "values": ["IBM", "MSFT", "TSLA", "AAPL"]},
    {"name": "price", "type": "numeric", "low": 0, "high": 1000, "granules": 16},
    {"name": "change", "type": "numeric", "low": -20, "high": 20, "granules": 4,
     "optional": True},
    {"name": "volume", "type": "numeric", "low": 0, "high": 1_000_000,
     "breakpoints": [1000, 10_000, 100_000]},
    {"name": "venue", "type": "string", "breakpoints": ["m"]},
    {"name": "trader", "type": "hashed", "buckets": 4},
]}

#: Where texts: simple rows (sent compiled, as the SDK does) and general ones (read as text).
WHERES = (
    "sym in (IBM, TSLA) and price between 100.5 and 180.25 and change >= -1.5",
    "price < 420.0",
    "sym = MSFT and volume between 2000 and 50000",
    "price between 10.0 and 12.0 or change > 3.0",
    "sym != IBM and venue = 'nyse' and trader = 'kim'",
    "price >= 990.5",
)


class _DropProducer:
    """A producer that takes every output and keeps none."""

    def produce(self, *args: Any, **kwargs: Any) -> None:
        """Take one output (dropped)."""

    def poll(self, timeout: float = 0) -> int:
        """Nothing is ever pending."""
        return 0


_DONE = threading.Lock()
_done = False


def rehearse(node_class: Callable[..., Any]) -> float:
    """Compile (or load from the disk cache) every kernel a node calls; returns seconds.

    ``node_class``: :class:`broker_node.service.NodeService` (given by the caller: the
    service rehearses at its start, and this module imports nothing that imports it).

    Once per process (a kernel loaded stays loaded): 0.0 when it ran already, and on the
    numpy reference path (``DLS_NO_JIT=1``), where nothing compiles.
    """
    global _done
    if not _jit.ENABLED:
        return 0.0
    with _DONE:  # engines of one process start together: one rehearses, the rest wait
        if _done:
            return 0.0
        t0 = time.perf_counter()
        warm_up_kernels()
        space = ContentSpace.from_spec(SPACE)
        try:
            for slices in (1, 0, 8):  # unsliced, sliced as the index chooses, fixed
                _rehearse_node(node_class, space, slices)
        except Exception:  # a start slower by what compiles later, never a node down
            log.exception("the rehearsal failed: the kernels it did not reach compile on "
                          "first use (please report this)")
        _done = True
        return time.perf_counter() - t0


def _rehearse_node(node_class: Callable[..., Any], space: ContentSpace, slices: int
                   ) -> None:
    """One node's subscriptions, events, removals and rebuild, cut ``slices`` ways (0: auto)."""
    # Nothing from the environment: a node's DLS_NODE_* settings are not the rehearsal's
    # (DLS_NODE_SHARDS=2 would refuse it, DLS_NODE_EXACT_DELIVERY=false skip the edge).
    settings = NodeSettings(node="R", neighbours=("S",), space=Path("rehearsal.json"),
                            delivery="at_least_once", index_slices=slices,
                            shared_delivery_partitions=1,  # no topic to create
                            _env_prefix="DLS_REHEARSAL_READS_NO_ENVIRONMENT_")
    node = node_class(settings, space)
    node.connect(_DropProducer())
    topics, layout, offset = node.topics, RowLayout(space), 0

    def messages(topic: str, values: list[Output]) -> list[Message]:
        nonlocal offset
        out = []
        for value, headers in values:
            offset += 1
            out.append(Message(topic=topic, partition=0, offset=offset, value=value,
                               headers=headers))
        return out

    subs: list[Output] = []
    for i, where in enumerate(WHERES * 7):
        sub = Subscription(space, where)
        row = layout.of(sub) if i % 2 == 0 else None
        subs.append((encode_label_subscription(f"c{i % 5}", f"s{i}", sub.labels(), str(sub),
                                               row), []))
    # the first batch is laid out at once (over dls.label_index.BULK labels), the second
    # small beside it is inserted into the lists
    bulk = len(WHERES) * 6
    node.process(messages(topics.node_subscribe("R"), subs[:bulk]))
    node.process(messages(topics.node_subscribe("R"), subs[bulk:]))
    publish = topics.node_publish("R")
    node.process(messages(publish, _events(space, "a")))
    node.process(messages(topics.node_unsubscribe("R"), [
        (encode_label_unsubscription(f"c{i % 5}", f"s{i}"), []) for i in range(0, 18, 4)]))
    node.process(messages(publish, _events(space, "b")))
    node.router.removed_later.settle()  # as the loop does when idle
    node.process(messages(publish, _events(space, "c")))
    _rebuilt(node).process(messages(publish, _events(space, "d")))
    # What the loop reaches only at scale or by a fallback, called as it calls them: the
    # index compacted, cut again, and candidates checked without it (the edge walk).
    edge = node.router.edge
    assert edge is not None and edge.index is not None  # noqa: S101 - exact delivery is on
    edge.index.labels.compact()
    if slices != 1:
        edge.index.labels.reslice(2)
    labels = [event_label(space, {"sym": "IBM", "price": p, "volume": 5000, "venue": "a",
                                  "trader": "kim"}) for p in (105.0, 150.0, 419.0)]
    edge.verdicts_many(labels, [edge.client_names] * len(labels))


def _events(space: ContentSpace, run: str) -> list[Output]:
    """64 events as the SDK publishes them (ids unique to ``run``: none is a repeat)."""
    rng = np.random.default_rng(7)
    out: list[Output] = []
    for i in range(64):
        attrs: dict[str, Any] = {
            "sym": ("IBM", "MSFT", "TSLA", "AAPL")[i % 4],
            "price": float(rng.integers(0, 100_000)) / 100,
            "volume": int(rng.integers(0, 1_000_000)), "venue": "nyse", "trader": "kim"}
        if i % 3:
            attrs["change"] = float(rng.uniform(-20, 20))
        eid = f"{run}{i}"
        out.append((encode_raw_event("R", "pub", eid, attrs), [
            (HEADER_LABEL, encode_label(event_label(space, attrs))),
            (HEADER_ORIGIN, b"R/pub"), (HEADER_EVENT_ID, eid.encode())]))
    return out


def _rebuilt(node: Any) -> Any:
    """A second node restored from the first one's snapshot, as a restart lays it out."""
    data = snapshot.capture(node.state, node.controls, group="rehearsal", covered={})
    again = type(node)(node.settings, node.space)
    again.connect(_DropProducer())
    snapshot.restore(snapshot.decode(snapshot.encode(data)), again.state, again.controls)
    return again
