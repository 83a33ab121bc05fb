"""Control messages applied to the state: what they cause, returned as data."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Message

from broker_node.config import NodeSettings
from broker_node.controls import Controls
from broker_node.inbox import Inbox
from broker_node.metrics import Metrics
from broker_node.state import ADVERTISE, WITHDRAW, BrokerState
from connectors.serde import encode_label_subscription, encode_label_unsubscription
from connectors.topics import Topics
from dls import _jit
from dls.mapping import event_label
from dls.space import ContentSpace

SPEC = {"attributes": [{"name": "x", "type": "numeric", "low": 0, "high": 100,
                        "granules": 8}]}
SUB, UNSUB = "dls.node.A.subscribe", "dls.node.A.unsubscribe"


@pytest.fixture
def controls(tmp_path: Path) -> Controls:
    return _controls(tmp_path)


def _labels(controls: Controls, *xs: float) -> np.ndarray:
    space = ContentSpace.from_json(controls.settings.space)
    return np.array(sorted({event_label(space, {"x": x}) for x in xs}), dtype=np.uint64)


def _sub(offset: int, client: str, sid: str, labels: np.ndarray, ts: int = 0) -> Message:
    return Message(topic=SUB, partition=0, offset=offset, timestamp=(1, ts),
                   value=encode_label_subscription(client, sid, labels, None))


def _unsub(offset: int, client: str, sid: str, ts: int = 0) -> Message:
    return Message(topic=UNSUB, partition=0, offset=offset, timestamp=(1, ts),
                   value=encode_label_unsubscription(client, sid))


def test_a_run_of_subscriptions_is_one_batch_and_advertised(controls: Controls) -> None:
    labels = _labels(controls, 10, 90)
    out = controls.apply([_sub(0, "ann", "s1", labels[:1]), _sub(1, "bob", "s2", labels)],
                         replay=False)
    assert len(controls.state) == 2
    assert out.clients == ["ann", "bob"] and out.letters == []
    assert [(m.to, m.kind) for m in out.links] == [("B", ADVERTISE)]
    assert sorted(np.concatenate([m.labels for m in out.links]).tolist()) == labels.tolist()
    assert controls.metrics.control_in == 2
    assert controls.metrics.labels_advertised == 2


def test_a_bad_message_in_a_run_is_a_dead_letter_and_the_rest_applies(
        controls: Controls) -> None:
    labels = _labels(controls, 10)
    junk = Message(topic=SUB, partition=0, offset=1, value=b"\x00junk")
    out = controls.apply([_sub(0, "ann", "s1", labels), junk, _sub(2, "bob", "s2", labels)],
                         replay=False)
    assert len(controls.state) == 2
    assert [d.source for d in out.letters] == [f"{SUB}[0]@1"]
    assert out.letters[0].reason.startswith("undecodable")
    assert controls.metrics.control_in == 3


def test_a_subscription_with_a_bad_row_is_a_dead_letter_naming_it_and_the_rest_applies(
        controls: Controls) -> None:
    """The row the SDK compiles is checked: one of another size (another space), or a
    range that is not one, changes nothing; a good row is the edge's row as sent."""
    labels = _labels(controls, 10, 30)
    good = struct.pack("<2d", 5.0, 35.0)
    bad_size = struct.pack("<3d", 5.0, 35.0, 1.0)
    upside = struct.pack("<2d", 35.0, 5.0)

    def sub(offset: int, sid: str, row: bytes) -> Message:
        return Message(topic=SUB, partition=0, offset=offset, timestamp=(1, 0),
                       value=encode_label_subscription("ann", sid, labels, "x > 1", row))

    out = controls.apply([sub(0, "s1", good), sub(1, "s2", bad_size), sub(2, "s3", upside),
                          sub(3, "s4", good)], replay=False)
    assert [(d.source, d.field, d.reason) for d in out.letters] == [
        (f"{SUB}[0]@1", "row", "row: 24 bytes, the space's rows have 16 (1 numeric "
                               "attributes, 0 mask words)"),
        (f"{SUB}[0]@2", "row", "row: bounds [[35.0, 5.0]] are not ranges (NaN, or a lower "
                               "bound above its upper)")]
    assert len(controls.state) == 2
    assert controls.state.subscription("s4")[0] == "ann"
    edge = controls.edge
    assert edge is not None and len(edge) == 2
    assert edge.export(["ann"], ["s1"]).bounds.tolist() == [[[5.0, 35.0]]]


