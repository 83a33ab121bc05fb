"""The content space: attributes, their cells, and the label encoding.

A content space is a list of attributes. Each attribute's domain is cut into cells:

* ``numeric`` with ``granules`` g: the closed interval ``[low, high]`` cut into g equal
  cells; the cell of a value v is ``min(g-1, floor((v-low)*g/(high-low)))``, computed in
  float64 in exactly that order of operations (Spark and every client must agree bit for
  bit);
* ``numeric`` with ``breakpoints`` b1 < ... < bn: cells ``[low,b1), [b1,b2), ..., [bn,high]``;
  the cell of v is the number of breakpoints ``<= v``;
* ``discrete`` with ``values``: one cell per value, in the order given.

Attribute i takes ``k_i = max(1, ceil(log2(cells_i)))`` bits. A label is the concatenation of
the cell indexes, the first attribute in the most significant bits; with an ``app_id``,
16 more bits sit above them. A label that would need more than 64 bits is refused when the
space is loaded.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dls.exceptions import SpaceSpecError

__all__ = [
    "APP_ID_BITS",
    "DEFAULT_LABEL_BUDGET",
    "Attribute",
    "BreakpointAttribute",
    "ContentSpace",
    "DiscreteAttribute",
    "FilterSettings",
    "UniformAttribute",
    "is_number",
]

APP_ID_BITS = 16
DEFAULT_LABEL_BUDGET = 65_536
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_KEYWORDS = {"and", "between", "in"}


def is_number(value: Any) -> bool:
    """Return True for an int or float (numpy scalars included) that is not a bool."""
    if isinstance(value, bool | np.bool_):
        return False
    return isinstance(value, int | float | np.integer | np.floating)


def _bits_for(cells: int) -> int:
    return max(1, (cells - 1).bit_length())


def _finite_number(value: Any, what: str, attr: str) -> float:
    if not is_number(value):
        raise SpaceSpecError(
            f"attribute {attr!r}: {what} must be a number, got {value!r}", field=attr, value=value
        )
    v = float(value)
    if not math.isfinite(v):
        raise SpaceSpecError(
            f"attribute {attr!r}: {what} must be finite, got {value!r}", field=attr, value=value
        )
    return v


@dataclass(frozen=True)
class UniformAttribute:
    """A numeric attribute whose closed domain ``[low, high]`` is cut into equal cells."""

    name: str
    low: float
    high: float
    granules: int
    kind: str = field(default="numeric", init=False)

    @property
    def n_cells(self) -> int:
        """Number of cells."""
        return self.granules

    def cell(self, value: float) -> int:
        """Cell index of one in-domain value."""
        g = self.granules
        return min(g - 1, math.floor(((float(value) - self.low) * g) / (self.high - self.low)))

    def cells(self, values: np.ndarray) -> np.ndarray:
        """Cell indexes (int64) of an array of in-domain values."""
        v = np.asarray(values, dtype=np.float64)
        g = self.granules
        raw = np.floor(((v - self.low) * float(g)) / (self.high - self.low))
        return np.minimum(float(g - 1), raw).astype(np.int64)

    def to_spec(self) -> dict[str, Any]:
        """JSON form of this attribute."""
        return {
            "name": self.name,
            "type": "numeric",
            "low": self.low,
            "high": self.high,
            "granules": self.granules,
        }


@dataclass(frozen=True)
class BreakpointAttribute:
    """A numeric attribute cut at domain-knowledge breakpoints (paper §5.2)."""

    name: str
    low: float
    high: float
    breakpoints: tuple[float, ...]
    kind: str = field(default="numeric", init=False)

    @property
    def n_cells(self) -> int:
        """Number of cells (one more than the number of breakpoints)."""
        return len(self.breakpoints) + 1

    def cell(self, value: float) -> int:
        """Cell index of one in-domain value: the number of breakpoints <= value."""
        return int(np.searchsorted(np.asarray(self.breakpoints), float(value), side="right"))

    def cells(self, values: np.ndarray) -> np.ndarray:
        """Cell indexes (int64) of an array of in-domain values."""
        v = np.asarray(values, dtype=np.float64)
        bps = np.asarray(self.breakpoints, dtype=np.float64)
        return np.searchsorted(bps, v, side="right").astype(np.int64)

    def to_spec(self) -> dict[str, Any]:
        """JSON form of this attribute."""
        return {
            "name": self.name,
            "type": "numeric",
            "low": self.low,
            "high": self.high,
            "breakpoints": list(self.breakpoints),
        }


@dataclass(frozen=True)
class DiscreteAttribute:
    """A discrete attribute: one cell per listed value (paper §5.4)."""

    name: str
    values: tuple[str, ...]
    kind: str = field(default="discrete", init=False)

    @property
    def n_cells(self) -> int:
        """Number of cells (one per value)."""
        return len(self.values)

    @property
    def index(self) -> dict[str, int]:
        """Value -> cell index."""
        return _discrete_index(self.values)

    def cell(self, value: str) -> int:
        """Cell index of one known value."""
        return self.index[value]

    def cells(self, values: np.ndarray | Sequence[str]) -> np.ndarray:
        """Cell indexes (int64) of an array of known values; unknown values give -1."""
        sorted_vals, order = _discrete_sorted(self.values)
        arr = np.asarray(values, dtype=str)
        pos = np.searchsorted(sorted_vals, arr)
        pos_c = np.minimum(pos, len(sorted_vals) - 1)
        found = sorted_vals[pos_c] == arr
        return np.where(found, order[pos_c], -1).astype(np.int64)

    def to_spec(self) -> dict[str, Any]:
        """JSON form of this attribute."""
        return {"name": self.name, "type": "discrete", "values": list(self.values)}


_INDEX_CACHE: dict[tuple[str, ...], dict[str, int]] = {}
_SORTED_CACHE: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {}


def _discrete_index(values: tuple[str, ...]) -> dict[str, int]:
    idx = _INDEX_CACHE.get(values)
    if idx is None:
        idx = {v: i for i, v in enumerate(values)}
        _INDEX_CACHE[values] = idx
    return idx


def _discrete_sorted(values: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    hit = _SORTED_CACHE.get(values)
    if hit is None:
        arr = np.asarray(values, dtype=str)
        order = np.argsort(arr, kind="stable")
        hit = (arr[order], order.astype(np.int64))
        _SORTED_CACHE[values] = hit
    return hit


Attribute = UniformAttribute | BreakpointAttribute | DiscreteAttribute


@dataclass(frozen=True)
class FilterSettings:
    """Filter sizing carried by a space spec's optional ``filters`` object.

    ``client`` and ``routing`` each hold either ``{"expected_items", "fp_rate"}`` or
    ``{"m", "k"}``; they size the per-client filters and the routing tables (ERTs).
    """

    client: Mapping[str, Any] = field(
        default_factory=lambda: {"expected_items": 4096, "fp_rate": 0.01}
    )
    routing: Mapping[str, Any] = field(
        default_factory=lambda: {"expected_items": 65536, "fp_rate": 0.001}
    )
    counter_bits: int = 4
    seed: int = 0
    label_budget: int = DEFAULT_LABEL_BUDGET

    _KEYS = frozenset({"client", "routing", "counter_bits", "seed", "label_budget"})

    @classmethod
    def from_spec(cls, spec: Any) -> FilterSettings:
        """Validate and build from the JSON ``filters`` object (None gives the defaults)."""
        if spec is None:
            return cls()
        if not isinstance(spec, Mapping):
            raise SpaceSpecError(f"filters must be an object, got {spec!r}", field="filters",
                                 value=spec)
        unknown = set(spec) - cls._KEYS
        if unknown:
            name = sorted(unknown)[0]
            raise SpaceSpecError(f"filters: unknown key {name!r}", field=f"filters.{name}",
                                 value=spec[name])
        kwargs: dict[str, Any] = {}
        for part in ("client", "routing"):
            if part in spec:
                kwargs[part] = _filter_size_spec(spec[part], f"filters.{part}")
        if "counter_bits" in spec:
            cb = spec["counter_bits"]
            if cb not in (4, 8) or isinstance(cb, bool):
                raise SpaceSpecError(f"filters.counter_bits must be 4 or 8, got {cb!r}",
                                     field="filters.counter_bits", value=cb)
            kwargs["counter_bits"] = int(cb)
        for key, lo, hi in (("seed", 0, 2**32 - 1), ("label_budget", 1, 2**40)):
            if key in spec:
                v = spec[key]
                if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                    raise SpaceSpecError(
                        f"filters.{key} must be an integer in [{lo}, {hi}], got {v!r}",
                        field=f"filters.{key}", value=v)
                kwargs[key] = v
        return cls(**kwargs)

    def to_spec(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "client": dict(self.client),
            "routing": dict(self.routing),
            "counter_bits": self.counter_bits,
            "seed": self.seed,
            "label_budget": self.label_budget,
        }


def _filter_size_spec(spec: Any, where: str) -> dict[str, Any]:
    if not isinstance(spec, Mapping):
        raise SpaceSpecError(f"{where} must be an object, got {spec!r}", field=where, value=spec)
    keys = set(spec)
    if keys == {"expected_items", "fp_rate"}:
        n, p = spec["expected_items"], spec["fp_rate"]
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise SpaceSpecError(f"{where}.expected_items must be a positive integer, got {n!r}",
                                 field=f"{where}.expected_items", value=n)
        if not is_number(p) or not 0.0 < float(p) < 1.0:
            raise SpaceSpecError(f"{where}.fp_rate must be in (0, 1), got {p!r}",
                                 field=f"{where}.fp_rate", value=p)
        return {"expected_items": n, "fp_rate": float(p)}
    if keys == {"m", "k"}:
        m, k = spec["m"], spec["k"]
        if not isinstance(m, int) or isinstance(m, bool) or m < 1:
            raise SpaceSpecError(f"{where}.m must be a positive integer, got {m!r}",
                                 field=f"{where}.m", value=m)
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 64:
            raise SpaceSpecError(f"{where}.k must be an integer in [1, 64], got {k!r}",
                                 field=f"{where}.k", value=k)
        return {"m": m, "k": k}
    raise SpaceSpecError(
        f"{where} must hold either expected_items and fp_rate, or m and k; got keys "
        f"{sorted(keys)}", field=where, value=dict(spec))


_ATTR_KEYS = {
    "numeric": {"name", "type", "low", "high", "granules", "breakpoints"},
    "discrete": {"name", "type", "values"},
}


def _attribute_from_spec(spec: Any, position: int) -> Attribute:
    if not isinstance(spec, Mapping):
        raise SpaceSpecError(f"attributes[{position}] must be an object, got {spec!r}",
                             field=f"attributes[{position}]", value=spec)
    name = spec.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name) or name.lower() in _KEYWORDS:
        raise SpaceSpecError(
            f"attributes[{position}].name must be an identifier (letters, digits, _ and ., "
            f"not a keyword), got {name!r}", field=f"attributes[{position}].name", value=name)
    kind = spec.get("type")
    if kind not in _ATTR_KEYS:
        raise SpaceSpecError(
            f"attribute {name!r}: type must be 'numeric' or 'discrete', got {kind!r}",
            field=name, value=kind)
    unknown = set(spec) - _ATTR_KEYS[kind]
    if unknown:
        key = sorted(unknown)[0]
        raise SpaceSpecError(f"attribute {name!r}: unknown key {key!r}", field=name,
                             value=spec[key])
    if kind == "discrete":
        values = spec.get("values")
        if not isinstance(values, list) or not values:
            raise SpaceSpecError(
                f"attribute {name!r}: values must be a non-empty list, got {values!r}",
                field=name, value=values)
        for v in values:
            if not isinstance(v, str):
                raise SpaceSpecError(
                    f"attribute {name!r}: discrete values must be strings, got {v!r}",
                    field=name, value=v)
        if len(set(values)) != len(values):
            dup = next(v for v in values if values.count(v) > 1)
            raise SpaceSpecError(f"attribute {name!r}: duplicate value {dup!r}", field=name,
                                 value=dup)
        return DiscreteAttribute(name, tuple(values))
    low = _finite_number(spec.get("low"), "low", name)
    high = _finite_number(spec.get("high"), "high", name)
    if not low < high:
        raise SpaceSpecError(f"attribute {name!r}: low {low!r} must be below high {high!r}",
                             field=name, value=[low, high])
    has_g, has_b = "granules" in spec, "breakpoints" in spec
    if has_g == has_b:
        raise SpaceSpecError(
            f"attribute {name!r}: give exactly one of granules or breakpoints", field=name,
            value=None)
    if has_g:
        g = spec["granules"]
        if not isinstance(g, int) or isinstance(g, bool) or g < 1:
            raise SpaceSpecError(
                f"attribute {name!r}: granules must be a positive integer, got {g!r}",
                field=name, value=g)
        return UniformAttribute(name, low, high, g)
    bps = spec["breakpoints"]
    if not isinstance(bps, list) or not bps:
        raise SpaceSpecError(
            f"attribute {name!r}: breakpoints must be a non-empty list, got {bps!r}",
            field=name, value=bps)
    points = tuple(_finite_number(b, "breakpoint", name) for b in bps)
    prev = low
    for b in points:
        if not prev < b < high:
            raise SpaceSpecError(
                f"attribute {name!r}: breakpoints must increase strictly inside "
                f"({low}, {high}), got {b!r}", field=name, value=b)
        prev = b
    return BreakpointAttribute(name, low, high, points)


@dataclass(frozen=True)
class ContentSpace:
    """An ordered set of attributes plus the label layout derived from them."""

    attributes: tuple[Attribute, ...]
    app_id: int | None = None
    filters: FilterSettings = field(default_factory=FilterSettings)

    def __post_init__(self) -> None:
        if not self.attributes:
            raise SpaceSpecError("a content space needs at least one attribute",
                                 field="attributes", value=[])
        names = [a.name for a in self.attributes]
        for n in names:
            if names.count(n) > 1:
                raise SpaceSpecError(f"duplicate attribute name {n!r}", field="attributes",
                                     value=n)
        if self.app_id is not None and (
            not isinstance(self.app_id, int) or isinstance(self.app_id, bool)
            or not 0 <= self.app_id < 2**APP_ID_BITS
        ):
            raise SpaceSpecError(f"app_id must be an integer in [0, 65535], got {self.app_id!r}",
                                 field="app_id", value=self.app_id)
        if self.total_bits > 64:
            raise SpaceSpecError(
                f"labels would need {self.total_bits} bits (cells: "
                f"{[a.n_cells for a in self.attributes]}, app_id: "
                f"{'16 bits' if self.app_id is not None else 'none'}); the limit is 64",
                field="attributes", value=self.total_bits)

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_spec(cls, spec: Any) -> ContentSpace:
        """Build and validate a space from its JSON object."""
        if not isinstance(spec, Mapping):
            raise SpaceSpecError(f"a space spec must be an object, got {spec!r}", field="space",
                                 value=spec)
        unknown = set(spec) - {"attributes", "app_id", "filters"}
        if unknown:
            key = sorted(unknown)[0]
            raise SpaceSpecError(f"space spec: unknown key {key!r}", field=key, value=spec[key])
        attrs = spec.get("attributes")
        if not isinstance(attrs, list) or not attrs:
            raise SpaceSpecError(f"attributes must be a non-empty list, got {attrs!r}",
                                 field="attributes", value=attrs)
        return cls(
            attributes=tuple(_attribute_from_spec(a, i) for i, a in enumerate(attrs)),
            app_id=spec.get("app_id"),
            filters=FilterSettings.from_spec(spec.get("filters")),
        )

    @classmethod
    def from_json(cls, path: str | Path) -> ContentSpace:
        """Load a space spec from a JSON file."""
        try:
            spec = json.loads(Path(path).read_text())
        except json.JSONDecodeError as exc:
            raise SpaceSpecError(f"{path}: not valid JSON: {exc}", field="space",
                                 value=str(path)) from exc
        return cls.from_spec(spec)

    def to_spec(self) -> dict[str, Any]:
        """JSON form of this space."""
        out: dict[str, Any] = {"attributes": [a.to_spec() for a in self.attributes]}
        if self.app_id is not None:
            out["app_id"] = self.app_id
        out["filters"] = self.filters.to_spec()
        return out

    # -- layout -------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        """Attribute names in label order."""
        return tuple(a.name for a in self.attributes)

    @property
    def by_name(self) -> dict[str, Attribute]:
        """Attribute lookup by name."""
        return {a.name: a for a in self.attributes}

    @property
    def bits(self) -> tuple[int, ...]:
        """Bits taken by each attribute's cell index."""
        return tuple(_bits_for(a.n_cells) for a in self.attributes)

    @property
    def shifts(self) -> tuple[int, ...]:
        """Left shift of each attribute's index inside a label (first attribute highest)."""
        out, acc = [], 0
        for b in reversed(self.bits):
            out.append(acc)
            acc += b
        return tuple(reversed(out))

    @property
    def cell_bits(self) -> int:
        """Bits of the cell part of a label."""
        return sum(self.bits)

    @property
    def total_bits(self) -> int:
        """Bits of a whole label, app id included."""
        return self.cell_bits + (APP_ID_BITS if self.app_id is not None else 0)

    @property
    def app_prefix(self) -> int:
        """The app id bits already shifted into place (0 without an app id)."""
        return 0 if self.app_id is None else self.app_id << self.cell_bits

    @property
    def n_cells(self) -> int:
        """Number of cells of the whole space (the paper's N_r)."""
        return math.prod(a.n_cells for a in self.attributes)

    @property
    def label_space_size(self) -> int:
        """Size of the dense index ``label - app_prefix`` (``2**cell_bits``)."""
        return 1 << self.cell_bits

    # -- labels -------------------------------------------------------------------------
    def compose(self, cells: Sequence[int]) -> int:
        """Label of one cell, given its index per attribute."""
        label = self.app_prefix
        for c, s in zip(cells, self.shifts, strict=True):
            label |= int(c) << s
        return label

    def compose_many(self, cells: np.ndarray) -> np.ndarray:
        """Labels (uint64) of an (n, d) array of cell indexes."""
        cells = np.asarray(cells, dtype=np.uint64)
        out = np.full(cells.shape[0], self.app_prefix, dtype=np.uint64)
        for i, s in enumerate(self.shifts):
            out |= cells[:, i] << np.uint64(s)
        return out

    def decompose(self, label: int) -> tuple[int, ...]:
        """Cell index per attribute of a label (raises if it is not a label of this space)."""
        label = int(label)
        if label < 0 or label >> 64:
            raise SpaceSpecError(f"label {label} is not a 64-bit unsigned value", field="label",
                                 value=label)
        if label >> self.cell_bits != (self.app_id if self.app_id is not None else 0):
            raise SpaceSpecError(f"label {label:#x} does not carry this space's app id",
                                 field="label", value=label)
        cells = []
        for a, b, s in zip(self.attributes, self.bits, self.shifts, strict=True):
            c = (label >> s) & ((1 << b) - 1)
            if c >= a.n_cells:
                raise SpaceSpecError(
                    f"label {label:#x}: cell {c} of attribute {a.name!r} is outside its "
                    f"{a.n_cells} cells", field=a.name, value=c)
            cells.append(c)
        return tuple(cells)

    def format_label(self, label: int) -> str:
        """Human text form, e.g. ``011-010`` (``7|011-010`` with app id 7)."""
        cells = self.decompose(label)
        body = "-".join(format(c, f"0{b}b") for c, b in zip(cells, self.bits, strict=True))
        return body if self.app_id is None else f"{self.app_id}|{body}"

    def parse_label(self, text: str) -> int:
        """Inverse of :meth:`format_label`."""
        body = text
        if "|" in text:
            app, body = text.split("|", 1)
            if self.app_id is None or not app.isdigit() or int(app) != self.app_id:
                raise SpaceSpecError(f"label {text!r}: app id does not match this space",
                                     field="label", value=text)
        parts = body.split("-")
        if len(parts) != len(self.attributes) or any(
            len(p) != b or set(p) - {"0", "1"} for p, b in zip(parts, self.bits, strict=False)
        ):
            raise SpaceSpecError(
                f"label {text!r} does not have the form {'-'.join('0' * b for b in self.bits)}",
                field="label", value=text)
        cells = [int(p, 2) for p in parts]
        for a, c in zip(self.attributes, cells, strict=True):
            if c >= a.n_cells:
                raise SpaceSpecError(f"label {text!r}: cell {c} of {a.name!r} is out of range",
                                     field=a.name, value=c)
        return self.compose(cells)
