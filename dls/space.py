"""The content space: attributes, their cells, and the label encoding.

A content space is a list of attributes. Each attribute's domain is cut into cells:

* ``numeric`` with ``granules`` g: the closed interval ``[low, high]`` cut into g equal
  cells; the cell of a value v is ``min(g-1, floor((v-low)*g/(high-low)))``, computed in
  float64 in exactly that order of operations (Spark and every client must agree bit for
  bit);
* ``numeric`` with ``breakpoints`` b1 < ... < bn: cells ``[low,b1), [b1,b2), ..., [bn,high]``;
  the cell of v is the number of breakpoints ``<= v``;
* ``discrete`` with ``values``: one cell per value, in the order given;
* ``string`` with ``breakpoints`` s1 < ... < sn (code-point order, which is UTF-8 byte
  order): the cell of a string v is the number of breakpoints ``<= v``; every string has one;
* ``hashed`` with ``buckets`` B: the cell of a string v is ``crc32(utf8(v)) mod B``, so values
  never seen before have a cell too.

An attribute marked ``optional`` has one more cell, the last: the *absent* cell, where an
event that leaves the attribute out (or gives it as null) falls.

Attribute i takes ``k_i = max(1, ceil(log2(cells_i)))`` bits. A label is the concatenation of
the cell indexes, the first attribute in the most significant bits; with an ``app_id``,
16 more bits sit above them. A label that would need more than 64 bits is refused when the
space is loaded. The JSON form of a space and its validation are :mod:`dls.space_spec`'s.
"""

from __future__ import annotations

import bisect
import json
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dls.exceptions import SpaceSpecError
from dls.space_spec import (
    DEFAULT_LABEL_BUDGET,
    AttributeSpec,
    DiscreteSpec,
    FilterSettings,
    HashedSpec,
    StringSpec,
    UniformSpec,
    is_number,
    parse_space_spec,
)

__all__ = [
    "APP_ID_BITS",
    "DEFAULT_LABEL_BUDGET",
    "Attribute",
    "BreakpointAttribute",
    "ContentSpace",
    "DiscreteAttribute",
    "FilterSettings",
    "NumericAttribute",
    "absent_cell",
    "HashedAttribute",
    "StringAttribute",
    "UniformAttribute",
    "is_number",
]

APP_ID_BITS = 16


def _bits_for(cells: int) -> int:
    return max(1, (cells - 1).bit_length())


@dataclass(frozen=True)
class UniformAttribute:
    """A numeric attribute whose closed domain ``[low, high]`` is cut into equal cells."""

    name: str
    low: float
    high: float
    granules: int
    optional: bool = False
    kind: str = field(default="numeric", init=False)

    @property
    def n_values(self) -> int:
        """Number of value cells (the absent cell of an optional attribute not counted)."""
        return self.granules

    @property
    def n_cells(self) -> int:
        """Number of cells, the absent one included."""
        return self.granules + self.optional

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
        } | _optional(self)


@dataclass(frozen=True)
class BreakpointAttribute:
    """A numeric attribute cut at domain-knowledge breakpoints (paper §5.2)."""

    name: str
    low: float
    high: float
    breakpoints: tuple[float, ...]
    optional: bool = False
    kind: str = field(default="numeric", init=False)

    @property
    def n_values(self) -> int:
        """Number of value cells (one more than the number of breakpoints)."""
        return len(self.breakpoints) + 1

    @property
    def n_cells(self) -> int:
        """Number of cells, the absent one included."""
        return self.n_values + self.optional

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
        } | _optional(self)


@dataclass(frozen=True)
class DiscreteAttribute:
    """A discrete attribute: one cell per listed value (paper §5.4)."""

    name: str
    values: tuple[str, ...]
    optional: bool = False
    kind: str = field(default="discrete", init=False)

    @property
    def n_values(self) -> int:
        """Number of value cells (one per value)."""
        return len(self.values)

    @property
    def n_cells(self) -> int:
        """Number of cells, the absent one included."""
        return len(self.values) + self.optional

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
        return {"name": self.name, "type": "discrete", "values": list(self.values)
                } | _optional(self)