def test_an_early_unsubscription_waits_then_is_a_dead_letter(controls: Controls) -> None:
    out = controls.apply([_unsub(0, "ann", "never")], replay=False)
    assert out.letters == [] and ("ann", "never") in controls.pending
    controls.subscribe_caught_up(time.monotonic())  # its subscription cannot still come
    letters = controls.expired()  # a grace of 0 s
    assert [d.reason for d in letters] == ["unknown subscription id 'never' (client 'ann')"]
    assert (letters[0].field, letters[0].value) == ("id", "never")
    assert controls.pending == {} and controls.expired() == []


def test_an_early_unsubscription_waits_for_the_subscribe_topic_past_its_grace(
        controls: Controls) -> None:
    """Regression: a node behind on its subscribe topic (its consumer read the unsubscribe
    topic first) dead-lettered the cancellation once the grace ran out, and the
    subscription, read later, stayed live for good."""
    labels = _labels(controls, 10)
    controls.subscribe_caught_up(time.monotonic())  # before the unsubscription was read
    controls.apply([_unsub(0, "ann", "s1", ts=200)], replay=False)
    assert controls.overdue()  # a grace of 0 s
    assert controls.expired() == []  # its subscription may still be in the backlog
    out = controls.apply([_sub(0, "ann", "s1", labels, ts=100)], replay=False)
    assert out.letters == [] and controls.pending == {}
    assert controls.retiring == {"s1": ("ann", 200)}


def test_an_unknown_cancellation_expires_once_the_subscribe_topic_is_read_past_it(
        controls: Controls) -> None:
    controls.apply([_unsub(0, "ann", "never")], replay=False)
    assert controls.expired() == []
    controls.subscribe_caught_up(time.monotonic())
    assert [d.value for d in controls.expired()] == ["never"]
    assert not controls.overdue()


def _pass_everything(controls: Controls, ms: int = 10**13) -> None:
    """Every input of the node has passed time ``ms``: the publish topic and neighbour B."""
    controls.progress.publish_caught_up(ms / 1000 + 3600)
    controls.progress.on_heartbeat("B", ms, 0)


def test_subscribed_and_cancelled_before_seen_retires_at_once(controls: Controls) -> None:
    """Live from 100 to 200: events published in between still reach it until removed."""
    controls.settings = controls.settings.model_copy(update={"unsubscribe_grace_s": 30})
    labels = _labels(controls, 10)
    controls.apply([_unsub(0, "ann", "s1", ts=200)], replay=False)
    out = controls.apply([_sub(0, "ann", "s1", labels, ts=100)], replay=False)
    assert len(controls.state) == 1 and out.letters == [] and controls.pending == {}
    assert controls.retiring == {"s1": ("ann", 200)}
    _pass_everything(controls)
    done = controls.finalize()
    assert len(controls.state) == 0 and [m.kind for m in done.links] == [WITHDRAW]
    assert ("ann", "s1") in controls.cancelled and controls.retiring == {}


def test_cancelled_before_seen_retires_at_once_whatever_the_timestamps(
        controls: Controls) -> None:
    """The Spark job writes a micro-batch's records in any order, each stamped with its own
    write time: the subscription may come second AND later. It is still cancelled (ids
    are not reused), as of the later time; on main's code it stayed live for ever."""
    controls.settings = controls.settings.model_copy(update={"unsubscribe_grace_s": 30})
    labels = _labels(controls, 10)
    controls.apply([_unsub(0, "ann", "s1", ts=200)], replay=False)
    out = controls.apply([_sub(0, "ann", "s1", labels, ts=201)], replay=False)
    assert out.letters == [] and controls.pending == {}
    assert controls.retiring == {"s1": ("ann", 201)}
    _pass_everything(controls)
    assert [m.kind for m in controls.finalize().links] == [WITHDRAW]
    assert len(controls.state) == 0


