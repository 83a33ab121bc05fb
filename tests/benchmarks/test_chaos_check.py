"""The fault harness's checker on hand-made histories (no broker), and its helpers."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from benchmarks.chaos.check import check, matches
from benchmarks.chaos.client import live_from_history, next_offsets
from benchmarks.chaos.cluster import parse_metrics, parse_shards
from benchmarks.chaos.common import SPACE, JsonLines, random_event, random_where, read_jsonl
from benchmarks.chaos.run import _shard_gaps, _shard_seconds
from benchmarks.chaos.scenarios import (
    SCENARIOS,
    FaultCounts,
    joiner_name,
    kill_gap,
    min_duration,
    plan,
    replica_names,
)
from dls.predicates import Subscription
from dls.space import ContentSpace

WHERE = [{"attr": "sym", "op": "in", "values": ["A"]},
         {"attr": "price", "op": "between", "low": 10, "high": 20}]
HIT = {"sym": "A", "price": 15.0}
MISS = {"sym": "B", "price": 15.0}


class Run:
    """A run directory written line by line, as the harness's processes write it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for sub in ("clients", "publishers"):
            (root / sub).mkdir(parents=True, exist_ok=True)

    def _line(self, path: Path, **rec: Any) -> None:
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec) + "\n")

    def publish(self, eid: str, attrs: dict[str, Any], t0: float, t1: float | None = None,
                ok: bool | None = True) -> None:
        path = self.root / "publishers" / "p.jsonl"
        self._line(path, k="pub", id=eid, a=attrs, t0=t0, t1=t0 + 0.01 if t1 is None else t1)
        if ok is not None:
            self._line(path, k="dr", id=eid, ok=ok, t=t0 + 0.02)

    def sub(self, client: str, k: str, sid: str, t: float, **more: Any) -> None:
        self._line(self.root / "clients" / f"{client}.subs.jsonl", k=k, sid=sid, t=t, **more)

    def subscribe(self, client: str, sid: str, call: float, ack: float | None,
                  cancel: float | None = None, where: Any = None) -> None:
        self.sub(client, "sub_call", sid, call, where=where or WHERE)
        if ack is None:
            self.sub(client, "sub_fail", sid, call + 0.5, err="down")
        else:
            self.sub(client, "sub_ack", sid, ack)
        if cancel is not None:
            self.sub(client, "unsub_call", sid, cancel)
            self.sub(client, "unsub_done", sid, cancel + 0.01)

    def deliver(self, client: str, eid: str, offset: int, partition: int = 0) -> None:
        self._line(self.root / "clients" / f"{client}.deliv.jsonl", id=eid, p=partition,
                   o=offset, t=0.0)


@pytest.fixture
def run(tmp_path: Path) -> Run:
    return Run(tmp_path)


def test_every_expected_pair_delivered(run: Run) -> None:
    run.subscribe("c", "s1", call=9.0, ack=10.0, cancel=20.0)
    run.publish("e1", HIT, 11.0)
    run.publish("e2", MISS, 12.0)  # matches nothing: not expected
    run.deliver("c", "e1", 0)
    v = check(run.root)
    assert (v["published"], v["expected"], v["missing"], v["duplicates"]) == (2, 1, 0, 0)
    assert v["unexpected"] == 0


def test_a_missing_pair_is_counted_with_its_margins(run: Run) -> None:
    run.subscribe("c", "s1", call=9.0, ack=10.0, cancel=30.0)
    run.publish("e1", HIT, 10.5)  # 0.5 s after the acknowledgement
    run.publish("e2", HIT, 15.0)
    run.publish("e3", HIT, 29.5, 29.6)  # 0.4 s before the cancellation
    v = check(run.root)
    assert v["expected"] == 3 and v["missing"] == 3
    assert v["missing_by_margin"] == {"after_ack": 1, "before_cancel": 1, "interior": 1}
    assert {m["event"] for m in v["missing_sample"]} == {"e1", "e2", "e3"}


def test_window_boundaries_are_strict(run: Run) -> None:
    run.subscribe("c", "s1", call=9.0, ack=10.0, cancel=20.0)
    run.publish("at-ack", HIT, 10.0)  # t0 == ack: not after it
    run.publish("over-ack", HIT, 9.99, 10.02)  # the call began before the ack
    run.publish("after-ack", HIT, 10.001)
    run.publish("ends-at-cancel", HIT, 19.9, 20.0)  # t1 == cancel: not before it
    run.publish("before-cancel", HIT, 19.9, 19.999)
    run.publish("after-cancel", HIT, 20.5)
    v = check(run.root)
    assert v["expected"] == 2 and v["missing"] == 2
    assert {m["event"] for m in v["missing_sample"]} == {"after-ack", "before-cancel"}


