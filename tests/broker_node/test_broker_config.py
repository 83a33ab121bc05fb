"""BrokerConfig (broker_node.broker_config): validation and sizing from a space spec."""

import dataclasses

import pytest

from broker_node.broker_config import BrokerConfig
from broker_node.exceptions import BrokerError
from broker_node.state import BrokerConfig as ReExported
from dls.cbf import size_for
from dls.space import ContentSpace

ATTRS = [{"name": "x", "type": "numeric", "low": 0, "high": 256, "granules": 256}]


def test_the_state_module_re_exports_the_same_class():
    assert ReExported is BrokerConfig


@pytest.mark.parametrize(("kw", "field", "match"), [
    ({"mode": "fast"}, "mode", "mode must be"),
    ({"client_filter": "bloom"}, "client_filter", "client_filter must be"),
    ({"routing_filter": "bloom"}, "routing_filter", "routing_filter must be"),
    ({"mode": "paper", "routing_filter": "direct"}, "routing_filter",
     "paper mode routes on CBFs"),
    ({"match_threads": 0}, "match_threads", "positive integer"),
    ({"update_threads": True}, "update_threads", "positive integer"),
])
def test_a_bad_field_is_named_with_its_value(kw, field, match):
    with pytest.raises(BrokerError, match=match) as err:
        BrokerConfig(**kw)
    assert err.value.field == field
    assert err.value.value == kw[field]


def test_it_is_frozen():
    cfg = BrokerConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.mode = "paper"  # type: ignore[misc]


def test_sizes_come_from_the_space_spec_then_the_overrides():
    space = ContentSpace.from_spec({"attributes": ATTRS, "filters": {
        "counter_bits": 8, "seed": 7,
        "client": {"expected_items": 1000, "fp_rate": 0.01},
        "routing": {"m": 4096, "k": 3}}})
    cfg = BrokerConfig.from_space(space)
    assert (cfg.client_m, cfg.client_k) == size_for(1000, 0.01)
    assert cfg.client_fp_target == 0.01
    assert (cfg.routing_m, cfg.routing_k, cfg.routing_fp_target) == (4096, 3, 2.0 ** -3)
    assert (cfg.counter_bits, cfg.seed) == (8, 7)
    over = BrokerConfig.from_space(space, routing_k=5, mode="paper")
    assert (over.routing_m, over.routing_k, over.mode) == (4096, 5, "paper")
    assert over.client_m == cfg.client_m