def test_a_subscription_after_its_unsubscriptions_grace_is_refused(
        controls: Controls) -> None:
    """Past the grace the early unsubscription is a dead letter, and its id stays cancelled:
    a subscription coming later still (a replayed batch, a node far behind) is refused."""
    controls.apply([_unsub(0, "ann", "s1", ts=200), _unsub(1, "ann", "s1", ts=300)],
                   replay=False)
    controls.subscribe_caught_up(time.monotonic())  # its subscription cannot still come
    assert [d.field for d in controls.expired()] == ["id"]  # a grace of 0 s: one letter
    out = controls.apply([_sub(0, "ann", "s1", _labels(controls, 10), ts=100),
                          _unsub(2, "ann", "s1", ts=400)], replay=False)
    assert [d.reason for d in out.letters] == [
        "subscription id 's1' of client 'ann' was cancelled; ids are not reused (a repeat "
        "from an at-least-once writer?)"]
    assert len(controls.state) == 0 and controls.pending == {} and controls.expired() == []
    assert controls.metrics.duplicates == 2  # the second and third unsubscriptions


def test_an_unsubscription_waits_until_every_input_has_passed_its_time(
        controls: Controls) -> None:
    labels = _labels(controls, 10)
    controls.apply([_sub(0, "ann", "s1", labels, ts=1_000)], replay=False)
    out = controls.apply([_unsub(0, "ann", "s1", ts=5_000)], replay=False)
    assert out.links == [] and len(controls.state) == 1  # retiring, still routed to
    skew = controls.progress.skew_ms
    controls.progress.publish_caught_up(10**6)  # the publish topic passed it long ago
    controls.progress.on_heartbeat("B", 5_000 + skew - 1, 0)  # neighbour B not quite
    assert not controls.finalizable() and controls.finalize().links == []
    controls.progress.on_heartbeat("B", 5_000 + skew, 0)
    assert controls.finalizable()
    assert [m.kind for m in controls.finalize().links] == [WITHDRAW]
    assert len(controls.state) == 0 and controls.metrics.unsubscriptions_done == 1


def test_another_clients_id_cannot_be_cancelled(controls: Controls) -> None:
    labels = _labels(controls, 10)
    controls.apply([_sub(0, "ann", "s1", labels)], replay=False)
    out = controls.apply([_unsub(0, "bob", "s1")], replay=False)
    assert [d.reason for d in out.letters] == [
        "subscription 's1' belongs to client 'ann', not 'bob'"]
    assert controls.retiring == {} and len(controls.state) == 1


def test_repeats_change_nothing(controls: Controls) -> None:
    labels = _labels(controls, 10)
    controls.apply([_sub(0, "ann", "s1", labels)], replay=False)
    controls.apply([_unsub(0, "ann", "s1")], replay=False)
    reuse = controls.apply([_unsub(1, "ann", "s1"), _sub(1, "ann", "s1", labels)],
                           replay=False)  # while it retires
    _pass_everything(controls)
    assert [m.kind for m in controls.finalize().links] == [WITHDRAW]
    again = controls.apply([_unsub(2, "ann", "s1"), _sub(2, "ann", "s1", labels)],
                           replay=False)  # once removed
    assert controls.metrics.duplicates == 2
    reason = ("subscription id 's1' of client 'ann' was cancelled; ids are not reused (a "
              "repeat from an at-least-once writer?)")
    assert [d.reason for d in reuse.letters + again.letters] == [reason, reason]
    assert len(controls.state) == 0 and controls.pending == {}