def test_never_cancelled_subscription_stays_expected(run: Run) -> None:
    run.subscribe("c", "s1", call=9.0, ack=10.0)
    run.publish("e1", HIT, 1000.0)
    assert check(run.root)["expected"] == 1


def test_repeats_at_distinct_offsets_are_duplicates(run: Run) -> None:
    run.subscribe("c", "s1", call=9.0, ack=10.0)
    run.publish("e1", HIT, 11.0)
    run.publish("e2", HIT, 12.0)
    run.deliver("c", "e1", 0)
    run.deliver("c", "e1", 1)  # a second copy in Kafka
    run.deliver("c", "e1", 2)  # a third
    run.deliver("c", "e2", 3)
    run.deliver("c", "e2", 3)  # the same copy read twice: the harness's, not a duplicate
    v = check(run.root)
    assert v["missing"] == 0 and v["duplicates"] == 2


def test_same_offset_in_two_partitions_is_two_copies(run: Run) -> None:
    run.subscribe("c", "s1", call=9.0, ack=10.0)
    run.publish("e1", HIT, 11.0)
    run.deliver("c", "e1", 5, partition=0)
    run.deliver("c", "e1", 5, partition=1)
    assert check(run.root)["duplicates"] == 1


def test_only_confirmed_publications_count(run: Run) -> None:
    run.subscribe("c", "s1", call=9.0, ack=10.0)
    run.publish("failed", HIT, 11.0, ok=False)
    run.publish("unreported", HIT, 12.0, ok=None)
    run.publish("ok", HIT, 13.0)
    run.deliver("c", "ok", 0)
    v = check(run.root)
    assert (v["published"], v["publish_failed"], v["publish_unreported"]) == (1, 1, 1)
    assert v["expected"] == 1 and v["missing"] == 0


def test_unacknowledged_subscription_is_not_expected(run: Run) -> None:
    run.subscribe("c", "s1", call=9.0, ack=None)  # subscribe() raised
    run.publish("e1", HIT, 11.0)
    run.deliver("c", "e1", 0)  # it may have reached the node all the same
    v = check(run.root)
    assert v["expected"] == 0 and v["missing"] == 0
    assert v["unexpected_by_reason"] == {"boundary": 1}
    assert v["subscriptions_failed"] == 1


def test_unexpected_pairs_by_reason(run: Run) -> None:
    run.subscribe("c", "s1", call=9.0, ack=10.0, cancel=20.0)
    run.publish("fp", MISS, 11.0)  # matches no predicate of c
    run.publish("late", HIT, 25.0)  # matches, but the subscription was gone
    run.publish("edge", HIT, 19.995, 20.005)  # published across the cancellation
    for i, eid in enumerate(("fp", "late", "edge", "ghost")):
        run.deliver("c", eid, i)
    v = check(run.root)
    assert v["missing"] == 0
    assert v["unexpected_by_reason"] == {"boundary": 1, "false_positive": 1,
                                         "out_of_window": 1, "unknown_event": 1}


def test_restarted_client_keeps_earlier_subscriptions_until_cancelled(run: Run) -> None:
    run.sub("c", "start", "", 0.0, restart=False)
    run.subscribe("c", "s1", call=9.0, ack=10.0)
    run.sub("c", "start", "", 30.0, restart=True)  # killed and restarted
    run.sub("c", "unsub_call", "s1", 50.0)  # the new process cancels the old one
    run.publish("during", HIT, 40.0)
    run.publish("after", HIT, 60.0)
    v = check(run.root)
    assert v["client_restarts"] == 1
    assert v["expected"] == 1 and v["missing"] == 1
    assert v["missing_sample"][0]["event"] == "during"


def test_two_clients_are_separate(run: Run) -> None:
    run.subscribe("a", "sa", call=9.0, ack=10.0)
    run.subscribe("b", "sb", call=9.0, ack=10.0)
    run.publish("e1", HIT, 11.0)
    run.deliver("a", "e1", 0)
    v = check(run.root)
    assert v["expected"] == 2 and v["missing"] == 1
    assert v["missing_sample"][0]["client"] == "b"


def test_a_line_cut_by_a_kill_is_skipped(run: Run) -> None:
    run.subscribe("c", "s1", call=9.0, ack=10.0)
    run.publish("e1", HIT, 11.0)
    path = run.root / "clients" / "c.deliv.jsonl"
    path.write_text('{"id": "e1", "p": 0, "o')  # killed mid-line
    out = JsonLines(path)  # the restarted process ends that line first
    out.write(id="e1", p=0, o=0, t=1.0)
    out.close()
    assert [r["id"] for r in read_jsonl(path)] == ["e1"]
    assert check(run.root)["missing"] == 0


