"""How far a node and the network behind each link have got, in time and in link control.

Two promises travel between neighbours, in a Heartbeat on the forwarded-event topic
(docs/architecture.md#order-of-changes-and-events):

- **watermark**: every event the sender forwards after the heartbeat was published at or
  after this time. A node's own low watermark is the least of its inputs': of its publish
  topic (it read everything the broker had at a moment ``t``, and the topic refuses records
  older than ``publish_delay_s``, so nothing published before ``t - publish_delay_s -
  clock_skew_s`` can still come) and of each neighbour's last heartbeat. A node removes a
  cancelled subscription only once its low watermark has passed the cancellation's time
  (:meth:`Progress.low_watermark`): no event published before an unsubscription can then
  reach it after the removal, however far behind any node is.
- **link_applied**: the highest sequence number of the receiver's link control that the
  sender, and every node behind it away from the receiver, has applied and committed. A
  subscription is acknowledged to its client once every neighbour reports the link control
  sent up to its application as applied (:meth:`Progress.acked`), and its node has committed
  the batch that applied it: an event published anywhere after the acknowledgement finds
  the subscription's labels on its way, even past a node that crashed meanwhile.

Heartbeats are sent on demand, so that an idle network is silent: when ``link_applied``
moved; when the neighbour *wants* watermarks (it, or a node behind it, has a cancelled
subscription to remove) and the watermark moved; and, while this node wants watermarks
itself, again every few seconds, so that a neighbour that restarted learns it.

This module only keeps the numbers; the service reads and writes the heartbeats.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence

__all__ = ["Progress"]


class Progress:
    """The watermarks and link sequence numbers of one node (times in ms since the epoch)."""

    def __init__(self, neighbours: Sequence[str], *, publish_delay_s: float,
                 clock_skew_s: float) -> None:
        """Nothing known yet: every watermark is 0 until the inputs show how far they got."""
        self.neighbours = tuple(neighbours)
        self.slack_ms = int((publish_delay_s + clock_skew_s) * 1000)
        self.skew_ms = int(clock_skew_s * 1000)
        #: no event published before this can still come on the publish topic
        self.publish_passed = 0
        #: each neighbour's last watermark (no event it forwards later is older)
        self.beats_in = dict.fromkeys(self.neighbours, 0)
        #: the watermark last sent to each neighbour
        self.beats_out = dict.fromkeys(self.neighbours, 0)
        #: the sequence number of the last link control sent to each neighbour
        self.seq_out = dict.fromkeys(self.neighbours, 0)
        #: each neighbour's link_applied: how far our link control to it is applied behind it
        self.acked_out = dict.fromkeys(self.neighbours, 0)
        #: the highest sequence number of each neighbour's link control applied here
        self.applied_seq = dict.fromkeys(self.neighbours, 0)
        self._moved: set[str] = set()
        # per neighbour n: (a sequence number of n's link control applied here, what was
        # sent to every other neighbour by then); n's number counts as applied behind this
        # node once each of those neighbours has acknowledged its part
        # (the node's batch that applied it: it counts only once that batch is committed)
        self._pairs: dict[str, deque[tuple[int, dict[str, int], int]]] = {
            n: deque() for n in self.neighbours}
        #: the last batch of this node whose input offsets are committed (set by the loop)
        self.durable = 0
        self.reported = dict.fromkeys(self.neighbours, 0)  # link_applied last sent
        self._behind = dict.fromkeys(self.neighbours, 0)  # link_applied known so far
        #: whether each neighbour waits for our watermark (its last heartbeat said so)
        self.wanted_by = dict.fromkeys(self.neighbours, False)
        #: whether this node has cancelled subscriptions to remove (set by the controls)
        self.local_want = False
        self._want_sent = dict.fromkeys(self.neighbours, False)
        self._last_beat = 0.0
        self._last_ack_beat = 0.0  # the last heartbeat that carried a link_applied moved

    # -- event time ---------------------------------------------------------------------------
    def publish_caught_up(self, at_s: float) -> None:
        """The publish topic was read up to the end the broker had at ``at_s`` (wall clock)."""
        self.publish_passed = max(self.publish_passed, int(at_s * 1000) - self.slack_ms)

    def low_watermark(self) -> int:
        """No event published before this (ms) can still reach this node."""
        return min([self.publish_passed, *self.beats_in.values()])

    def passed(self, cancelled_ms: int) -> bool:
        """True once every input has passed a cancellation made at ``cancelled_ms``."""
        return self.low_watermark() >= cancelled_ms + self.skew_ms

    def watermark_for(self, to: str) -> int:
        """The watermark this node can promise ``to``: its inputs except what ``to`` sends."""
        w = min([self.publish_passed, *(v for n, v in self.beats_in.items() if n != to)])
        return max(w, self.beats_out[to])

    @property
    def watermark_wanted(self) -> bool:
        """True when this node or a neighbour waits for this node's watermarks to move."""
        return self.local_want or any(self.wanted_by.values())

    # -- link control -------------------------------------------------------------------------
    def next_seq(self, to: str) -> int:
        """The sequence number of the next link control to ``to``.

        Increasing, even across a restart: it starts from the wall clock in microseconds.
        """
        seq = max(self.seq_out[to] + 1, time.time_ns() // 1000)
        self.seq_out[to] = seq
        return seq

    def on_link_seq(self, source: str, seq: int) -> None:
        """Link control number ``seq`` from ``source`` was applied."""
        if seq > self.applied_seq[source]:
            self.applied_seq[source] = seq
            self._moved.add(source)

    def new_link_epoch(self, source: str) -> None:
        """``source`` (a new incarnation of it) numbers its link control afresh.

        What an older incarnation's numbers reached says nothing about the new one's: the
        applied number starts again, and so does what was reported back.
        """
        self.applied_seq[source] = 0
        self._pairs[source].clear()
        self._behind[source] = 0
        self.reported[source] = 0
        self._moved.discard(source)

    def end_batch(self, batch: int = 0) -> bool:
        """Close batch ``batch``: its link control is applied, its own link control produced.

        Notes, for each neighbour whose link control moved, what the others must acknowledge
        before it counts as applied behind this node, and that it counts only once this
        node has committed the batch (:attr:`durable`): a node that crashed before would
        replay the link control after later events. Returns True when something moved.
        """
        moved = bool(self._moved)
        for n in self._moved:
            self._pairs[n].append((self.applied_seq[n], {k: v for k, v in self.seq_out.items()
                                                         if k != n}, batch))
        self._moved.clear()
        return moved

    def on_heartbeat(self, source: str, watermark_ms: int, link_applied: int,
                     wants_watermark: bool = False) -> None:
        """A heartbeat from ``source``: its watermark and how far our link control is applied."""
        if watermark_ms > self.beats_in[source]:
            self.beats_in[source] = watermark_ms
        if link_applied > self.acked_out[source]:
            self.acked_out[source] = link_applied
        self.wanted_by[source] = wants_watermark

    def wants_from(self, n: str) -> bool:
        """True when this node needs ``n``'s watermark (for itself or a node behind it)."""
        return self.local_want or any(v for k, v in self.wanted_by.items() if k != n)

    def link_applied_for(self, to: str) -> int:
        """How far ``to``'s link control is applied here and behind this node."""
        pairs, acked, done = self._pairs[to], self.acked_out, self._behind[to]
        while pairs and pairs[0][2] <= self.durable and all(
                acked[k] >= need for k, need in pairs[0][1].items()):
            done = max(done, pairs.popleft()[0])
        self._behind[to] = done  # kept, whether or not a heartbeat carries it now
        return done

    def acked(self, required: dict[str, int]) -> bool:
        """True once every neighbour has applied, behind it, the link control of ``required``."""
        return all(self.acked_out[k] >= v for k, v in required.items())

    # -- heartbeats ---------------------------------------------------------------------------
    def beats(self, now: float, *, moved_every_s: float, every_s: float
              ) -> list[tuple[str, int, int, bool]]:
        """The heartbeats to send now, ``(to, watermark, link_applied, wants_watermark)``.

        All of them, at most once per ``moved_every_s``, when for some neighbour the link
        applied or the want changed, or it wants watermarks and ours moved; and every
        ``every_s`` while this node wants watermarks. Else none. A link applied that moved
        is paced on its own: a heartbeat that only moved a watermark does not hold back an
        acknowledgement waiting behind it (watermarks move every check while wanted).
        """
        if not self.neighbours:
            return []
        out = [(n, self.watermark_for(n), self.link_applied_for(n), self.wants_from(n))
               for n in self.neighbours]
        since = now - self._last_beat
        acks = any(a > self.reported[n] for n, _, a, _ in out)
        moved = any(want != self._want_sent[n] or (self.wanted_by[n] and w > self.beats_out[n])
                    for n, w, _, want in out)
        waiting = any(want for *_, want in out)
        if not ((acks and now - self._last_ack_beat >= moved_every_s)
                or ((acks or moved) and since >= moved_every_s)
                or (waiting and since >= every_s)):
            return []
        self._last_beat = now
        if acks:
            self._last_ack_beat = now
        for n, w, a, want in out:
            self.beats_out[n], self.reported[n], self._want_sent[n] = w, a, want
        return out
