"""How a node gets its state back at start: its latest snapshot, then its control tail.

The state lives in memory. Now and then, right after a synchronous commit, the node writes
a snapshot of it to its snapshot topic (:class:`Snapshotter`; what a snapshot holds, and the
rule that it covers only committed offsets, are in :mod:`broker_node.snapshot`). At start
(:func:`recover`) it reads its latest complete snapshot, rebuilds the state from it in bulk,
then re-reads its control topics (subscribe, unsubscribe, inbound links; kept forever) from
the snapshot's offsets up to its group's committed offsets and applies them in timestamp
order without producing anything (those outputs were produced before). Without a usable
snapshot it re-reads them from the beginning, as before snapshots existed. The loop then
resumes from the committed offsets. A restart thus costs the live state plus the tail since
the last snapshot, which the snapshot settings bound, not the history.

No time wall: a recovering node logs its progress every :data:`PROGRESS_LOG_S` seconds and
keeps going as long as it reads; only a broker that gives nothing for ``recovery_stall_s``
stops it with an error.

The snapshot topic (``Topics.node_snapshot``) is compacted and has two partitions.
Partition 0 holds the chunks of a snapshot's byte stream (:data:`CHUNK_BYTES` each, under
Kafka's default message limit), keyed ``A/<i>`` or ``B/<i>``: a new snapshot goes to the
slot the current manifest does not name, and the chunks of that slot beyond its count get
tombstones. Partition 1 holds the manifests, keyed ``manifest``, each written once every
chunk of its snapshot is acknowledged: the last record of partition 1 is the latest
complete snapshot, and a crash while writing one leaves the previous one whole. A manifest
names the offsets of its chunks, so recovery reads one snapshot, however many older ones
compaction has not removed yet. docs/architecture.md#repeats-and-recovery has the
measurements.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from broker_node.committers import Committer
from broker_node.config import NodeSettings
from broker_node.controls import Controls
from broker_node.exceptions import BrokerError
from broker_node.inbox import offset_of, timestamp_of, topic_of
from broker_node.metrics import Metrics
from broker_node.oversize import MessageLimit
from broker_node.snapshot import SnapshotData, capture, decode, encode, restore, unusable
from broker_node.state import BrokerState
from connectors.closing import close_producer
from connectors.exceptions import ConnectorError
from connectors.kafka import (
    admin,
    check_message,
    committed_offsets,
    consumer_config,
    ensure_topics,
    next_offsets,
    producer_config,
    watermark_offsets,
)
from connectors.topic_settings import enforce_topic_config
from connectors.topics import headers_dict, source_of

__all__ = [
    "CHUNK_BYTES",
    "LIVE_SHARE",
    "PAUSE_SHARE",
    "PROGRESS_LOG_S",
    "SNAPSHOT_TOPIC_CONFIG",
    "Recovered",
    "SnapshotStore",
    "Snapshotter",
    "control_history",
    "manifest_end",
    "read_ranges",
    "read_snapshot",
    "recover",
    "snapshots_enabled",
]

log = logging.getLogger(__name__)

#: Settings of a node's snapshot topic: compacted (only the latest value of each chunk key
#: and the latest manifest matter), in segments small enough to be compacted soon.
SNAPSHOT_TOPIC_CONFIG: Mapping[str, str] = MappingProxyType(
    {"cleanup.policy": "compact", "segment.bytes": str(64 << 20)})
CHUNKS, MANIFESTS = 0, 1  # partitions of the snapshot topic
#: At most this many subscriptions of a replayed tail are acknowledged again at start.
REACK_LIMIT = 10_000
#: Bytes of a snapshot per Kafka message.
CHUNK_BYTES = 512 * 1024
#: Seconds between two progress lines of a recovering node.
PROGRESS_LOG_S = 5.0
#: Seconds before a snapshot that could not be taken (offsets not all committed yet, or a
#: write that failed) is tried again.
RETRY_S = 5.0
#: A snapshot is due after ``snapshot_every_messages`` control messages, or after
#: 1/LIVE_SHARE of the live subscriptions if more: the pause a snapshot costs grows with the
#: state, so spacing snapshots with it keeps that cost per control message flat, while the
#: tail a restart replays stays a fixed share of the live state.
LIVE_SHARE = 100
#: Two snapshots are at least this many times the last one's pause apart: taking snapshots
#: costs the loop at most about 1/PAUSE_SHARE of its time, whatever the load (a burst of
#: subscriptions then leaves a tail longer than the bound above, of what the node applied
#: within that time, which a restart replays in about that time).
PAUSE_SHARE = 10
_HEADER_ID = "dls-snapshot"
_MANIFEST_KEY = b"manifest"


def snapshots_enabled(s: NodeSettings) -> bool:
    """True when the node takes snapshots (and recovers from them): exact mode, and on."""
    return s.snapshot_every_messages > 0 and s.mode == "exact"


# -- reading ----------------------------------------------------------------------------------
class _Progress:
    """Counts what a recovery read; logs it now and then; stops a recovery that stalls."""

    def __init__(self, s: NodeSettings, what: str, total: int) -> None:
        self.s, self.what, self.total = s, what, total
        self.read = 0
        self.last_move = self.last_log = time.monotonic()

    def step(self, kept: int, moved: bool) -> None:
        now = time.monotonic()
        self.read += kept
        if moved:
            self.last_move = now
        elif now - self.last_move >= self.s.recovery_stall_s:
            raise BrokerError(
                f"node {self.s.node}: recovery read nothing for {self.s.recovery_stall_s} s "
                f"from {self.s.bootstrap} ({self.what}: {self.read} of about {self.total} "
                f"messages read); the broker does not answer", field="recovery_stall_s",
                value=self.s.recovery_stall_s)
        if now - self.last_log >= PROGRESS_LOG_S:
            self.last_log = now
            log.info("node %s recovering: %s: %d of about %d messages read (%.0f%%)",
                     self.s.node, self.what, self.read, self.total,
                     100.0 * self.read / max(1, self.total))


def read_ranges(s: NodeSettings, ranges: Mapping[tuple[str, int], tuple[int, int]],
                what: str) -> list[Message]:
    """The messages of each ``(topic, partition)`` from ``start`` to below ``end``.

    ``ranges`` maps a partition to ``(start, end)``; each partition's messages come in
    offset order. A partition is done once a message at or past ``end`` arrives, or its end
    (transaction markers take offsets too, so the last record may sit below ``end - 1``).
    Read by a consumer of its own, with no commits.

    Raises:
        BrokerError: Nothing arrived for ``recovery_stall_s`` seconds, or Kafka failed.
    """
    todo = {k: (a, b) for k, (a, b) in ranges.items() if b > a}
    if not todo:
        return []
    reader = Consumer(consumer_config(s.bootstrap, f"{s.consumer_group}-recovery",
                                      **{"enable.partition.eof": True}, **s.kafka_security()))
    try:
        reader.assign([TopicPartition(t, p, a) for (t, p), (a, _) in todo.items()])
        return _read(reader, todo, _Progress(s, what, sum(b - a for a, b in todo.values())))
    except (KafkaException, ConnectorError) as exc:
        raise BrokerError(f"node {s.node}: recovery could not read {what}: {exc}",
                          field="recovery", value=sorted(t for t, _ in todo)) from exc
    finally:
        reader.close()


def _read(reader: Consumer, todo: dict[tuple[str, int], tuple[int, int]],
          progress: _Progress) -> list[Message]:
    end = {k: b for k, (_, b) in todo.items()}
    left = set(todo)
    seen: list[Message] = []
    while left:
        # Wait for the first message only, then take what is fetched already: a consume of
        # many messages would wait out its whole timeout at the end of a range.
        batch = reader.consume(1, 0.5)
        if batch:
            batch += reader.consume(10_000, 0)
        moved = False  # an error event (the broker is down) is no progress
        if any(map(Message.error, batch)):
            for m in batch:
                err = m.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    left.discard((topic_of(m), m.partition() or 0))
                    moved = True
            batch = [ok for m in batch if (ok := check_message(m)) is not None]
        moved = moved or bool(batch)
        kept = [m for m in batch if offset_of(m) < end[(topic_of(m), m.partition() or 0)]]
        seen += kept
        done = [k for k, nxt in next_offsets(batch).items() if nxt >= end[k]]
        left.difference_update(done)
        if done:
            reader.pause([TopicPartition(t, p) for t, p in done])
        progress.step(len(kept), moved)
    return seen


def control_history(s: NodeSettings, start: Mapping[str, int], end: Mapping[str, int]
                    ) -> list[Message]:
    """The control messages from ``start`` to below ``end`` (by topic), in timestamp order.

    Ties of timestamp keep topic, then offset order.
    """
    seen = read_ranges(s, {(t, 0): (start.get(t, 0), e) for t, e in end.items()},
                       "control topics")
    seen.sort(key=lambda m: (timestamp_of(m), topic_of(m), offset_of(m)))
    return seen


def read_snapshot(s: NodeSettings, topic: str
                  ) -> tuple[dict[str, Any] | None, SnapshotData | None, str]:
    """``(latest manifest, its snapshot, why not)`` of a node's snapshot topic.

    The manifest is None when there is none; the snapshot None (and ``why not`` says why)
    when it cannot be read whole: the node then replays its history.
    """
    reader = Consumer(consumer_config(s.bootstrap, f"{s.consumer_group}-recovery",
                                      **s.kafka_security()))
    try:
        high = manifest_end(s, reader, topic)
    finally:
        reader.close()
    if high <= 0:
        return None, None, "no snapshot yet"
    last = read_ranges(s, {(topic, MANIFESTS): (high - 1, high)}, "snapshot manifest")
    where = source_of(topic, MANIFESTS, high - 1)
    try:
        manifest = json.loads(last[-1].value() or b"")
        first, final = int(manifest["first"]), int(manifest["last"])
        slot, count, sid = str(manifest["slot"]), int(manifest["chunks"]), manifest["id"]
    except (IndexError, ValueError, KeyError, TypeError) as exc:
        return None, None, f"no readable manifest at {where}: {exc!r}"
    msgs = read_ranges(s, {(topic, CHUNKS): (first, final + 1)}, f"snapshot {sid}")
    chunks: dict[int, bytes] = {}
    for m in msgs:
        key = (m.key() or b"").decode(errors="replace")
        if key.startswith(f"{slot}/") and headers_dict(m.headers()).get(_HEADER_ID) == sid.encode():
            chunks[int(key.split("/")[1])] = m.value() or b""
    buf = b"".join(chunks.get(i, b"") for i in range(count))
    if len(chunks) != count or zlib.crc32(buf) != manifest.get("crc32"):
        return manifest, None, (f"snapshot {sid} of {where}: {len(chunks)} of {count} chunks "
                                f"found in {topic}[{CHUNKS}]@{first}..{final}, or a bad CRC")
    try:
        return manifest, decode(buf), ""
    except BrokerError as exc:
        return manifest, None, f"snapshot {sid} of {where}: {exc}"


def manifest_end(s: NodeSettings, reader: Consumer, topic: str) -> int:
    """The end offset of the manifests partition of ``topic``.

    Asked again, for up to ``recovery_stall_s``, while the partition has no leader yet: a
    node's first start creates its snapshot topic just before (a start that failed on it
    made the mid-stream kill test flaky).

    Raises:
        BrokerError: Another error, or still no leader after ``recovery_stall_s``.
    """
    try:
        return watermark_offsets(reader, TopicPartition(topic, MANIFESTS),
                                 timeout=s.recovery_stall_s, retry_s=0.1)[1]
    except ConnectorError as exc:
        raise BrokerError(f"node {s.node}: cannot read the offsets of {topic}: {exc}",
                          field="recovery", value=topic) from exc


# -- recovery at start ------------------------------------------------------------------------
@dataclass
class Recovered:
    """What :func:`recover` did."""

    s: NodeSettings
    state: BrokerState
    controls: Controls
    topics: list[str]  # the control topics
    ends: dict[str, int]  # the group's committed offsets of the control topics (0: none)
    manifest: dict[str, Any] | None  # the latest manifest found (None: none)
    used: bool  # the state was rebuilt from that snapshot
    replayed: int  # control messages re-read and applied after it
    seconds: float
    #: subscriptions of the replayed tail to acknowledge again, (client, id)
    reacks: list[tuple[str, str]] = field(default_factory=list)

    def snapshotter(self, consumer: Consumer, committer: Committer | None, metrics: Metrics
                    ) -> Snapshotter | None:
        """The node's :class:`Snapshotter` from now on (None: snapshots are off)."""
        if not snapshots_enabled(self.s) or committer is None:
            return None
        return Snapshotter(self.s, consumer, committer, self.state, self.controls, metrics,
                           self.topics, self)


