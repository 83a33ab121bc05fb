"""The numbers of the order rule: watermarks, link sequence numbers, heartbeats on demand."""

from __future__ import annotations

from broker_node.progress import Progress


def _p(*neighbours: str) -> Progress:
    return Progress(neighbours, publish_delay_s=10.0, clock_skew_s=1.0)


def test_the_low_watermark_is_the_least_of_the_inputs() -> None:
    p = _p("A", "C")
    p.publish_caught_up(100.0)  # read to the end at t = 100 s: nothing older than 89 s comes
    assert p.publish_passed == 89_000
    assert p.low_watermark() == 0  # A and C have said nothing yet
    p.on_heartbeat("A", 95_000, 0)
    p.on_heartbeat("C", 50_000, 0)
    assert p.low_watermark() == 50_000
    assert not p.passed(49_001)  # the skew (1 s) on top
    assert p.passed(49_000)
    p.on_heartbeat("C", 40_000, 0)  # an older heartbeat (a repeat) never moves it back
    assert p.low_watermark() == 50_000


def test_a_neighbour_is_promised_what_the_other_inputs_passed() -> None:
    p = _p("A", "C")
    p.publish_caught_up(100.0)
    p.on_heartbeat("A", 70_000, 0)
    p.on_heartbeat("C", 60_000, 0)
    assert p.watermark_for("A") == 60_000  # C's events may still go to A
    assert p.watermark_for("C") == 70_000  # A's events may still go to C


def test_link_control_counts_as_applied_once_everyone_behind_has_applied_it() -> None:
    p = _p("A", "C")
    p.on_link_seq("A", 5)  # A's advertisement, which made us advertise to C
    c_seq = p.next_seq("C")
    p.end_batch()
    assert p.link_applied_for("A") == 0  # C has not applied ours yet
    p.on_heartbeat("C", 0, c_seq - 1)
    assert p.link_applied_for("A") == 0
    p.on_heartbeat("C", 0, c_seq)
    assert p.link_applied_for("A") == 5
    assert p.acked({"A": 0, "C": c_seq}) and not p.acked({"A": 1, "C": c_seq})


def test_a_leaf_applies_at_once_and_sequence_numbers_only_grow() -> None:
    p = _p("B")
    p.on_link_seq("B", 7)
    p.end_batch()
    assert p.link_applied_for("B") == 7
    first = p.next_seq("B")
    assert p.next_seq("B") > first


def test_heartbeats_go_on_demand_and_an_idle_network_is_silent() -> None:
    p = _p("A", "C")
    p.publish_caught_up(100.0)
    assert p.beats(1.0, moved_every_s=0.1, every_s=1.0) == []  # nobody waits
    p.local_want = True  # a subscription retires here: we want A's and C's watermarks
    sent = p.beats(2.0, moved_every_s=0.1, every_s=1.0)
    assert {(to, want) for to, _, _, want in sent} == {("A", True), ("C", True)}
    assert p.beats(2.05, moved_every_s=0.1, every_s=1.0) == []  # nothing moved
    assert p.beats(3.1, moved_every_s=0.1, every_s=1.0) != []  # again while waiting
    p.local_want = False
    p.beats(4.2, moved_every_s=0.1, every_s=1.0)  # tells them it no longer waits
    assert p.beats(9.0, moved_every_s=0.1, every_s=1.0) == []
    p.on_heartbeat("A", 0, 0, wants_watermark=True)  # A waits for ours, which moves
    p.publish_caught_up(200.0)
    sent = p.beats(9.5, moved_every_s=0.1, every_s=1.0)
    assert ("C", True) in {(to, want) for to, _, _, want in sent}  # C is asked on A's behalf


def test_what_is_applied_behind_is_kept_when_no_heartbeat_goes_out_at_once() -> None:
    """Found by a harness run: a value computed between two heartbeats was dropped."""
    p = _p("A", "C")
    p.on_link_seq("C", 3)  # C's link control, applied here: something to report
    p.on_link_seq("A", 5)
    c_seq = p.next_seq("C")
    p.end_batch()
    assert p.beats(10.0, moved_every_s=0.25, every_s=1.0) != []  # a heartbeat goes out
    p.on_heartbeat("C", 0, c_seq)
    assert p.beats(10.1, moved_every_s=0.25, every_s=1.0) == []  # too soon: none now
    sent = p.beats(10.5, moved_every_s=0.25, every_s=1.0)
    assert ("A", 5) in {(to, applied) for to, _, applied, _ in sent}


def test_a_watermark_heartbeat_does_not_hold_back_an_acknowledgement() -> None:
    """Watermarks move at every check while wanted; their heartbeats delayed the next
    link_applied by up to ``moved_every_s`` per hop, and each subscribe(wait=...) with it."""
    p = _p("A", "C")
    p.on_heartbeat("A", 0, 0, wants_watermark=True)  # A waits for our watermark
    p.publish_caught_up(100.0)
    assert p.beats(10.0, moved_every_s=0.25, every_s=1.0) != []  # a watermark moved
    p.on_link_seq("C", 3)
    p.end_batch()  # C's link control applied here, nothing sent on: applied behind us
    sent = p.beats(10.05, moved_every_s=0.25, every_s=1.0)  # at once, not at 10.25
    assert ("C", 3) in {(to, applied) for to, _, applied, _ in sent}
    p.on_link_seq("C", 4)
    p.end_batch()
    assert p.beats(10.1, moved_every_s=0.25, every_s=1.0) == []  # acknowledgements paced
    assert ("C", 4) in {(to, a) for to, _, a, _ in p.beats(10.3, moved_every_s=0.25,
                                                              every_s=1.0)}


def test_link_control_counts_as_applied_only_once_its_batch_is_committed() -> None:
    """At least once: a node that reported before its commit could crash and replay later."""
    p = _p("B")
    p.on_link_seq("B", 7)
    assert p.end_batch(3)  # applied in batch 3
    p.on_link_seq("B", 9)
    assert p.end_batch(4)
    assert not p.end_batch(5)  # nothing moved
    assert p.link_applied_for("B") == 0  # batch 3 not committed yet
    p.durable = 3
    assert p.link_applied_for("B") == 7
    p.durable = 5
    assert p.link_applied_for("B") == 9
