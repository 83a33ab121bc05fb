"""Link control from a replaced incarnation that still writes cannot undo its successor's.

A neighbour's process (or a shard's engine) is replaced while the old one still runs: at
least once nothing fences it, and its late link control lands among the new one's on the
link topic. Property: whatever the interleaving, the receiver ends with exactly the labels
a single process applying the same changes would have advertised.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from confluent_kafka import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_node.config import NodeSettings
from broker_node.controls import Controls, probe_links
from broker_node.inbox import Inbox
from broker_node.metrics import Metrics
from broker_node.progress import Progress
from broker_node.state import BrokerState, LinkMessage
from connectors.serde import encode_link
from connectors.topics import HEADER_LINK_EPOCH, HEADER_LINK_SEQ, Topics
from dls.space import ContentSpace

SPEC = {"attributes": [{"name": "x", "type": "numeric", "low": 0, "high": 100,
                        "granules": 8}]}
LINK = Topics("dls").link("S", "R")

#: one change at the sender: (subscribe?, subscription number, cells)
Op = tuple[bool, int, frozenset[int]]


def _space(tmp: Path) -> tuple[ContentSpace, Path]:
    path = tmp / "space.json"
    if not path.exists():
        path.write_text(json.dumps(SPEC))
    return ContentSpace.from_json(path), path


def _run(space: ContentSpace, ops: list[Op], state: BrokerState | None = None
         ) -> tuple[BrokerState, list[LinkMessage]]:
    """Apply ``ops`` at a sender S (neighbour R); the link control it sends to R."""
    state = state or BrokerState.for_space("S", ["R"], space)
    base = space.app_prefix
    out: list[LinkMessage] = []
    for sub, n, cells in ops:
        if sub:
            labels = np.array(sorted(base + c for c in cells), dtype=np.uint64)
            out += state.subscribe("c", f"s{n}", labels)
        else:
            out += state.unsubscribe("c", f"s{n}")
    return state, [m for m in out if m.to == "R"]


def _messages(links: list[LinkMessage], epoch: int, first_seq: int) -> list[Message]:
    return [Message(topic=LINK, partition=0, offset=0, timestamp=(1, 0),
                    value=encode_link("S", m.kind, m.labels),
                    headers=[(HEADER_LINK_SEQ, (first_seq + i).to_bytes(8, "big")),
                             (HEADER_LINK_EPOCH, epoch.to_bytes(8, "big"))])
            for i, m in enumerate(links)]


def _receiver(space: ContentSpace, path: Path) -> Controls:
    settings = NodeSettings(node="R", neighbours=("S",), space=path)
    state = BrokerState.for_space("R", ["S"], space)
    metrics = Metrics()
    return Controls(settings, state, Inbox("R", Topics("dls"), state, metrics), metrics,
                    Progress(["S"], publish_delay_s=1, clock_skew_s=0))


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Op], int, int, list[bool]]:
    """Changes at S, where its process is replaced, how far the old one still gets, and
    how the old one's late messages interleave with the new one's."""
    ops: list[Op] = []
    live: list[int] = []
    for n in range(draw(st.integers(1, 14))):
        if live and draw(st.booleans()):
            ops.append((False, live.pop(draw(st.integers(0, len(live) - 1))), frozenset()))
        else:
            ops.append((True, n, frozenset(draw(st.sets(st.integers(0, 7), min_size=1,
                                                        max_size=3)))))
            live.append(n)
    k = draw(st.integers(0, len(ops)))
    late = draw(st.integers(0, len(ops) - k))
    order = draw(st.lists(st.booleans(), min_size=2 * len(ops) + 2,
                          max_size=2 * len(ops) + 2))
    return ops, k, late, order


@settings(max_examples=40, deadline=None)
@given(histories())
def test_a_replaced_incarnations_late_link_control_changes_nothing(
        tmp_path_factory: object, history: tuple[list[Op], int, int, list[bool]]) -> None:
    ops, k, late, order = history
    space, path = _space(Path("/tmp"))  # noqa: S108 - a fixed spec file, read only
    single, _ = _run(space, ops)
    want = set(single.advertised_to("R").tolist())  # what one process ends with
    # The old incarnation: everything up to k, then (as a zombie) k .. k + late.
    _, before = _run(space, ops[:k])
    _, zombie_all = _run(space, ops[:k + late])
    zombie = zombie_all[len(before):]
    # The new one recovers the first k changes (sending nothing), probes, goes on.
    recovered, _ = _run(space, ops[:k])
    _, after = _run(space, ops[k:], recovered)
    probe = probe_links(recovered, "R")  # what it advertises R: all of it again
    old_msgs = _messages(before + zombie, epoch=1, first_seq=1)
    early, late_msgs = old_msgs[:len(before)], old_msgs[len(before):]
    new_msgs = _messages(probe + after, epoch=2, first_seq=1)
    # The probe comes first of the new ones; the zombie's late ones anywhere around them.
    stream, z, n = list(early), list(late_msgs), list(new_msgs)
    for pick_zombie in order:
        if z and (pick_zombie or not n):
            stream.append(z.pop(0))
        elif n:
            stream.append(n.pop(0))
    stream += z + n
    receiver = _receiver(space, path)
    receiver.apply(stream, replay=False)
    got = set(receiver.state.received_from("S").tolist())
    assert got == want


#: a change at a sender with two neighbours: (kind, subscription number, cells), kind one of
#: "sub", "unsub" (local) and "ad", "wd" (link control from its other neighbour Q)
Change = tuple[str, int, frozenset[int]]


def _apply(state: BrokerState, changes: list[Change], base: int) -> list[LinkMessage]:
    out: list[LinkMessage] = []
    for kind, n, cells in changes:
        labels = np.array(sorted(base + c for c in cells), dtype=np.uint64)
        if kind == "sub":
            out += state.subscribe("c", f"s{n}", labels)
        elif kind == "unsub":
            out += state.unsubscribe("c", f"s{n}")
        else:
            out += state.on_link("Q", "advertise" if kind == "ad" else "withdraw", labels)
    return [m for m in out if m.to == "R"]


@st.composite
def restarts(draw: st.DrawFn) -> tuple[list[Change], int]:
    """Changes at S (local and from Q), and where S restarts."""
    changes: list[Change] = []
    live: list[int] = []
    for n in range(draw(st.integers(1, 14))):
        cells = frozenset(draw(st.sets(st.integers(0, 7), min_size=1, max_size=3)))
        kind = draw(st.sampled_from(["sub", "unsub", "ad", "wd"]))
        if kind == "unsub" and live:
            changes.append((kind, live.pop(draw(st.integers(0, len(live) - 1))), frozenset()))
        elif kind in ("ad", "wd"):
            changes.append((kind, n, cells))
        else:
            changes.append(("sub", n, cells))
            live.append(n)
    return changes, draw(st.integers(0, len(changes)))


@settings(max_examples=60, deadline=None)
@given(restarts())
def test_a_restart_that_replays_removed_subscriptions_swallows_no_advertisement(
        history: tuple[list[Change], int]) -> None:
    """A recovery replays a removed subscription as live (its removal is no input) until
    the restarted node removes it again; the probe keeps the receiver's view exact."""
    changes, k = history
    space, path = _space(Path("/tmp"))  # noqa: S108 - a fixed spec file, read only
    base = space.app_prefix
    single = BrokerState.for_space("S", ["R", "Q"], space)
    _apply(single, changes, base)
    want = set(single.advertised_to("R").tolist())
    old = BrokerState.for_space("S", ["R", "Q"], space)
    before = _apply(old, changes[:k], base)
    # The recovered state: the same changes, but every subscription removed so far is back.
    recovered = BrokerState.for_space("S", ["R", "Q"], space)
    _apply(recovered, [c for c in changes[:k] if c[0] != "unsub"], base)
    # It reads on (Q's link control first, the worst case) and then removes them again.
    ghosts = [c for c in changes[:k] if c[0] == "unsub"]
    after = _apply(recovered, changes[k:] + ghosts, base)
    stream = (_messages(before, epoch=1, first_seq=1)
              + _messages(probe_links(recovered, "R") + after, epoch=2, first_seq=1))
    receiver = _receiver(space, path)
    receiver.apply(stream, replay=False)
    assert set(receiver.state.received_from("S").tolist()) == want
