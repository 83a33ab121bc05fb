"""The space spec models (dls.space_spec): what they accept, and the one error they raise."""

import json
import math
from types import MappingProxyType

import numpy as np
import pytest
from pydantic import ValidationError

from dls.exceptions import SpaceSpecError
from dls.space import ContentSpace, FilterSettings
from dls.space_spec import parse_space_spec
from tests.dls.test_space import SPEC


def spec(**top):
    out = json.loads(json.dumps(SPEC))
    out.update(top)
    return out


def refused(s):
    with pytest.raises(SpaceSpecError) as exc:
        ContentSpace.from_spec(s)
    assert not isinstance(exc.value, ValidationError)
    assert exc.value.__cause__ is None and exc.value.__suppress_context__
    return exc.value


@pytest.mark.parametrize("mutate, message, field, value", [
    (lambda s: s["attributes"][0].update(granules=True), "attribute 'price': granules must be "
     "a positive integer, got True", "price", True),
    (lambda s: s["attributes"][0].pop("low"), "attribute 'price': low must be a number, got "
     "None", "price", None),
    (lambda s: s["attributes"][1]["breakpoints"].append("x"), "attribute 'temp': breakpoint "
     "must be a number, got 'x'", "temp", "x"),
    (lambda s: s["attributes"][1].update(breakpoints=[]), "attribute 'temp': breakpoints must "
     "be a non-empty list, got []", "temp", []),
    (lambda s: s["attributes"][2].update(values=["A", 3]), "attribute 'sym': discrete values "
     "must be strings, got 3", "sym", 3),
    (lambda s: s["attributes"][2].update(values=("A",)), "attribute 'sym': values must be a "
     "non-empty list, got ('A',)", "sym", ("A",)),
    (lambda s: s["attributes"].__setitem__(1, 5), "attributes[1] must be an object, got 5",
     "attributes[1]", 5),
    (lambda s: s["attributes"][0].update(name="a b"), "attributes[0].name must be an "
     "identifier (letters, digits, _ and ., not a keyword), got 'a b'", "attributes[0].name",
     "a b"),
    (lambda s: s.update(attributes=[]), "attributes must be a non-empty list, got []",
     "attributes", []),
    (lambda s: s.update(colour=1), "space spec: unknown key 'colour'", "colour", 1),
    (lambda s: s.update(filters=[]), "filters must be an object, got []", "filters", []),
    (lambda s: s.update(filters={"seed": -1}), "filters.seed must be an integer in "
     "[0, 4294967295], got -1", "filters.seed", -1),
    (lambda s: s.update(filters={"label_budget": 2**40 + 1}), "filters.label_budget must be "
     "an integer in [1, 1099511627776], got 1099511627777", "filters.label_budget", 2**40 + 1),
    (lambda s: s.update(filters={"counter_bits": 5}), "filters.counter_bits must be 4 or 8, "
     "got 5", "filters.counter_bits", 5),
    (lambda s: s.update(filters={"routing": None}), "filters.routing must be an object, got "
     "None", "filters.routing", None),
    (lambda s: s.update(filters={"client": {"m": 8}}), "filters.client must hold either "
     "expected_items and fp_rate, or m and k; got keys ['m']", "filters.client", {"m": 8}),
    (lambda s: s.update(filters={"client": {"expected_items": 9, "fp_rate": 1}}),
     "filters.client.fp_rate must be in (0, 1), got 1", "filters.client.fp_rate", 1),
    (lambda s: s.update(filters={"routing": {"m": 64, "k": 65}}), "filters.routing.k must be "
     "an integer in [1, 64], got 65", "filters.routing.k", 65),
    (lambda s: s.update(filters={"tint": 1}), "filters: unknown key 'tint'", "filters.tint", 1),
])
def test_each_rule_names_its_field_and_value(mutate, message, field, value):
    s = spec()
    mutate(s)
    err = refused(s)
    assert (str(err), err.field, err.value) == (message, field, value)


def test_not_an_object():
    err = refused(["attributes"])
    assert (str(err), err.field) == ("a space spec must be an object, got ['attributes']",
                                     "space")


