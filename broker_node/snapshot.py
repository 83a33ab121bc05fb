"""A node's state as a snapshot: captured, encoded as bytes, decoded and restored.

A restart starts from the latest snapshot and replays only the control messages after it
(:mod:`broker_node.recovery`), so recovery costs the live state, not the history.

A snapshot (:class:`SnapshotData`) holds what the state and the control memory need after
a restart:

* every live subscription: id, client and labels (CSR arrays);
* the clients in the order of the client bank (those with no live subscription too);
* per neighbour, the labels it advertised and has not withdrawn: applying them with
  ``BrokerState.on_link(neighbour, "advertise", labels)`` rebuilds the link state, since in
  ``exact`` mode the state is the same whatever the order of the operations that led to it
  (:func:`state_digest` compares two states);
* the memories of :class:`~broker_node.controls.Controls` that change what a later message
  does: the recently cancelled ids (both generations), and the unsubscriptions waiting for
  their subscription, kept as their messages and applied again on restore;
* the offsets of the control topics it covers: the state is exactly that of the control
  messages below them;
* the size ``(m, k)`` of each counting Bloom filter, which may have been rebuilt larger
  (:mod:`broker_node.resize`): the restored filters are made that size before they are
  filled, so a restarted node routes as before.

**The rule**: a snapshot covers only committed offsets. Its offsets are the node's
consumer positions taken right after a synchronous commit, when the group's committed
offsets equal them (checked with the group coordinator before each snapshot). A snapshot
ahead of the committed offsets would, after a crash, have the events re-read from the
uncommitted tail routed against a later state, and lose deliveries.

Encoding: one byte stream, a JSON header then the raw bytes of numpy arrays (no record per
subscription: bulk copies, both ways). A list of strings goes as one UTF-8 text joined by
NUL (or with the byte length of each when a string holds a NUL). Labels go as the offset
from the smallest one, in the narrowest unsigned type that holds them.

In ``paper`` mode the state depends on the order of the operations (the paper's CBF
rules), so a node in paper mode takes no snapshot and replays its history.
docs/architecture.md#repeats-and-recovery has the design and its measurements.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from confluent_kafka import Message

from broker_node.edge import EdgeRows
from broker_node.exceptions import BrokerError
from broker_node.inbox import message_headers, offset_of, topic_of
from broker_node.registry import take_rows
from broker_node.state import ADVERTISE, BrokerState
from connectors.recent import bounded_key

if TYPE_CHECKING:
    from broker_node.controls import Controls

__all__ = [
    "FORMAT",
    "RESTORE_ROWS",
    "SnapshotData",
    "capture",
    "decode",
    "encode",
    "restore",
    "state_digest",
    "unusable",
]

#: Version of the byte stream; a snapshot of another version is not used.
FORMAT = 1
_MAGIC = b"DLSSNAP\x01"
_LEN = struct.Struct(">I")
#: Subscriptions restored per ``subscribe_many`` call: the registry frees a batch's arrays
#: once all its rows are unsubscribed, so a restored state is kept in batches of this size.
RESTORE_ROWS = 65_536


@dataclass
class SnapshotData:
    """One node's state at a set of committed offsets (see the module text)."""

    node: str
    group: str
    neighbours: tuple[str, ...]
    covered: dict[str, int]
    clients: tuple[str, ...]
    sub_ids: list[str]
    sub_clients: np.ndarray  # index into ``clients``, one per subscription
    offsets: np.ndarray  # CSR: subscription i has labels[offsets[i]:offsets[i + 1]]
    labels: np.ndarray
    received: dict[str, np.ndarray] = field(default_factory=dict)
    cancelled_old: list[bytes] = field(default_factory=list)
    cancelled_new: list[bytes] = field(default_factory=list)
    pending: list[Message] = field(default_factory=list)
    #: cancelled subscriptions still in the state (the order rule): id -> (client, time ms)
    retiring: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: the highest link control sequence number applied from each neighbour
    applied_seq: dict[str, int] = field(default_factory=dict)
    #: the epoch of the newest link control applied from each neighbour
    link_epoch: dict[str, int] = field(default_factory=dict)
    #: the exact check's rows of the subscriptions, in their order (None: not kept)
    edge: EdgeRows | None = None
    #: (m, k) of each filter by name (FilterResizer.sizes; empty: the configured sizes)
    filters: dict[str, list[int]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.sub_ids)