def test_checker_predicates_agree_with_the_product() -> None:
    space = ContentSpace.from_spec(SPACE)
    rng = random.Random(5)
    for _ in range(300):
        where = random_where(rng)
        sub = Subscription(space, where)
        for _ in range(20):
            attrs = random_event(rng)
            assert matches(where, attrs) == sub.matches(attrs), (where, attrs)
    edge = [{"attr": "price", "op": "between", "low": 10.0, "high": 20.0}]
    assert matches(edge, {"price": 10.0}) and matches(edge, {"price": 20.0})
    assert not matches([{"attr": "price", "op": "<", "value": 10}], {"price": 10.0})


def test_restart_bookkeeping_of_the_client_program() -> None:
    recs = [{"k": "sub_call", "sid": "a"}, {"k": "sub_ack", "sid": "a"},
            {"k": "sub_call", "sid": "b"}, {"k": "sub_fail", "sid": "b"},
            {"k": "sub_call", "sid": "c"}, {"k": "unsub_call", "sid": "a"}]
    assert live_from_history(recs) == ["b", "c"]  # a failed subscribe may be live: kept
    assert next_offsets([{"p": 0, "o": 4}, {"p": 0, "o": 2}, {"p": 2, "o": 0}]) == {0: 5, 2: 1}


def test_fault_plans_are_reproducible() -> None:
    counts = FaultCounts(node_kills=10, broker_kills=2, client_kills=2, stop_s=50.0)
    sc = SCENARIOS["node_kill-eos-topics"]
    one = plan(sc, 7, 60.0, ["A", "B", "C"], ["c1", "c2"], counts)
    assert one == plan(sc, 7, 60.0, ["A", "B", "C"], ["c1", "c2"], counts)
    assert one != plan(sc, 8, 60.0, ["A", "B", "C"], ["c1", "c2"], counts)
    assert len(one) == 10 and all(0.5 <= f.down_s <= 3.0 for f in one)
    assert [f.at for f in one] == sorted(f.at for f in one) and one[-1].at < 60.0
    stop = plan(SCENARIOS["node_stop-eos-topics"], 7, 90.0, ["A"], [], counts)
    assert len(stop) == 1 and stop[0].down_s == 50.0
    assert len(plan(SCENARIOS["broker_kill-eos-topics"], 7, 70.0, ["A"], [], counts)) == 2
    assert plan(SCENARIOS["baseline"], 7, 60.0, ["A"], [], counts) == []


def test_replica_fault_plan_kills_b1_or_b2_and_b3_joins_then_leaves() -> None:
    counts = FaultCounts(node_kills=10)
    sc = SCENARIOS["replicas-eos-topics"]
    assert (sc.shards, sc.replicas, sc.fault) == (4, 2, "replica_kill")
    assert SCENARIOS["replicas-alo-topics"].delivery == "at_least_once"
    assert replica_names(sc) == ["B1", "B2"] and joiner_name(sc) == "B3"
    assert replica_names(SCENARIOS["node_kill-eos-topics"]) == ["B"]
    one = plan(sc, 21, 60.0, replica_names(sc), ["c1"], counts)
    assert one == plan(sc, 21, 60.0, replica_names(sc), ["c1"], counts)
    assert [f.at for f in one] == sorted(f.at for f in one)  # the injector's order
    kills = [f for f in one if f.kind == "replica_kill"]
    assert len(kills) == 10 and {f.target for f in kills} == {"B1", "B2"}
    assert all(0.5 <= f.down_s <= 3.0 for f in kills)
    (join,) = [f for f in one if f.kind == "replica_join"]
    (leave,) = [f for f in one if f.kind == "replica_leave"]
    assert join.target == leave.target == "B3"
    assert 19.0 <= join.at <= 21.0 and 39.0 <= leave.at <= 41.0
    # In the default phase the kills are a session and more apart: the group settles.
    long = plan(sc, 21, min_duration(sc, counts), replica_names(sc), [], counts)
    at = [f.at for f in long if f.kind == "replica_kill"]
    assert len(at) == 10 and kill_gap(sc) == 13.0
    assert min(b - a for a, b in zip(at, at[1:], strict=False)) >= kill_gap(sc)
    # The plans of the unsharded scenarios are as before the replica scenarios came.
    nk = plan(SCENARIOS["node_kill-eos-topics"], 7, 60.0, ["A", "B", "C"], [], counts)
    assert {f.kind for f in nk} == {"node_kill"} and len(nk) == 10


