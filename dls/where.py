"""The forms of a subscription's ``where``: predicates in JSON and in text, and OR.

A ``where`` is a conjunction of predicates, or a disjunction of such conjunctions. JSON
form, one object per predicate::

    {"attr": "price", "op": "between", "low": 10, "high": 20}
    {"attr": "vol", "op": ">=", "value": 100}          # ops =, !=, <, <=, >, >=
    {"attr": "sym", "op": "in", "values": ["AAPL", "IBM"]}   # also "not in"
    {"attr": "sym", "op": "prefix", "value": "AA"}     # string attributes
    {"attr": "tag", "op": "exists"}                    # also "missing": optional attributes

A conjunction is a list of them; a disjunction is ``{"any": [[...], [...]]}``. The text
form for people: ``price between 10 and 20 and sym in (AAPL, IBM)``, ``vol != 3``,
``sym not in (A, B)``, ``sym prefix "AA"``, ``tag exists``, and alternatives joined by
``or``, each optionally inside one pair of parentheses:
``(price > 10 and sym = A) or vol < 3``. ``and`` binds tighter than ``or``; a value spelled
like a keyword must be quoted. What the predicates mean against a space is
:mod:`dls.constraints`'.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dls.exceptions import PredicateError

__all__ = ["KEYWORDS", "OPS", "Alternatives", "Predicate", "parse_text", "parse_where"]

OPS = ("between", "=", "!=", "<", "<=", ">", ">=", "in", "not in", "prefix", "exists",
       "missing")
KEYWORDS = frozenset({"and", "or", "not", "between", "in", "prefix", "exists", "missing"})
_COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
_KEYS: dict[str, set[str]] = {"between": {"low", "high"}, "in": {"values"},
                              "not in": {"values"}, "exists": set(), "missing": set()}

Alternatives = list[list["Predicate"]]
"""A parsed ``where``: its alternatives, each a conjunction of predicates."""


_BARE_VALUE = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_NOT_BARE = KEYWORDS | {"nan", "inf", "infinity"}  # read as a keyword or a float


def _fmt(v: Any) -> str:
    if isinstance(v, str):
        if _BARE_VALUE.fullmatch(v) and v.lower() not in _NOT_BARE:
            return v
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


@dataclass(frozen=True)
class Predicate:
    """One predicate: ``attr op operands``; operands are (low, high), (value,), values or ()."""

    attr: str
    op: str
    operands: tuple[Any, ...]

    @classmethod
    def from_json(cls, obj: Any) -> Predicate:
        """Validate the shape of one JSON predicate (not yet against a space)."""
        if not isinstance(obj, Mapping):
            raise PredicateError(f"a predicate must be an object, got {obj!r}",
                                 field="where", value=obj)
        attr, op = obj.get("attr"), obj.get("op")
        if not isinstance(attr, str) or not attr:
            raise PredicateError(f"predicate attr must be a non-empty string, got {attr!r}",
                                 field="attr", value=attr)
        if op not in OPS:
            raise PredicateError(f"attribute {attr!r}: unknown op {op!r} (one of {list(OPS)})",
                                 field=attr, value=op)
        want = _KEYS.get(op, {"value"})
        keys = set(obj) - {"attr", "op"}
        if keys != want:
            raise PredicateError(
                f"attribute {attr!r}: op {op!r} takes keys {sorted(want)}, got {sorted(keys)}",
                field=attr, value=dict(obj))
        if op == "between":
            return cls(attr, op, (obj["low"], obj["high"]))
        if op in ("in", "not in"):
            return cls(attr, op, _values(attr, op, obj["values"]))
        if op in ("exists", "missing"):
            return cls(attr, op, ())
        return cls(attr, op, (obj["value"],))

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        if self.op == "between":
            return {"attr": self.attr, "op": "between", "low": self.operands[0],
                    "high": self.operands[1]}
        if self.op in ("in", "not in"):
            return {"attr": self.attr, "op": self.op, "values": list(self.operands)}
        if self.op in ("exists", "missing"):
            return {"attr": self.attr, "op": self.op}
        return {"attr": self.attr, "op": self.op, "value": self.operands[0]}

    def to_text(self) -> str:
        """Text form."""
        if self.op == "between":
            return f"{self.attr} between {_fmt(self.operands[0])} and {_fmt(self.operands[1])}"
        if self.op in ("in", "not in"):
            return f"{self.attr} {self.op} ({', '.join(_fmt(v) for v in self.operands)})"
        if self.op in ("exists", "missing"):
            return f"{self.attr} {self.op}"
        return f"{self.attr} {self.op} {_fmt(self.operands[0])}"


def _values(attr: str, op: str, values: Any) -> tuple[Any, ...]:
    if not isinstance(values, list | tuple) or not values:
        raise PredicateError(
            f"attribute {attr!r}: {op!r} needs a non-empty list of values, got {values!r}",
            field=attr, value=values)
    return tuple(values)


def alternatives_text(alts: Alternatives) -> str:
    """The text form of alternatives (each in parentheses when there are several)."""
    texts = [" and ".join(p.to_text() for p in conj) for conj in alts]
    if len(texts) == 1:
        return texts[0] or "(everything)"
    return " or ".join(f"({t})" for t in texts)


# --- text form -----------------------------------------------------------------------------
_TOKEN_RE = re.compile(
    r"""\s*(?:
        (?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![A-Za-z_]))
      | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<op>!=|<=|>=|<|>|=|\(|\)|,)
      | (?P<word>[A-Za-z_][A-Za-z0-9_.\-]*)
    )""",
    re.VERBOSE,
)


def _tokenize(text: str) -> list[tuple[str, Any]]:
    tokens: list[tuple[str, Any]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m or m.end() == pos:
            raise PredicateError(f"cannot read subscription text at {text[pos:pos + 20]!r}",
                                 field="where", value=text)
        pos = m.end()
        if m.group("num") is not None:
            s = m.group("num")
            tokens.append(("val", int(s) if re.fullmatch(r"[-+]?\d+", s) else float(s)))
        elif m.group("str") is not None:
            s = m.group("str")[1:-1]
            tokens.append(("val", re.sub(r"\\(.)", r"\1", s)))
        elif m.group("op") is not None:
            tokens.append(("op", m.group("op")))
        else:
            tokens.append(("word", m.group("word")))
    return tokens


class _TextParser:
    """Recursive descent over the tokens of one text ``where``."""

    def __init__(self, text: str):
        self.text = text
        self.toks = _tokenize(text)
        self.i = 0

    def err(self, msg: str) -> PredicateError:
        return PredicateError(f"{msg} in subscription text {self.text!r}", field="where",
                              value=self.text)

    def keyword(self, word: str) -> bool:
        t = self.toks[self.i] if self.i < len(self.toks) else None
        return t is not None and t[0] == "word" and t[1].lower() == word

    def punct(self, p: str) -> bool:
        return self.i < len(self.toks) and self.toks[self.i] == ("op", p)

    def value(self) -> Any:
        if self.i >= len(self.toks) or self.toks[self.i][0] not in ("val", "word"):
            raise self.err("expected a value")
        kind, v = self.toks[self.i]
        self.i += 1
        if kind == "word" and v.lower() in KEYWORDS:
            raise self.err(f"expected a value, got keyword {v!r}")
        if kind == "word" and v.lower() in ("nan", "inf", "infinity", "-inf"):
            return float(v)
        return v

    def value_list(self) -> tuple[Any, ...]:
        if not self.punct("("):
            raise self.err("expected '(' after in")
        self.i += 1
        vals = [self.value()]
        while self.punct(","):
            self.i += 1
            vals.append(self.value())
        if not self.punct(")"):
            raise self.err("expected ')'")
        self.i += 1
        return tuple(vals)

    def predicate(self) -> Predicate:
        if self.punct("("):
            raise self.err("parentheses may only enclose a whole alternative")
        if self.i >= len(self.toks) or self.toks[self.i][0] != "word" or self.keyword("or"):
            raise self.err("expected an attribute name")
        attr = self.toks[self.i][1]
        self.i += 1
        for word in ("exists", "missing"):
            if self.keyword(word):
                self.i += 1
                return Predicate(attr, word, ())
        if self.keyword("between"):
            self.i += 1
            low = self.value()
            if not self.keyword("and"):
                raise self.err("expected 'and' inside between")
            self.i += 1
            return Predicate(attr, "between", (low, self.value()))
        if self.keyword("not"):
            self.i += 1
            if not self.keyword("in"):
                raise self.err("expected 'in' after not")
            self.i += 1
            return Predicate(attr, "not in", self.value_list())
        if self.keyword("in"):
            self.i += 1
            return Predicate(attr, "in", self.value_list())
        if self.keyword("prefix"):
            self.i += 1
            return Predicate(attr, "prefix", (self.value(),))
        if self.i < len(self.toks) and self.toks[self.i][0] == "op" and \
                self.toks[self.i][1] in _COMPARISONS:
            op = self.toks[self.i][1]
            self.i += 1
            return Predicate(attr, op, (self.value(),))
        raise self.err(f"expected an operator after {attr!r}")

    def conjunction(self) -> list[Predicate]:
        preds = [self.predicate()]
        while self.keyword("and"):
            self.i += 1
            preds.append(self.predicate())
        return preds

    def alternative(self) -> list[Predicate]:
        if not self.punct("("):
            return self.conjunction()
        self.i += 1
        preds = self.conjunction()
        if not self.punct(")"):
            raise self.err("expected ')' closing an alternative")
        self.i += 1
        return preds

    def parse(self) -> Alternatives:
        if not self.toks:
            return [[]]
        alts = [self.alternative()]
        while self.keyword("or"):
            self.i += 1
            alts.append(self.alternative())
        if self.i < len(self.toks):
            if self.punct("(") or self.punct(")"):
                raise self.err("parentheses may only enclose a whole alternative")
            raise self.err("expected 'and' or 'or' between predicates")
        return alts


def parse_text(text: str) -> Alternatives:
    """Parse ``a between 1 and 2 and c in (x, y) or d != 3`` into alternatives."""
    if not isinstance(text, str):
        raise PredicateError(f"subscription text must be a string, got {text!r}", field="where",
                             value=text)
    return _TextParser(text).parse()


def _conjunction(items: Any) -> list[Predicate]:
    return [p if isinstance(p, Predicate) else Predicate.from_json(p) for p in items]


def parse_where(where: Any) -> Alternatives:
    """Accept the JSON forms, the text form, or predicates; give the alternatives."""
    if isinstance(where, str):
        return parse_text(where)
    if isinstance(where, Mapping) and set(where) == {"any"}:
        alts = where["any"]
        if not isinstance(alts, list | tuple) or not alts:
            raise PredicateError(f"'any' needs a non-empty list of alternatives, got {alts!r}",
                                 field="where", value=alts)
        out = []
        for n, alt in enumerate(alts, 1):
            if not isinstance(alt, list | tuple):
                raise PredicateError(f"alternative {n} of 'any' must be a list of predicates, "
                                     f"got {alt!r}", field="where", value=alt)
            if not alt:
                raise PredicateError(f"alternative {n} of 'any' is empty", field="where",
                                     value=[])
            out.append(_conjunction(alt))
        return out
    if isinstance(where, list | tuple):
        if where and all(isinstance(a, list | tuple) for a in where) and all(
                isinstance(p, Predicate) for a in where for p in a):
            return [list(a) for a in where]  # alternatives already parsed
        return [_conjunction(where)]
    raise PredicateError(
        f"'where' must be a list of predicates, {{\"any\": [...]}} or a text expression, "
        f"got {where!r}", field="where", value=where)