def capture(state: BrokerState, controls: Controls, *, group: str,
            covered: dict[str, int]) -> SnapshotData:
    """The state and control memory of a node now, said to cover ``covered``.

    The caller keeps the rule of the module text: ``covered`` are committed offsets, and the
    state holds exactly the control messages below them.
    """
    # state.py is at its size limit: the registry is read directly.
    ids, owners, offsets, labels = state._registry.live()
    names = state.clients
    return SnapshotData(
        node=state.node_id, group=group, neighbours=state.neighbours, covered=dict(covered),
        clients=names, sub_ids=ids, sub_clients=owners, offsets=offsets,
        labels=labels, received={n: state.received_from(n) for n in state.neighbours},
        cancelled_old=list(controls.cancelled.old), cancelled_new=list(controls.cancelled.new),
        pending=[p.msg for p in controls.pending.values()],
        retiring=dict(controls.retiring), applied_seq=dict(controls.progress.applied_seq),
        link_epoch=dict(controls.link_epoch),
        edge=None if controls.edge is None else controls.edge.export(
            list(map(names.__getitem__, owners.tolist())), ids),
        filters=state.resizer.sizes(state))


def unusable(data: SnapshotData, state: BrokerState, group: str) -> str | None:
    """Why ``data`` cannot be restored into ``state`` (None: it can)."""
    if state.config.mode != "exact":
        return f"the node runs in {state.config.mode} mode (snapshots are for exact mode)"
    if data.node != state.node_id or data.group != group:
        return (f"it is of node {data.node!r} (group {data.group!r}), not {state.node_id!r} "
                f"(group {group!r})")
    if len(state) or state.clients:
        return "the state is not empty"
    if state.label_base is not None and state.label_space_size is not None:
        lo, hi = state.label_base, state.label_base + state.label_space_size
        for what, ls in [("subscriptions", data.labels), *data.received.items()]:
            if ls.size and (int(ls.min()) < lo or int(ls.max()) >= hi):
                return f"labels of {what} are outside this node's label space"
    return None


def restore(data: SnapshotData, state: BrokerState, controls: Controls) -> None:
    """Rebuild ``state`` and the memories of ``controls`` from ``data``.

    ``state`` must be empty and :func:`unusable` must have found nothing. The waiting
    unsubscriptions go first, into an empty state and memory, so that each waits again
    whatever else the snapshot holds (its id may be live by now, for another client or
    with a later timestamp). Clients are then registered in the snapshot's order (the same
    client bank indexes); the link state of a neighbour the node no longer has is dropped
    (its topic is no input). The filters are first made the size the snapshot recorded
    (where larger than configured) and checked once at the end, not during the load.
    """
    state.resizer.presize(state, data.filters)  # the filters as large as they had grown
    state.resizer.suspended = True  # no rebuild while loading: one check at the end
    try:
        _restore_state(data, state, controls)
    finally:
        state.resizer.suspended = False
    state.resizer.check_all(state)
    # bounded_key: a snapshot taken before keys were bounded may hold longer ones
    controls.cancelled.old = dict.fromkeys(map(bounded_key, data.cancelled_old))
    controls.cancelled.new = dict.fromkeys(map(bounded_key, data.cancelled_new))
    for sid, (client, cancelled_ms) in data.retiring.items():
        controls.retire(client, sid, cancelled_ms)
    for n, seq in data.applied_seq.items():
        if n in state.neighbours:
            controls.progress.on_link_seq(n, seq)
    controls.link_epoch.update({n: e for n, e in data.link_epoch.items()
                                if n in state.neighbours})


def _restore_state(data: SnapshotData, state: BrokerState, controls: Controls) -> None:
    """The subscriptions, the exact check's rows and the neighbours' labels of ``data``."""
    if data.pending:
        controls.apply(data.pending, replay=True)
    for name in data.clients:
        state.client_index(name)
    names, owners = data.clients, data.sub_clients
    for a in range(0, len(data), RESTORE_ROWS):
        b = min(len(data), a + RESTORE_ROWS)
        lo, hi = int(data.offsets[a]), int(data.offsets[b])
        state.subscribe_many([names[i] for i in owners[a:b].tolist()], data.sub_ids[a:b],
                             data.offsets[a:b + 1] - lo, data.labels[lo:hi])
    if controls.edge is not None:
        controls.edge.restore([names[i] for i in owners.tolist()], data.sub_ids, data.edge,
                              data.offsets, data.labels)
    for n, ls in data.received.items():
        if ls.size and n in state.neighbours:
            state.on_link(n, ADVERTISE, ls)