def _live(state: BrokerState, sid: str) -> bool:
    try:
        state.subscription(sid)
    except BrokerError:
        return False
    return True


def recover(s: NodeSettings, consumer: Consumer, topics: list[str], state: BrokerState,
            controls: Controls) -> Recovered:
    """Rebuild ``state`` (and ``controls``' memories) up to the committed offsets.

    ``consumer`` is the node's: its group's committed offsets are where the state must end.
    """
    t0 = time.monotonic()
    # The setting reaches the state here, before anything is loaded into it (the state is
    # built from the space with the configured filter sizes, resizing on by default).
    state.config = replace(state.config, resize_filters=s.resize_filters)
    ends = {tp.topic: max(0, tp.offset) for tp in
            committed_offsets(consumer, [TopicPartition(t, 0) for t in topics])}
    start = dict.fromkeys(topics, 0)
    manifest, used = None, False
    if snapshots_enabled(s):
        topic = s.topics().node_snapshot(s.node)
        _ensure_snapshot_topic(s, topic)
        manifest, data, why = read_snapshot(s, topic)
        if data is not None:
            why = unusable(data, state, s.consumer_group) or _ahead(data.covered, ends)
        if data is not None and not why:
            restore(data, state, controls)
            start.update({t: o for t, o in data.covered.items() if t in start})
            used = True
            log.info("node %s: state rebuilt from snapshot %s (%d subscriptions, %d clients)"
                     " in %.1f s", s.node, manifest and manifest.get("id"), len(state),
                     len(state.clients), time.monotonic() - t0)
        elif manifest is not None:
            log.warning("node %s: snapshot not used (%s); replaying the control topics from "
                        "the beginning", s.node, why)
    history = control_history(s, start, ends)
    applied: list[tuple[str, str]] = []
    if history:
        applied = controls.apply(history, replay=True).acks
    # The subscriptions of the tail that are still live: their acknowledgements may have
    # been lost with the process (a client may still wait). A long history (no snapshot)
    # is not acknowledged again: its clients stopped waiting long ago.
    reacks = [(c, sid) for c, sid in applied if _live(state, sid)
              and sid not in controls.retiring] if len(applied) <= REACK_LIMIT else []
    out = Recovered(s, state, controls, topics, ends, manifest, used, len(history),
                    time.monotonic() - t0, reacks)
    log.info("node %s recovered in %.1f s: %s, then %d control messages; %d subscriptions, "
             "%d clients", s.node, out.seconds, "a snapshot" if used else "no snapshot",
             len(history), len(state), len(state.clients))
    return out