@pytest.mark.parametrize("attribute, message", [
    # the name is checked before the type, the type before unknown keys, unknown keys (the
    # first by name) before the other fields, low and high before how the domain is cut
    ({"name": "in", "type": "text"}, "attributes[0].name must be an identifier"),
    ({"name": "a", "type": "text", "zz": 1},
     "type must be 'numeric', 'discrete', 'string' or 'hashed', got 'text'"),
    ({"name": "a", "type": "numeric", "values": ["x"], "low": "x"}, "unknown key 'values'"),
    ({"name": "a", "type": "discrete", "values": [], "low": 0, "granules": 1},
     "unknown key 'granules'"),
    ({"name": "a", "type": "numeric", "low": 5, "high": 1, "granules": 0}, "low 5.0 must be "
     "below high 1.0"),
    ({"name": "a", "type": "numeric", "low": 0, "high": 1}, "give exactly one of granules or "
     "breakpoints"),
    ({"name": "a", "type": "numeric", "low": 0, "high": 1, "granules": 0, "breakpoints": "x"},
     "give exactly one of granules or breakpoints"),
    ({"name": "a", "type": ["numeric"]},
     "type must be 'numeric', 'discrete', 'string' or 'hashed', got ['numeric']"),
])
def test_the_first_broken_rule_is_reported(attribute, message):
    err = refused({"attributes": [attribute]})
    assert message in str(err)


def test_unknown_top_level_keys_come_before_the_attributes():
    err = refused({"attributes": [{"name": "in"}], "colour": 1, "filters": {"seed": -1}})
    assert str(err) == "space spec: unknown key 'colour'"
    err = refused({"attributes": [{"name": "a", "type": "numeric", "low": 0, "high": 1,
                                   "granules": 0}], "filters": {"seed": -1}})
    assert "granules" in str(err)


@pytest.mark.parametrize("name", ["a\n", "and", "Between", "1a", "", "a-b"])
def test_names_that_cannot_be_attributes(name):
    err = refused({"attributes": [{"name": name, "type": "discrete", "values": ["x"]}]})
    assert err.field == "attributes[0].name" and err.value == name


def test_numbers_are_taken_as_float_bools_are_not_numbers():
    sp = ContentSpace.from_spec({"attributes": [
        {"name": "a", "type": "numeric", "low": np.int64(0), "high": np.float32(2.5),
         "granules": 4},
        {"name": "b", "type": "numeric", "low": 0, "high": 9, "breakpoints": [1, np.int32(3)]},
    ], "filters": {"counter_bits": 8.0, "client": {"expected_items": 5,
                                                    "fp_rate": np.float64(0.5)}}})
    a, b = sp.attributes
    assert type(a.low) is float and type(a.high) is float and a.high == 2.5
    assert b.breakpoints == (1.0, 3.0) and all(type(x) is float for x in b.breakpoints)
    assert sp.filters.counter_bits == 8 and type(sp.filters.counter_bits) is int
    assert sp.filters.client == {"expected_items": 5, "fp_rate": 0.5}
    for bad, rule in ((True, "a number"), (np.bool_(True), "a number"), ("1", "a number"),
                      (None, "a number"), (math.inf, "finite"), (10**400, "finite")):
        err = refused({"attributes": [{"name": "a", "type": "numeric", "low": 0, "high": bad,
                                       "granules": 1}]})
        assert err.field == "a" and err.value is bad
        assert f"high must be {rule}, got" in str(err)


def test_any_mapping_is_an_object_and_defaults_fill_what_is_left_out():
    attrs = [MappingProxyType({"name": "a", "type": "discrete", "values": ["x", "y"]})]
    sp = ContentSpace.from_spec(MappingProxyType({"attributes": attrs,
                                                  "filters": {"seed": 7}}))
    assert sp.filters == FilterSettings(seed=7)
    assert ContentSpace.from_spec({"attributes": attrs, "filters": None}).filters == \
        FilterSettings()
    assert FilterSettings.from_spec({"routing": {"m": 64, "k": 2}}).routing == {"m": 64, "k": 2}


def test_parse_space_spec_gives_the_models():
    parsed = parse_space_spec(SPEC)
    assert [type(a).__name__ for a in parsed.attributes] == ["UniformSpec", "BreakpointSpec",
                                                              "DiscreteSpec"]
    assert parsed.filter_settings() == FilterSettings()