# -- bytes ------------------------------------------------------------------------------------
def encode(data: SnapshotData) -> bytes:
    """The snapshot as one byte stream (:func:`decode` reads it back)."""
    arrays: dict[str, np.ndarray] = {}
    meta: dict[str, Any] = {
        "node": data.node, "group": data.group, "neighbours": list(data.neighbours),
        "covered": data.covered, "received": list(data.received)}
    meta["clients_sep"] = _put_strings(arrays, "clients", data.clients)
    meta["ids_sep"] = _put_strings(arrays, "ids", data.sub_ids)
    arrays["owner"] = _narrow(data.sub_clients)
    arrays["lens"] = _narrow(np.diff(data.offsets))
    meta["labels_base"] = _put_labels(arrays, "labels", data.labels)
    meta["received_base"] = [_put_labels(arrays, f"recv{i}", ls)
                             for i, ls in enumerate(data.received.values())]
    _put_blobs(arrays, "cancelled_old", data.cancelled_old)
    _put_blobs(arrays, "cancelled_new", data.cancelled_new)
    meta["pending"] = _put_messages(arrays, "pending", data.pending)
    meta["retiring_ids_sep"] = _put_strings(arrays, "retiring_ids", list(data.retiring))
    meta["retiring_clients_sep"] = _put_strings(arrays, "retiring_clients",
                                                [c for c, _ in data.retiring.values()])
    arrays["retiring_ms"] = np.array([u for _, u in data.retiring.values()], dtype=np.int64)
    meta["applied_seq"] = data.applied_seq
    meta["filters"] = data.filters
    meta["link_epoch"] = data.link_epoch
    if data.edge is not None:
        e = data.edge
        meta["edge"] = {"numeric": e.bounds.shape[1], "words": [m.shape[1] for m in e.masks],
                        "sets": {str(i): t for i, t in e.sets.items()}}
        arrays["edge_index"] = _narrow(e.index)
        arrays["edge_bounds"] = e.bounds.reshape(-1)
        for k, m in enumerate(e.masks):
            arrays[f"edge_mask{k}"] = m.reshape(-1)
    header = json.dumps({"format": FORMAT, "meta": meta, "arrays": [
        [name, a.dtype.str, len(a)] for name, a in arrays.items()]}).encode()
    return b"".join([_MAGIC, _LEN.pack(len(header)), header,
                     *(np.ascontiguousarray(a).data for a in arrays.values())])


def decode(buf: bytes | bytearray | memoryview) -> SnapshotData:
    """The snapshot of a byte stream of :func:`encode`.

    Raises:
        BrokerError: Not such a stream, another format version, or cut short.
    """
    view = memoryview(buf)
    if bytes(view[:len(_MAGIC)]) != _MAGIC:
        raise BrokerError("not a node snapshot (bad magic bytes)", field="snapshot",
                          value=bytes(view[:len(_MAGIC)]).hex())
    start = len(_MAGIC) + _LEN.size
    (size,) = _LEN.unpack(view[len(_MAGIC):start])
    try:
        head = json.loads(bytes(view[start:start + size]))
        pos = start + size
        arrays: dict[str, np.ndarray] = {}
        for name, dtype, count in head["arrays"]:
            arrays[name] = np.frombuffer(view, dtype=np.dtype(dtype), count=count, offset=pos)
            pos += arrays[name].nbytes
        meta = head["meta"]
    except (ValueError, KeyError, TypeError) as exc:
        raise BrokerError(f"node snapshot unreadable: {exc}", field="snapshot",
                          value=len(view)) from exc
    if head.get("format") != FORMAT or pos != len(view):
        raise BrokerError(f"node snapshot of format {head.get('format')!r} and {len(view)} "
                          f"bytes, expected format {FORMAT} and {pos}", field="snapshot",
                          value=head.get("format"))
    lens = arrays["lens"].astype(np.int64)
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    return SnapshotData(
        node=meta["node"], group=meta["group"], neighbours=tuple(meta["neighbours"]),
        covered={str(k): int(v) for k, v in meta["covered"].items()},
        clients=tuple(_get_strings(arrays, "clients", meta["clients_sep"])),
        sub_ids=_get_strings(arrays, "ids", meta["ids_sep"]),
        sub_clients=arrays["owner"].astype(np.int64), offsets=offsets,
        labels=_get_labels(arrays, "labels", meta["labels_base"]),
        received={n: _get_labels(arrays, f"recv{i}", base) for i, (n, base) in
                  enumerate(zip(meta["received"], meta["received_base"], strict=True))},
        cancelled_old=_get_blobs(arrays, "cancelled_old"),
        cancelled_new=_get_blobs(arrays, "cancelled_new"),
        pending=_get_messages(arrays, "pending", meta["pending"]),
        retiring=_get_retiring(arrays, meta),
        applied_seq={str(k): int(v) for k, v in meta.get("applied_seq", {}).items()},
        link_epoch={str(k): int(v) for k, v in meta.get("link_epoch", {}).items()},
        edge=_get_edge(arrays, meta.get("edge")),
        filters={str(k): [int(x) for x in v] for k, v in meta.get("filters", {}).items()})


