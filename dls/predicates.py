"""Subscriptions: a ``where`` compiled against a content space, its labels, exact matching.

A subscription is a disjunction of conjunctions of predicates (the forms:
:mod:`dls.where`; what each predicate asks of its attribute: :mod:`dls.constraints`).
``between`` is inclusive, ``<`` and ``>`` are strict, an attribute left out matches its
whole domain (absent included, for an optional one), and predicates are clipped to the
domain. Several predicates on one attribute intersect. An alternative that can match
nothing, an unknown attribute, ``low > high``, a NaN, an operator on the wrong type or a
value of the wrong type is refused with a :class:`~dls.exceptions.PredicateError` naming
the attribute and the value.

A subscription's labels are the sorted union of its alternatives' labels, each the cross
product of the cells its constraints touch (paper §3.3).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from dls import constraints as _c
from dls.constraints import (
    Absent,
    Constraint,
    DiscreteConstraint,
    HashedConstraint,
    NumericConstraint,
    StringConstraint,
)
from dls.exceptions import LabelBudgetError, PredicateError
from dls.mapping import subscription_labels
from dls.space import Attribute, ContentSpace
from dls.where import OPS, Alternatives, Predicate, alternatives_text, parse_text, parse_where

__all__ = [
    "OPS",
    "Absent",
    "Constraint",
    "DiscreteConstraint",
    "HashedConstraint",
    "NumericConstraint",
    "Predicate",
    "StringConstraint",
    "Subscription",
    "parse_text",
    "parse_where",
]


class _Alternative:
    """One conjunction, compiled: a constraint per constrained attribute."""

    __slots__ = ("constraints", "predicates", "space", "text")

    def __init__(self, space: ContentSpace, preds: list[Predicate], text: str):
        self.space = space
        self.predicates = tuple(preds)
        self.text = text
        by_name = space.by_name
        grouped: dict[str, list[Predicate]] = {}
        for p in preds:
            if p.attr not in by_name:
                raise PredicateError(f"unknown attribute {p.attr!r} (the space has "
                                     f"{list(space.names)})", field=p.attr, value=p.attr)
            grouped.setdefault(p.attr, []).append(p)
        self.constraints: dict[str, Constraint] = {
            name: _c.compile_attribute(by_name[name], ps) for name, ps in grouped.items()}

    def cells(self, attr: Attribute) -> np.ndarray:
        """Sorted cell indexes of ``attr`` that the alternative touches."""
        return _c.cells(attr, self.constraints.get(attr.name))

    def matches(self, event: Mapping[str, Any]) -> bool:
        """Exact test of a (valid) event."""
        return all(c.contains(event.get(name)) for name, c in self.constraints.items())

    def __str__(self) -> str:
        return self.text


class Subscription:
    """A compiled disjunction of conjunctions over one content space."""

    __slots__ = ("_labels", "alternatives", "predicates", "space", "where")

    def __init__(self, space: ContentSpace, where: Any):
        """Compile ``where`` (JSON list or ``{"any": ...}``, text, or predicates)."""
        self.space = space
        alts: Alternatives = parse_where(where)
        text = alternatives_text(alts)
        self.alternatives = tuple(_Alternative(space, a, text) for a in alts)
        self.predicates: tuple[Predicate, ...] = tuple(p for a in alts for p in a)
        self._labels: np.ndarray | None = None

    @property
    def constraints(self) -> Mapping[str, Constraint]:
        """The constraint per constrained attribute of a subscription of one alternative."""
        if len(self.alternatives) != 1:
            raise PredicateError(f"subscription '{self}' has {len(self.alternatives)} "
                                 "alternatives: read .alternatives", field="where",
                                 value=str(self))
        return self.alternatives[0].constraints

    @property
    def is_simple(self) -> bool:
        """One alternative of numeric intervals/sets and discrete sets, on required attributes.

        What the node's vectorised edge check handles; anything else goes through
        :meth:`matches`.
        """
        if len(self.alternatives) != 1:
            return False
        if any(a.optional or a.kind in ("string", "hashed") for a in self.space.attributes):
            return False
        return all(isinstance(c, DiscreteConstraint)
                   or (isinstance(c, NumericConstraint) and not c.excluded)
                   for c in self.alternatives[0].constraints.values())

    def cells(self, attr: Attribute) -> np.ndarray:
        """Sorted cell indexes of ``attr`` that any alternative touches."""
        if len(self.alternatives) == 1:
            return self.alternatives[0].cells(attr)
        return np.unique(np.concatenate([a.cells(attr) for a in self.alternatives]))

    def n_labels(self) -> int:
        """Number of labels (cells) the subscription expands to."""
        if len(self.alternatives) == 1:
            alt = self.alternatives[0]
            return math.prod(len(alt.cells(a)) for a in self.space.attributes)
        return len(self.labels(budget=2**62))

    def labels(self, budget: int | None = None) -> np.ndarray:
        """Sorted unique uint64 labels of every cell the subscription touches (paper §3.3)."""
        if self._labels is None:
            self._labels = self._union(budget)
        elif budget is not None and len(self._labels) > budget:
            self._union(budget)  # raises the budget error
        return self._labels

    def _union(self, budget: int | None) -> np.ndarray:
        parts = [subscription_labels(a, budget) for a in self.alternatives]
        if len(parts) == 1:
            return parts[0]
        out = np.unique(np.concatenate(parts))
        limit = self.space.filters.label_budget if budget is None else budget
        if len(out) > limit:
            raise LabelBudgetError(f"subscription '{self}' expands to {len(out)} labels, "
                                   f"over the budget of {limit}", field="labels",
                                   value=len(out))
        return out

    def matches(self, event: Mapping[str, Any]) -> bool:
        """Exact test of a (valid) event against the predicates: any alternative matches."""
        return any(a.matches(event) for a in self.alternatives)

    def to_json(self) -> list[dict[str, Any]] | dict[str, Any]:
        """JSON form: the list of predicates, or ``{"any": [...]}``."""
        forms = [[p.to_json() for p in a.predicates] for a in self.alternatives]
        return forms[0] if len(forms) == 1 else {"any": forms}

    def __str__(self) -> str:
        return self.alternatives[0].text

    def __repr__(self) -> str:
        return f"Subscription({str(self)!r})"


def compile_many(space: ContentSpace, wheres: Iterable[Any]) -> list[Subscription]:
    """Compile several subscriptions (errors propagate)."""
    return [Subscription(space, w) for w in wheres]