def _ensure_snapshot_topic(s: NodeSettings, topic: str) -> None:
    """Create the node's snapshot topic, or check (and repair) the one there.

    Raises:
        BrokerError: It has another partition count, or its settings cannot be set.
    """
    try:
        ensure_topics(s.bootstrap, [topic], partitions=2, config=SNAPSHOT_TOPIC_CONFIG,
                      kafka=s.kafka_security(), **s.topic_replication())
        enforce_topic_config(s.bootstrap, [topic], SNAPSHOT_TOPIC_CONFIG,
                             why="the node's snapshot topic", kafka=s.kafka_security())
        meta = admin(s.bootstrap, **s.kafka_security()).list_topics(topic, timeout=30)
    except (ConnectorError, KafkaException) as exc:
        raise BrokerError(f"node {s.node} refuses to start: {exc}", field="snapshot_topic",
                          value=topic) from exc
    found = len(meta.topics[topic].partitions) if topic in meta.topics else 0
    if found != 2:
        raise BrokerError(
            f"node {s.node} refuses to start: topic {topic!r} has {found} partitions, a "
            f"snapshot topic needs 2 (chunks, manifests); delete it, or set "
            f"snapshot_every_messages = 0", field="partitions", value=found)


def _ahead(covered: Mapping[str, int], ends: Mapping[str, int]) -> str:
    """Why a snapshot is ahead of the committed offsets ("" when it is not)."""
    for t, o in covered.items():
        if t in ends and o > ends[t]:
            return (f"it covers {t} up to offset {o}, the group committed only {ends[t]} "
                    f"(offsets reset?)")
    return ""