def _get_edge(arrays: dict[str, np.ndarray], meta: dict[str, Any] | None) -> EdgeRows | None:
    if meta is None:
        return None
    index = arrays["edge_index"].astype(np.int64)
    n = len(index)
    bounds = arrays["edge_bounds"].reshape(n, int(meta["numeric"]), 2)
    masks = [arrays[f"edge_mask{k}"].reshape(n, int(w)) for k, w in enumerate(meta["words"])]
    return EdgeRows(index, bounds, masks, {int(i): str(t) for i, t in meta["sets"].items()})


def _get_retiring(arrays: dict[str, np.ndarray], meta: dict[str, Any]
                  ) -> dict[str, tuple[str, int]]:
    if "retiring_ms" not in arrays:
        return {}
    ids = _get_strings(arrays, "retiring_ids", meta["retiring_ids_sep"])
    clients = _get_strings(arrays, "retiring_clients", meta["retiring_clients_sep"])
    return {sid: (c, int(u)) for sid, c, u in zip(ids, clients,
                                                  arrays["retiring_ms"].tolist(), strict=True)}


def _narrow(a: np.ndarray) -> np.ndarray:
    """Non-negative integers in the narrowest unsigned type that holds them."""
    a = np.asarray(a)
    top = int(a.max()) if a.size else 0
    for t in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(t).max:
            return a.astype(t)
    return a.astype(np.uint64)


def _put_labels(arrays: dict[str, np.ndarray], name: str, labels: np.ndarray) -> int:
    """Labels as offsets from the smallest one (returned), narrowed."""
    ls = np.asarray(labels, dtype=np.uint64)
    base = int(ls.min()) if ls.size else 0
    arrays[name] = _narrow(ls - np.uint64(base))
    return base


def _get_labels(arrays: dict[str, np.ndarray], name: str, base: int) -> np.ndarray:
    return arrays[name].astype(np.uint64) + np.uint64(base)


def _put_strings(arrays: dict[str, np.ndarray], name: str, items: Sequence[str]) -> bool:
    """Strings as one UTF-8 text; True when joined by NUL (else with byte lengths)."""
    text = "\0".join(items)
    if text.count("\0") == max(0, len(items) - 1):
        raw = text.encode()
        arrays[name] = np.frombuffer(raw, dtype=np.uint8)
        arrays[f"{name}.n"] = np.array([len(items)], dtype=np.uint64)
        return True
    _put_blobs(arrays, name, [s.encode() for s in items])
    return False


def _get_strings(arrays: dict[str, np.ndarray], name: str, sep: bool) -> list[str]:
    if not sep:
        return [b.decode() for b in _get_blobs(arrays, name)]
    if not int(arrays[f"{name}.n"][0]):
        return []
    return arrays[name].tobytes().decode().split("\0")


