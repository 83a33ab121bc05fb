"""Equi-depth cells (dls.tuning): balance, refusals, and no false negative on tuned spaces."""

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dls.exceptions import SpaceSpecError
from dls.mapping import event_label
from dls.predicates import Subscription, parse_text
from dls.space import BreakpointAttribute, ContentSpace
from dls.tuning import cell_shares, equi_depth_breakpoints, tune_space

HIGH = 2**20 - 1


def spec(g: int = 32, names: tuple[str, ...] = ("a", "b")) -> dict:
    return {"attributes": [{"name": n, "type": "numeric", "low": 0, "high": HIGH,
                            "granules": g} for n in names]
            + [{"name": "kind", "type": "discrete", "values": ["x", "y"]}]}


def skewed(n: int, seed: int = 0) -> np.ndarray:
    """Most values near 0: a Pareto tail cut to the domain."""
    rng = np.random.default_rng(seed)
    return np.minimum(HIGH, (rng.pareto(1.2, n) * 2000).astype(np.int64))


def test_equal_cells_are_unbalanced_on_skewed_data_equi_depth_ones_are_not() -> None:
    train, test = skewed(20_000, 1), skewed(20_000, 2)
    equal = ContentSpace.from_spec(spec())
    tuned = ContentSpace.from_spec(tune_space(spec(), {"a": train, "b": train}))
    attr = tuned.by_name["a"]
    assert isinstance(attr, BreakpointAttribute) and attr.n_cells == 32
    assert cell_shares(equal, "a", test).max() > 0.5
    # each tuned cell holds about 1/32 of unseen data from the same distribution
    assert cell_shares(tuned, "a", test).max() < 2 / 32
    assert tuned.by_name["kind"] == equal.by_name["kind"]
    assert tuned.label_space_size == equal.label_space_size


def test_uniform_sample_gives_nearly_equal_cells() -> None:
    v = np.random.default_rng(3).integers(0, HIGH + 1, 50_000)
    bps = np.asarray(equi_depth_breakpoints(v, 16, 0, HIGH))
    assert len(bps) == 15
    assert np.all(np.abs(bps - np.arange(1, 16) * HIGH / 16) < HIGH / 16 * 0.1)


def test_repeated_values_merge_cells_and_a_constant_sample_keeps_the_attribute() -> None:
    bps = equi_depth_breakpoints([5, 5, 5, 9, 9, 100], 32, 0, HIGH)
    assert bps == (5.0, 9.0, 100.0)
    assert equi_depth_breakpoints([0, 0, 0], 8, 0, HIGH) == ()
    out = tune_space(spec(8), {"a": [7, 7, 7]})
    # every quantile is 7, one breakpoint: two cells; b had no sample and is unchanged
    assert out["attributes"][0]["breakpoints"] == [7]
    assert out["attributes"][1] == spec(8)["attributes"][1]
    assert tune_space(spec(8), {"a": [0, 0]})["attributes"][0] == spec(8)["attributes"][0]


def test_cells_option_overrides_the_spec() -> None:
    out = tune_space(spec(32), {"a": np.arange(1000)}, cells=4)
    assert out["attributes"][0]["breakpoints"] == [250, 500, 750]


@pytest.mark.parametrize(("samples", "kwargs", "field", "value", "fragment"), [
    ({"a": []}, {}, "a", [], "empty"),
    ({"a": [1.0, float("nan")]}, {}, "a", None, "not a finite number"),
    ({"a": [1, HIGH + 1]}, {}, "a", float(HIGH + 1), "not a finite number"),
    ({"a": [-3]}, {}, "a", -3.0, "not a finite number"),
    ({"a": ["x"]}, {}, "a", None, "must be numbers"),
    ({"zz": [1]}, {}, "zz", None, "unknown attribute 'zz'"),
    ({"kind": [1]}, {}, "kind", "discrete", "only numeric and string attributes can be tuned"),
    ({"a": [1]}, {"cells": 0}, "a", 0, "cells must be a positive integer"),
    ({"a": [1]}, {"cells": True}, "a", True, "cells must be a positive integer"),
])
def test_bad_samples_name_field_and_value_and_change_nothing(samples, kwargs, field, value,
                                                             fragment) -> None:
    given_spec = spec()
    before = copy.deepcopy(given_spec)
    with pytest.raises(SpaceSpecError, match=fragment) as err:
        tune_space(given_spec, samples, **kwargs)
    assert err.value.field == field
    if value is not None:
        assert err.value.value == value
    assert given_spec == before


def test_an_invalid_space_is_refused() -> None:
    with pytest.raises(SpaceSpecError):
        tune_space({"attributes": []}, {})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=300),
       st.integers(2, 40), st.randoms(use_true_random=False))
def test_tuned_spaces_never_lose_a_matching_event(sample, cells, rnd) -> None:
    """Whatever the sample, every event a subscription matches maps into its labels."""
    base = {"attributes": [{"name": "a", "type": "numeric", "low": 0, "high": 1000,
                            "granules": 8},
                           {"name": "b", "type": "numeric", "low": 0, "high": 1000,
                            "granules": 8}]}
    space = ContentSpace.from_spec(tune_space(base, {"a": sample, "b": sample[::-1]},
                                              cells=cells))
    edges = sorted({0, 1000, *sample, *(s + 1 for s in sample if s < 1000)})
    for _ in range(10):
        lo_a, hi_a = sorted(rnd.choice(edges) for _ in range(2))
        lo_b = rnd.choice(edges)
        text = f"a >= {lo_a} and a <= {hi_a} and b > {lo_b}" if lo_b < 1000 else \
            f"a >= {lo_a} and a <= {hi_a}"
        sub = Subscription(space, parse_text(text))
        labels = set(sub.labels().tolist())
        for _ in range(20):
            event = {"a": rnd.choice([lo_a, hi_a, rnd.randint(0, 1000)]),
                     "b": rnd.choice([lo_b, min(1000, lo_b + 1), rnd.randint(0, 1000)])}
            if sub.matches(event):
                assert event_label(space, event) in labels


def test_string_attributes_get_equi_depth_breakpoints() -> None:
    from dls.tuning import equi_depth_strings

    rng = np.random.default_rng(3)
    # skewed names: most start with "A"
    sample = [("A" if rng.random() < 0.8 else "Q") + f"{rng.integers(0, 10**6):06d}"
              for _ in range(4000)]
    spec = {"attributes": [{"name": "s", "type": "string", "breakpoints": ["H", "P", "X"],
                            "optional": True}]}
    before = ContentSpace.from_spec(spec)
    tuned = ContentSpace.from_spec(tune_space(spec, {"s": sample}))
    assert tuned.by_name["s"].optional and len(tuned.by_name["s"].breakpoints) == 3
    assert cell_shares(before, "s", sample).max() > 0.75
    assert cell_shares(tuned, "s", sample).max() < 0.3
    assert equi_depth_strings(["", "", "b"], 2) == ()  # "" is never a breakpoint
    with pytest.raises(SpaceSpecError, match="sample values must be strings, got 5"):
        equi_depth_strings(["a", 5], 2, field="s")
    sub = Subscription(tuned, "s prefix A0")
    for v in sample:
        if v.startswith("A0"):
            assert tuned.compose([tuned.by_name["s"].cell(v)]) in set(sub.labels().tolist())
