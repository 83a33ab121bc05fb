import math

import pytest

from dls.exceptions import LabelBudgetError, PredicateError
from dls.predicates import Predicate, Subscription, parse_text
from dls.space import ContentSpace

SPACE = ContentSpace.from_spec({"attributes": [
    {"name": "price", "type": "numeric", "low": 0, "high": 1000, "granules": 32},
    {"name": "vol", "type": "numeric", "low": 0, "high": 10000, "granules": 16},
    {"name": "sym", "type": "discrete", "values": ["AAPL", "MSFT", "IBM"]},
]})


def test_text_and_json_forms_agree():
    text = "price between 10 and 20 and vol >= 100 and sym in (AAPL, IBM)"
    [preds] = parse_text(text)
    assert [p.to_json() for p in preds] == [
        {"attr": "price", "op": "between", "low": 10, "high": 20},
        {"attr": "vol", "op": ">=", "value": 100},
        {"attr": "sym", "op": "in", "values": ["AAPL", "IBM"]},
    ]
    assert " and ".join(p.to_text() for p in preds) == text
    a = Subscription(SPACE, text)
    b = Subscription(SPACE, [p.to_json() for p in preds])
    assert a.labels().tolist() == b.labels().tolist()


def test_text_form_quoted_values_and_case():
    [preds] = parse_text('sym IN ("IBM", \'MSFT\') AND price < 1e2')
    assert preds[0] == Predicate("sym", "in", ("IBM", "MSFT"))
    assert preds[1] == Predicate("price", "<", (100.0,))


@pytest.mark.parametrize("event, expected", [
    ({"price": 10, "vol": 100, "sym": "AAPL"}, True),
    ({"price": 20, "vol": 10000, "sym": "IBM"}, True),
    ({"price": 20.0001, "vol": 100, "sym": "IBM"}, False),
    ({"price": 15, "vol": 99.99, "sym": "IBM"}, False),
    ({"price": 15, "vol": 100, "sym": "MSFT"}, False),
])
def test_exact_matching(event, expected):
    sub = Subscription(SPACE, "price between 10 and 20 and vol >= 100 and sym in (AAPL, IBM)")
    assert sub.matches(event) is expected


def test_strict_bounds_are_strict():
    sub = Subscription(SPACE, "price > 10 and price < 20")
    assert not sub.matches({"price": 10, "vol": 0, "sym": "IBM"})
    assert not sub.matches({"price": 20, "vol": 0, "sym": "IBM"})
    assert sub.matches({"price": math.nextafter(10, 11), "vol": 0, "sym": "IBM"})


def test_strict_bound_on_a_cell_edge_does_not_touch_the_next_cell():
    # 31.25 is exactly the edge between cells 0 and 1 of price.
    sub = Subscription(SPACE, "price < 31.25")
    assert sub.cells(SPACE.attributes[0]).tolist() == [0]
    sub = Subscription(SPACE, "price <= 31.25")
    assert sub.cells(SPACE.attributes[0]).tolist() == [0, 1]


def test_left_out_attribute_matches_whole_domain():
    sub = Subscription(SPACE, "sym = IBM")
    assert sub.n_labels() == 32 * 16
    assert sub.matches({"price": 999, "vol": 5, "sym": "IBM"})


def test_predicates_are_clipped_to_the_domain():
    sub = Subscription(SPACE, "price between -50 and 10 and vol <= 1e9")
    assert sub.cells(SPACE.attributes[0]).tolist() == [0]
    assert len(sub.cells(SPACE.attributes[1])) == 16


def test_predicates_on_one_attribute_intersect():
    sub = Subscription(SPACE, "price >= 100 and price <= 200 and price between 150 and 500")
    assert sub.matches({"price": 175, "vol": 1, "sym": "IBM"})
    assert not sub.matches({"price": 120, "vol": 1, "sym": "IBM"})
    assert sub.cells(SPACE.attributes[0]).tolist() == [4, 5, 6]


def test_numeric_in_and_equality():
    sub = Subscription(SPACE, "price in (1, 500, 2000) and vol = 40")
    assert sub.cells(SPACE.attributes[0]).tolist() == [0, 16]
    assert sub.matches({"price": 500, "vol": 40, "sym": "IBM"})
    assert not sub.matches({"price": 501, "vol": 40, "sym": "IBM"})


@pytest.mark.parametrize("where, fragment", [
    ("colour = red", "unknown attribute 'colour'"),
    ("price between 20 and 10", "inverted range, low 20 > high 10"),
    ([{"attr": "price", "op": ">", "value": float("nan")}], "value is NaN"),
    ([{"attr": "price", "op": ">", "value": "cheap"}], "must be a number, got 'cheap'"),
    ([{"attr": "price", "op": ">", "value": True}], "must be a number, got True"),
    ("price > 2000", "can match nothing"),
    ("price > 10 and price < 5", "can match nothing"),
    ("price > 1000", "can match nothing"),
    ("sym = GOOG", "unknown value 'GOOG'"),
    ("sym > AAPL", "is discrete: '>' does not apply (it takes =, !=, in, not in)"),
    ("sym in (AAPL) and sym in (IBM)", "can match nothing"),
    ([{"attr": "price", "op": "~", "value": 1}], "unknown op '~'"),
    ([{"attr": "price", "op": "between", "low": 1}], "takes keys ['high', 'low']"),
    ("price between 1", "expected 'and' inside between"),
    ("price 5", "expected an operator"),
    ("price > 5 vol < 3", "expected 'and' or 'or' between predicates"),
    (42, "must be a list of predicates, {\"any\": [...]} or a text expression"),
])
def test_bad_subscriptions_name_attribute_and_value(where, fragment):
    with pytest.raises(PredicateError) as exc:
        Subscription(SPACE, where)
    assert fragment in str(exc.value)


def test_error_carries_field_and_value():
    with pytest.raises(PredicateError) as exc:
        Subscription(SPACE, "sym = GOOG")
    assert exc.value.field == "sym" and exc.value.value == "GOOG"


def test_label_budget():
    sub = Subscription(SPACE, "sym = IBM")
    with pytest.raises(LabelBudgetError, match="512 labels.*over the budget of 100"):
        sub.labels(budget=100)
    assert len(sub.labels()) == 512