# -- writing ----------------------------------------------------------------------------------
@dataclass
class _Write:
    """A snapshot being written: its chunks, then its manifest."""

    manifest: dict[str, Any]
    expected: int  # partition-0 messages (chunks and tombstones) to be acknowledged
    started: float
    offsets: list[int] = field(default_factory=list)  # of the chunks acknowledged
    acked: int = 0
    error: str | None = None
    manifest_sent: bool = False
    done: bool = False


class SnapshotStore:
    """Writes a node's snapshots to its snapshot topic without waiting (module text).

    :meth:`start` produces a snapshot's chunks (and tombstones) and returns; :meth:`poll`
    serves the delivery reports, produces the manifest once every chunk is acknowledged,
    and says when the write is over. One write at a time, through an idempotent producer of
    the store's own (not the node's transactional one).
    """

    def __init__(self, s: NodeSettings, latest: dict[str, Any] | None,
                 limit: MessageLimit | None = None) -> None:
        """A store for the node of ``s``; ``latest`` is the manifest recovery found.

        ``limit``: the node's :class:`~broker_node.oversize.MessageLimit`; chunks fill
        half a message of it at most.
        """
        self.s = s
        self.limit = limit or MessageLimit()
        self.chunk = self.limit.share(CHUNK_BYTES, 1)
        self.topic = s.topics().node_snapshot(s.node)
        self.latest = latest
        self.write: _Write | None = None
        self.failed = False  # the last write failed
        extra: dict[str, Any] = {"compression.type": "lz4", "linger.ms": 5,
                                 **self.limit.producer_config()}
        self.producer = Producer(producer_config(s.bootstrap, **extra, **s.kafka_security()))

    def start(self, data: SnapshotData) -> None:
        """Produce the chunks of ``data`` to the slot the latest manifest does not name."""
        t0 = time.monotonic()
        buf = encode(data)
        last = self.latest or {}
        slot = "B" if last.get("slot") == "A" else "A"
        written = {"A": 0, "B": 0, **last.get("written", {})}
        sid = uuid.uuid4().hex
        step = self.chunk
        parts = [buf[i:i + step] for i in range(0, len(buf), step)] or [b""]
        manifest = {"format": 1, "id": sid, "node": data.node, "group": data.group,
                    "slot": slot, "chunks": len(parts), "bytes": len(buf),
                    "crc32": zlib.crc32(buf), "covered": data.covered,
                    "subscriptions": len(data), "created_ms": int(time.time() * 1000),
                    "written": {**written, slot: len(parts)}}
        w = _Write(manifest, max(len(parts), written[slot]), t0)
        self.failed = False

        def delivered(err: Any, msg: Message) -> None:
            if err is not None:
                w.error = w.error or f"{self.topic}[{CHUNKS}]: {err}"
            else:
                w.acked += 1
                w.offsets.append(offset_of(msg))

        headers = [(_HEADER_ID, sid.encode())]
        for i in range(w.expected):  # the chunks, then tombstones for the slot's stale ones
            value = parts[i] if i < len(parts) else None
            self._produce(f"{slot}/{i}".encode(), value, CHUNKS, delivered,
                          headers if value is not None else None)
        self.write = w

    def _produce(self, key: bytes, value: bytes | None, partition: int, cb: Any,
                 headers: Any = None) -> None:
        while True:
            try:
                self.producer.produce(self.topic, value, key=key, partition=partition,
                                      headers=headers, on_delivery=cb)
                return
            except BufferError:
                self.producer.poll(0.05)

    def poll(self) -> bool:
        """Advance the write in flight; True when none is left (written, or failed)."""
        w = self.write
        if w is None:
            return True
        self.producer.poll(0)
        if w.error is None and w.acked >= w.expected and not w.manifest_sent:
            chunks = sorted(w.offsets)[:w.manifest["chunks"]]  # the tombstones come after
            w.manifest.update(first=chunks[0], last=chunks[-1])
            w.manifest_sent = True
            self._produce(_MANIFEST_KEY, json.dumps(w.manifest).encode(), MANIFESTS,
                          lambda err, msg: self._manifest_delivered(w, err))
            self.producer.poll(0)
        if w.error is not None:
            log.error("node %s: snapshot %s not written (%s); the previous one stays",
                      self.s.node, w.manifest["id"], w.error)
            self.write, self.failed = None, True
        elif w.done:
            m = w.manifest
            log.info("node %s: snapshot %s written in %.1f s: %d subscriptions, %d bytes in "
                     "%d chunks, covering %s", self.s.node, m["id"],
                     time.monotonic() - w.started, m["subscriptions"], m["bytes"],
                     m["chunks"], m["covered"])
            self.latest, self.write = m, None
        return self.write is None

    def _manifest_delivered(self, w: _Write, err: Any) -> None:
        if err is not None:
            w.error = w.error or f"{self.topic}[{MANIFESTS}]: {err}"
        else:
            w.done = True

    def close(self) -> None:
        """End the store's producer; a write in flight is dropped (no manifest names it)."""
        close_producer(self.producer)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the write in flight; True when none is left."""
        deadline = time.monotonic() + timeout
        while not self.poll() and time.monotonic() < deadline:
            self.producer.poll(0.05)
        return self.write is None


class Snapshotter:
    """Takes the node's snapshots in its loop, when due and safe (module text).

    Due when ``snapshot_every_messages`` control messages (or 1/:data:`LIVE_SHARE` of the
    live subscriptions, if more) were applied since the last one (those replayed at start
    count), or ``snapshot_interval_s`` has passed with at least one; and at least
    :data:`PAUSE_SHARE` times the last snapshot's pause after it (after a start that
    restored anything, times the recovery's time, at most ``snapshot_interval_s``). Safe
    right after a synchronous commit: the node's loop calls :meth:`after_batch` between
    batches; at least once, it commits synchronously first (flushing the outputs), and the
    snapshot is taken only when the group coordinator's committed offsets of the control
    topics equal the consumer's positions (the state holds exactly what is committed). A
    write that fails leaves the previous snapshot, and the tail it would have covered
    counts again.
    """

    def __init__(self, s: NodeSettings, consumer: Consumer, committer: Committer,
                 state: BrokerState, controls: Controls, metrics: Metrics,
                 topics: list[str], recovered: Recovered) -> None:
        """The snapshotter of a node that has just recovered as ``recovered`` says."""
        self.s, self.consumer, self.committer = s, consumer, committer
        self.state, self.controls, self.metrics = state, controls, metrics
        self.topics, self.ends = topics, dict(recovered.ends)
        self.store = SnapshotStore(s, recovered.manifest, committer.limit)
        self.tail = recovered.replayed  # control messages applied since the last snapshot
        self.seen = metrics.control_in
        self.last = time.monotonic()
        # the least time between snapshots; after a restart the recovery's time stands for a
        # pause: the backlog is routed first (at 1M a snapshot pauses the loop for seconds)
        self.gap = (min(PAUSE_SHARE * recovered.seconds, s.snapshot_interval_s)
                    if recovered.used or recovered.replayed > 0 else 0.0)
        self.carried = 0  # the tail the snapshot being written covers
        self.retry_at = 0.0

    def after_batch(self) -> None:
        """Between batches: advance a write in flight, or take a snapshot if due."""
        if self.store.write is not None:
            if self.store.poll() and self.store.failed:  # that tail is not covered after all
                self.tail += self.carried
                self.retry_at = time.monotonic() + RETRY_S
            return
        now = time.monotonic()
        tail = self.tail + self.metrics.control_in - self.seen
        every = max(self.s.snapshot_every_messages, len(self.state) // LIVE_SHARE)
        if tail <= 0 or now < self.retry_at or now - self.last < self.gap or (
                tail < every and now - self.last < self.s.snapshot_interval_s):
            return
        self.take()

    def take(self) -> bool:
        """Commit, check, capture and start writing a snapshot; False when not safe now."""
        t0 = time.monotonic()
        if not self.committer.transactional:
            self.committer.finish()  # flush the outputs, commit synchronously
        covered = self._covered()
        if covered is None:
            self.retry_at = time.monotonic() + RETRY_S
            return False
        data = capture(self.state, self.controls, group=self.s.consumer_group,
                       covered=covered)
        self.store.start(data)
        self.carried = self.tail + self.metrics.control_in - self.seen
        self.tail, self.seen, self.last = 0, self.metrics.control_in, time.monotonic()
        self.gap = PAUSE_SHARE * (self.last - t0)
        log.debug("node %s: snapshot of %d subscriptions taken in %.3f s (loop paused)",
                  self.s.node, len(data), self.last - t0)
        return True

    def _covered(self) -> dict[str, int] | None:
        """The control topics' committed offsets, if the state holds exactly them."""
        tps = [TopicPartition(t, 0) for t in self.topics]
        try:
            committed = committed_offsets(self.consumer, tps, timeout=10.0)
            positions = self.consumer.position(tps)
        except (ConnectorError, KafkaException) as exc:
            log.warning("node %s: no snapshot now (%s)", self.s.node, exc)
            return None
        out = {}
        for c, p in zip(committed, positions, strict=True):
            have = p.offset if p.offset >= 0 else self.ends.get(p.topic, 0)
            if max(0, c.offset) != have:
                log.debug("node %s: no snapshot now: %s committed at %d, consumed to %d",
                          self.s.node, c.topic, c.offset, have)
                return None
            out[c.topic] = have
        self.ends.update(out)
        return out
