"""Control topics keep everything; forwarded events do not (issue: link topics expired state)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker_node.config import NodeSettings
from broker_node.exceptions import BrokerError
from broker_node.service import NodeService
from connectors.kafka import ensure_topics
from connectors.topic_settings import enforce_topic_config, topic_config_mismatches
from connectors.topics import CONTROL_TOPIC_CONFIG, Topics

pytestmark = pytest.mark.integration

SPEC = {"attributes": [{"name": "x", "type": "numeric", "low": 0, "high": 100,
                        "granules": 8}]}


def _node(bootstrap: str, prefix: str, tmp_path: Path, name: str, neighbours: tuple[str, ...]
          ) -> NodeService:
    space = tmp_path / "space.json"
    space.write_text(json.dumps(SPEC))
    return NodeService(NodeSettings(node=name, neighbours=neighbours, space=space,
                                    bootstrap=bootstrap, topic_prefix=prefix))


def test_a_starting_node_makes_its_outgoing_link_control_keep_everything(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    """The sender starts first: the receiver's inbound link control must still keep all.

    Before the split, A created ``link(A, B)`` with the broker's default retention (seven
    days), so B's advertisements from A expired and a restart of B lost them.
    """
    t = Topics(topic_prefix)
    svc = _node(kafka_bootstrap, topic_prefix, tmp_path, "A", ("B",))
    svc.start()
    try:
        inbound_of_b = [t.link("A", "B"), t.link("B", "A")]
        assert topic_config_mismatches(kafka_bootstrap, inbound_of_b,
                                       CONTROL_TOPIC_CONFIG) == {}
        # Forwarded events have topics of their own, with ordinary retention.
        fwd = topic_config_mismatches(kafka_bootstrap, [t.forward("A", "B")],
                                      {"retention.ms": "-1"})
        assert t.forward("A", "B") in fwd
    finally:
        svc.close()


def test_a_node_repairs_a_control_topic_created_with_expiring_retention(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    t = Topics(topic_prefix)
    bad = t.node_subscribe("A")
    ensure_topics(kafka_bootstrap, [bad, t.link("B", "A")],
                  config={"retention.ms": 3_600_000, "retention.bytes": 1_000_000})
    assert set(topic_config_mismatches(kafka_bootstrap, [bad], CONTROL_TOPIC_CONFIG)[bad]) == {
        "retention.ms", "retention.bytes"}
    svc = _node(kafka_bootstrap, topic_prefix, tmp_path, "A", ("B",))
    svc.start()
    try:
        assert topic_config_mismatches(kafka_bootstrap, [bad, t.link("B", "A")],
                                       CONTROL_TOPIC_CONFIG) == {}
    finally:
        svc.close()


def test_enforcing_a_setting_on_a_missing_topic_names_the_topic(
        kafka_bootstrap: str, topic_prefix: str) -> None:
    missing = f"{topic_prefix}.never-made"
    with pytest.raises(Exception, match="never-made") as info:
        enforce_topic_config(kafka_bootstrap, [missing], CONTROL_TOPIC_CONFIG, why="a test")
    assert getattr(info.value, "value", None) == missing


def test_a_node_that_cannot_repair_a_control_topic_refuses_to_start(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A repair the broker refuses (here an invalid value) stops the start with a reason."""
    t = Topics(topic_prefix)
    ensure_topics(kafka_bootstrap, [t.node_subscribe("A"), t.node_unsubscribe("A")],
                  config={"retention.ms": 3_600_000})
    svc = _node(kafka_bootstrap, topic_prefix, tmp_path, "A", ())
    import broker_node.service as service_mod

    monkeypatch.setattr(service_mod, "FOREVER", {**CONTROL_TOPIC_CONFIG,
                                                 "retention.ms": "not-a-number"})
    try:
        with pytest.raises(BrokerError, match="refuses to start.*retention.ms") as info:
            svc.start()
        assert info.value.value in (t.node_subscribe("A"), t.node_unsubscribe("A"))
    finally:
        svc.close()