def _put_blobs(arrays: dict[str, np.ndarray], name: str, items: Sequence[bytes]) -> None:
    arrays[name] = np.frombuffer(b"".join(items), dtype=np.uint8)
    arrays[f"{name}.lens"] = _narrow(np.fromiter(map(len, items), dtype=np.int64,
                                                 count=len(items)))


def _get_blobs(arrays: dict[str, np.ndarray], name: str) -> list[bytes]:
    raw = arrays[name].tobytes()
    ends = np.cumsum(arrays[f"{name}.lens"], dtype=np.int64).tolist()
    return [raw[a:b] for a, b in zip([0, *ends], ends, strict=False)]


def _put_messages(arrays: dict[str, np.ndarray], name: str, msgs: Sequence[Message]
                  ) -> dict[str, Any]:
    """Consumed messages (the unsubscriptions waiting in a snapshot) as arrays.

    Returns what goes in the JSON header: their topics, and the headers of the few that
    have any (base64).
    """
    topics = sorted({topic_of(m) for m in msgs})
    index = {t: i for i, t in enumerate(topics)}
    stamps = [m.timestamp() for m in msgs]
    arrays[f"{name}.topic"] = np.array([index[topic_of(m)] for m in msgs], dtype=np.int64)
    arrays[f"{name}.partition"] = np.array([m.partition() or 0 for m in msgs], np.int64)
    arrays[f"{name}.offset"] = np.array([offset_of(m) for m in msgs], dtype=np.int64)
    arrays[f"{name}.ts"] = np.array([ts for _, ts in stamps], dtype=np.int64)
    arrays[f"{name}.tstype"] = np.array([kind for kind, _ in stamps], dtype=np.int64)
    _put_blobs(arrays, f"{name}.value", [m.value() or b"" for m in msgs])
    headers = {str(i): [[k, base64.b64encode(v).decode()] for k, v in message_headers(m)]
               for i, m in enumerate(msgs) if m.headers()}
    return {"topics": topics, "headers": headers}


def _get_messages(arrays: dict[str, np.ndarray], name: str, meta: dict[str, Any]
                  ) -> list[Message]:
    topics, headers = meta["topics"], meta["headers"]
    values = _get_blobs(arrays, f"{name}.value")
    cols = zip(arrays[f"{name}.topic"].tolist(), arrays[f"{name}.partition"].tolist(),
               arrays[f"{name}.offset"].tolist(), arrays[f"{name}.tstype"].tolist(),
               arrays[f"{name}.ts"].tolist(), values, strict=True)
    return [Message(topic=topics[t], partition=p, offset=o, timestamp=(kind, ts), value=v,
                    headers=[(k, base64.b64decode(h)) for k, h in headers.get(str(i), [])])
            for i, (t, p, o, kind, ts, v) in enumerate(cols)]


# -- comparison -------------------------------------------------------------------------------
def state_digest(state: BrokerState) -> str:
    """A hash of what a state routes by, equal for equal states however they were built.

    Covers every live subscription (id, client name, labels) and per neighbour the labels
    it advertised to us and those we advertise to it. Not the bank order of clients, nor
    the clients with no live subscription (they match nothing; whether a client whose
    subscriptions were all cancelled was ever registered depends on the order its messages
    were read in), nor the counters (statistics of the history).
    """
    h = hashlib.sha256()
    ids, owners, offsets, labels = state._registry.live()
    order = np.argsort(np.array(ids, dtype=object)) if ids else np.zeros(0, dtype=np.int64)
    names = state.clients
    _feed(h, "\0".join(ids[i] for i in order.tolist()).encode())
    _feed(h, "\0".join(names[owners[i]] for i in order.tolist()).encode())
    sorted_offsets, sorted_labels = take_rows(offsets, labels, order)
    _feed(h, np.diff(sorted_offsets).astype(np.int64).tobytes())
    _feed(h, sorted_labels.astype(np.uint64).tobytes())
    for n in sorted(state.neighbours):
        _feed(h, n.encode())
        _feed(h, np.sort(state.received_from(n)).astype(np.uint64).tobytes())
        _feed(h, np.sort(state.advertised_to(n)).astype(np.uint64).tobytes())
    return h.hexdigest()


def _feed(h: Any, raw: bytes) -> None:
    """One length-prefixed part into the hash (parts cannot run into each other)."""
    h.update(struct.pack(">Q", len(raw)))
    h.update(raw)