@dataclass(frozen=True)
class StringAttribute:
    """A string attribute cut at lexicographic breakpoints (code-point order)."""

    name: str
    breakpoints: tuple[str, ...]
    optional: bool = False
    kind: str = field(default="string", init=False)

    @property
    def n_values(self) -> int:
        """Number of value cells (one more than the number of breakpoints)."""
        return len(self.breakpoints) + 1

    @property
    def n_cells(self) -> int:
        """Number of cells, the absent one included."""
        return self.n_values + self.optional

    def cell(self, value: str) -> int:
        """Cell index of one string: the number of breakpoints <= value."""
        return bisect.bisect_right(self.breakpoints, value)

    def cell_below(self, value: str) -> int:
        """The last cell holding a string < value (-1 when there is none)."""
        return bisect.bisect_left(self.breakpoints, value) - (value == "")

    def cells(self, values: np.ndarray | Sequence[str]) -> np.ndarray:
        """Cell indexes (int64) of a sequence of strings."""
        bps = self.breakpoints
        return np.fromiter((bisect.bisect_right(bps, v) for v in values), dtype=np.int64)

    def to_spec(self) -> dict[str, Any]:
        """JSON form of this attribute."""
        return {"name": self.name, "type": "string", "breakpoints": list(self.breakpoints)
                } | _optional(self)


@dataclass(frozen=True)
class HashedAttribute:
    """Open-ended strings (user ids, tags) hashed into ``buckets`` cells."""

    name: str
    buckets: int
    optional: bool = False
    kind: str = field(default="hashed", init=False)

    @property
    def n_values(self) -> int:
        """Number of value cells (one per bucket)."""
        return self.buckets

    @property
    def n_cells(self) -> int:
        """Number of cells, the absent one included."""
        return self.buckets + self.optional

    def cell(self, value: str) -> int:
        """Bucket of one string: ``crc32(utf8(value)) mod buckets``."""
        return zlib.crc32(value.encode("utf-8")) % self.buckets

    def cells(self, values: np.ndarray | Sequence[str]) -> np.ndarray:
        """Buckets (int64) of a sequence of strings."""
        b = self.buckets
        return np.fromiter((zlib.crc32(v.encode("utf-8")) % b for v in values),
                           dtype=np.int64)

    def to_spec(self) -> dict[str, Any]:
        """JSON form of this attribute."""
        return {"name": self.name, "type": "hashed", "buckets": self.buckets} | _optional(self)


def _optional(attr: Attribute) -> dict[str, Any]:
    return {"optional": True} if attr.optional else {}


def absent_cell(attr: Attribute) -> int | None:
    """The cell of an event without ``attr`` (None for a required attribute)."""
    return attr.n_values if attr.optional else None


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


Attribute = (UniformAttribute | BreakpointAttribute | DiscreteAttribute | StringAttribute
             | HashedAttribute)
NumericAttribute = UniformAttribute | BreakpointAttribute


def _attribute(spec: AttributeSpec) -> Attribute:
    """The attribute a validated spec describes."""
    opt = spec.optional
    if isinstance(spec, DiscreteSpec):
        return DiscreteAttribute(spec.name, tuple(spec.values), optional=opt)
    if isinstance(spec, StringSpec):
        return StringAttribute(spec.name, tuple(spec.breakpoints), optional=opt)
    if isinstance(spec, HashedSpec):
        return HashedAttribute(spec.name, spec.buckets, optional=opt)
    if isinstance(spec, UniformSpec):
        return UniformAttribute(spec.name, spec.low, spec.high, spec.granules, optional=opt)
    return BreakpointAttribute(spec.name, spec.low, spec.high, tuple(spec.breakpoints),
                               optional=opt)


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
        parsed = parse_space_spec(spec)
        return cls(attributes=tuple(_attribute(a) for a in parsed.attributes),
                   app_id=parsed.app_id, filters=parsed.filter_settings())

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