def test_a_refused_subscription_is_a_dead_letter_with_the_states_reason(
        controls: Controls) -> None:
    out = controls.apply([_sub(0, "ann", "s1", np.array([1 << 40], dtype=np.uint64))],
                         replay=False)
    assert len(out.letters) == 1 and "outside this node's label space" in out.letters[0].reason
    assert len(controls.state) == 0


def test_replay_rebuilds_the_state_and_reports_nothing(controls: Controls) -> None:
    labels = _labels(controls, 10)
    junk = Message(topic=SUB, partition=0, offset=9, value=b"\x00junk")
    out = controls.apply([_sub(0, "ann", "s1", labels), junk, _unsub(0, "ann", "s1"),
                          _sub(1, "bob", "s2", labels)], replay=True)
    assert len(controls.state) == 2 and controls.retiring == {"s1": ("ann", 0)}
    assert (out.links, out.letters, out.clients) == ([], [], [])
    _pass_everything(controls)  # the live loop removes it once the inputs passed it
    controls.finalize()
    assert len(controls.state) == 1
    assert controls.metrics.control_in == 0 and controls.metrics.labels_advertised == 0


# -- a run of subscriptions read at once (connectors.serde.label_runs) ----------------------
def _run_with_rows(controls: Controls, n: int, seed: int) -> list[Message]:
    rng = np.random.default_rng(seed)
    space = ContentSpace.from_json(controls.settings.space)
    msgs = []
    for i in range(n):
        lo = float(rng.uniform(0, 90))
        hi = lo + float(rng.uniform(0, 10))
        labels = np.array(sorted({event_label(space, {"x": x})
                                  for x in np.linspace(lo, hi, 5)}), dtype=np.uint64)
        msgs.append(Message(topic=SUB, partition=0, offset=i, timestamp=(1, 0),
                            value=encode_label_subscription(
                                f"c{i % 3}", f"s{i}", labels, f"x between {lo} and {hi}",
                                struct.pack("<2d", lo, hi))))
    return msgs


def _outcome(controls: Controls, msgs: list[Message]) -> tuple:
    out = controls.apply(msgs, replay=False)
    edge = controls.edge
    assert edge is not None
    ids = [f"s{i}" for i in range(len(msgs))]
    clients = [controls.state.subscription(s)[0] for s in ids]
    rows = edge.export(clients, ids)
    return (out.acks, out.clients, [(m.to, m.kind, m.labels.tolist()) for m in out.links],
            [controls.state.subscription(s)[1].tolist() for s in ids], rows.bounds.tolist(),
            controls.metrics.control_in, len(edge), edge.index is not None
            and len(edge.index.labels))


@pytest.mark.skipif(not _jit.ENABLED, reason=f"kernels off: {_jit.REASON}")
def test_a_run_read_at_once_changes_what_one_by_one_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same run, read at once and (the fast path off) message by message: the same
    state, rows, index, acknowledgements and advertisements."""
    import broker_node.controls as module

    fast, slow = _controls(tmp_path / "a"), _controls(tmp_path / "b")
    taken = []
    real = module.read_run
    monkeypatch.setattr(module, "read_run", lambda *a: taken.append(real(*a)) or taken[-1])
    got_fast = _outcome(fast, _run_with_rows(fast, 40, 7))
    assert taken and taken[-1] is not None  # the run was read at once
    monkeypatch.setattr(module, "read_run", lambda *a: None)
    assert _outcome(slow, _run_with_rows(slow, 40, 7)) == got_fast


def _controls(where: Path) -> Controls:
    where.mkdir(exist_ok=True)
    path = where / "space.json"
    path.write_text(json.dumps(SPEC))
    space = ContentSpace.from_json(path)
    settings = NodeSettings(node="A", neighbours=("B",), space=path, unsubscribe_grace_s=0)
    state = BrokerState.for_space("A", ["B"], space)
    metrics = Metrics()
    return Controls(settings, state, Inbox("A", Topics("dls"), state, metrics), metrics)