PAGE = """# HELP dls_batches_total batches
# TYPE dls_batches_total counter
dls_batches_total{node="B",shard="0"} 12.0
dls_batches_total{node="B",shard="3"} 5.0
dls_subscriptions{node="B",shard="0"} 2.0
dls_subscriptions{node="B",shard="3"} 1.0
dls_ert_fill{neighbour="A",node="B",shard="0"} 0.5
dls_client_deliveries_total{client="cB0",node="B",shard="3"} 7.0
"""


def test_a_replicas_metrics_page_is_summed_over_its_shards() -> None:
    m = parse_metrics(PAGE)
    assert m == {"dls_batches_total": 17.0, "dls_subscriptions": 3.0}
    assert parse_shards(PAGE) == {0, 3}
    one = 'dls_batches_total{node="A"} 4.0\ndls_subscriptions{node="A"} 2.0\n'
    assert parse_metrics(one) == {"dls_batches_total": 4.0, "dls_subscriptions": 2.0}
    assert parse_shards(one) == set()  # an unsharded node
    assert parse_metrics("# nothing yet\n") == {}


def test_shard_hand_overs_are_read_from_the_samples() -> None:
    node_of = {"A": "A", "B1": "B", "B2": "B"}
    samples = [{"t": 0.0, "node": "A", "shards": [0, 1]},
               {"t": 0.0, "node": "B1", "shards": [0, 1]},
               {"t": 0.0, "node": "B2", "shards": []},
               {"t": 2.0, "node": "A", "shards": [0, 1]},
               {"t": 2.0, "node": "B1", "shards": None},  # killed: page down
               {"t": 2.0, "node": "B2", "shards": []},
               {"t": 4.0, "node": "A", "shards": [0, 1]},
               {"t": 4.0, "node": "B2", "shards": [1]},  # shard 0 still nowhere
               {"t": 6.0, "node": "A", "shards": [0, 1]},
               {"t": 6.0, "node": "B1", "shards": [0]},
               {"t": 6.0, "node": "B2", "shards": [1]},
               {"t": 8.0, "node": "B2", "shards": [1]}]  # after publishing stopped
    assert _shard_gaps(samples, 7.0, node_of, 2) == {"A": {"0": 2.0, "1": 2.0},
                                                     "B": {"0": 6.0, "1": 4.0}}
    assert _shard_seconds(samples, 7.0) == {"A": {"0": 6.0, "1": 6.0},
                                            "B1": {"0": 2.0, "1": 2.0}, "B2": {"1": 2.0}}


def test_three_broker_plan_kills_one_server_and_brings_it_back_later() -> None:
    counts = FaultCounts(broker_kills=2)
    sc = SCENARIOS["broker3_kill-eos-topics"]
    assert sc.brokers == 3 and SCENARIOS["broker3_kill-alo-topics"].delivery == "at_least_once"
    duration = min_duration(sc, counts)
    faults = plan(sc, 21, duration, ["A", "B", "C"], [], counts)
    assert faults == plan(sc, 21, duration, ["A", "B", "C"], [], counts)
    assert [f.kind for f in faults] == ["broker3_kill"] * 2
    assert {f.target for f in faults} <= {"kafka1", "kafka2", "kafka3"}
    assert all(20.0 <= f.down_s <= 30.0 for f in faults)
    # the second kill comes after the first server is back (down, restart, settle)
    assert faults[1].at - faults[0].at > faults[0].down_s


def test_pauses_are_the_waits_of_events_published_around_a_kill(run: Run) -> None:
    from benchmarks.chaos.brokers import event_waits, pauses

    for i in range(10):  # one event a second, read 0.1 s later; the one at 5 s, 8 s later
        run.publish(f"e{i}", HIT, t0=100.0 + i)
        wait = 8.0 if i == 5 else 0.1
        run._line(run.root / "clients" / "c.deliv.jsonl", id=f"e{i}", p=0, o=i,
                  t=100.0 + i + wait)
    run._line(run.root / "clients" / "d.deliv.jsonl", id="e5", p=0, o=0, t=120.0)  # later
    assert event_waits(run.root)[5] == (105.0, 8.0)
    faults = [{"kind": "broker3_kill", "target": "kafka2", "t": 104.5, "at": 4.5},
              {"kind": "leaders_moved", "target": "kafka2", "leader_s": 7.5, "isr_s": 7.6,
               "led": 3}]
    p = pauses(run.root, faults)
    assert (p["max_wait_s"], p["failover_s"]) == (8.0, 7.6)  # the later of leader and ISR
    # no read from 109.1 (e9) to 113.0 (e5): the longest gap that began by the failover
    assert (p["pause_s"], p["kills"][0]["reads_again_after_failover_s"]) == (3.9, 0.9)
    assert p["kills"][0]["events"] == 10 - 3  # published 102.5 .. 114.1
    assert p["usual_max_s"] == 0.1
