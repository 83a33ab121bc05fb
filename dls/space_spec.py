"""The JSON form of a content space, declared as pydantic models.

A space spec is an object::

    {"attributes": [ATTRIBUTE, ...],            a non-empty list
     "app_id": 7,                               optional, an integer in [0, 65535]
     "filters": {...}}                          optional, see FilterSettings

and an ATTRIBUTE one of::

    {"name": N, "type": "numeric", "low": L, "high": H, "granules": G}
    {"name": N, "type": "numeric", "low": L, "high": H, "breakpoints": [B1, ..., Bn]}
    {"name": N, "type": "discrete", "values": [V1, ..., Vn]}
    {"name": N, "type": "string", "breakpoints": [S1, ..., Sn]}   strings, increasing
    {"name": N, "type": "hashed", "buckets": B}                   B in [1, 65536]

Any attribute may also say ``"optional": true``: an event may then leave it out.

:func:`parse_space_spec` validates a spec against the models below. Of the rules the spec
breaks, the one that comes first (an object before its keys; an attribute's name, then its
type, then unknown keys, then the fields as declared) is raised as a
:class:`~dls.exceptions.SpaceSpecError` naming the field and the value; pydantic's
``ValidationError`` never leaves this module. What the spec means (cells, labels) is
:mod:`dls.space`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

import numpy as np
from pydantic import (
    AfterValidator,
    AllowInfNan,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Strict,
    StringConstraints,
    Tag,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from dls.exceptions import SpaceSpecError

__all__ = [
    "DEFAULT_LABEL_BUDGET",
    "AttributeSpec",
    "BreakpointSpec",
    "DiscreteSpec",
    "HashedSpec",
    "StringSpec",
    "FilterSettings",
    "SpaceSpec",
    "UniformSpec",
    "is_number",
    "parse_space_spec",
]

DEFAULT_LABEL_BUDGET = 65_536
_KEYWORDS = {"and", "or", "not", "between", "in", "prefix", "exists", "missing"}
MAX_BUCKETS = 65_536


def is_number(value: Any) -> bool:
    """Return True for an int or float (numpy scalars included) that is not a bool."""
    if isinstance(value, bool | np.bool_):
        return False
    return isinstance(value, int | float | np.integer | np.floating)


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

    @classmethod
    def from_spec(cls, spec: Any) -> FilterSettings:
        """Validate and build from the JSON ``filters`` object (None gives the defaults)."""
        if spec is None:
            return cls()
        return _parse(_FiltersSpec, spec, "filters").build()

    def to_spec(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "client": dict(self.client),
            "routing": dict(self.routing),
            "counter_bits": self.counter_bits,
            "seed": self.seed,
            "label_budget": self.label_budget,
        }


# -- the models ---------------------------------------------------------------------------
def _number(value: Any) -> float:
    """A number (numpy scalars included, bools not) as a float."""
    if not is_number(value):
        raise PydanticCustomError("number", "not a number")
    try:
        return float(value)
    except OverflowError:  # an int beyond float's range
        raise PydanticCustomError("finite_number", "not finite") from None


def _not_keyword(name: str) -> str:
    """An attribute name that is not a word of the subscription language."""
    if name.lower() in _KEYWORDS:
        raise PydanticCustomError("keyword", "a keyword of the subscription language")
    return name


_Number = Annotated[float, BeforeValidator(_number), AllowInfNan(False)]
_Name = Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$"),
                  AfterValidator(_not_keyword)]


class _Spec(BaseModel):
    """A JSON object of the spec: unknown keys are refused."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # built when first used


class _RateSize(_Spec):
    """A filter sized by the items it is to hold and its false-positive rate."""

    expected_items: int = Field(strict=True, ge=1)
    fp_rate: _Number = Field(gt=0, lt=1)


class _BitsSize(_Spec):
    """A filter sized by its counters and hash functions."""

    m: int = Field(strict=True, ge=1)
    k: int = Field(strict=True, ge=1, le=64)


_SIZE_TAGS = {frozenset(_RateSize.model_fields): "rate", frozenset(_BitsSize.model_fields): "bits"}


def _size_kind(spec: Any) -> str | None:
    """Which sizing a filter object holds, told by its keys (None: neither)."""
    if isinstance(spec, _Spec):  # a validated size, being dumped
        spec = type(spec).model_fields
    return _SIZE_TAGS.get(frozenset(spec)) if isinstance(spec, Mapping) else None


_Size = Annotated[Annotated[_RateSize, Tag("rate")] | Annotated[_BitsSize, Tag("bits")],
                  Discriminator(_size_kind)]


class _FiltersSpec(_Spec):
    """The ``filters`` object: what it leaves out keeps :class:`FilterSettings`' default."""

    client: _Size = Field(default_factory=lambda: _RateSize(**FilterSettings().client))
    routing: _Size = Field(default_factory=lambda: _RateSize(**FilterSettings().routing))
    counter_bits: Literal[4, 8] = 4
    seed: int = Field(default=0, strict=True, ge=0, le=2**32 - 1)
    label_budget: int = Field(default=DEFAULT_LABEL_BUDGET, strict=True, ge=1, le=2**40)

    def build(self) -> FilterSettings:
        """The filter settings this object gives."""
        return FilterSettings(**self.model_dump(exclude_unset=True))


class DiscreteSpec(_Spec):
    """A discrete attribute: its distinct values."""

    name: _Name
    type: Literal["discrete"]
    values: list[Annotated[str, Strict()]] = Field(strict=True, min_length=1)
    optional: bool = Field(default=False, strict=True)

    @field_validator("values")
    @classmethod
    def _distinct(cls, values: list[str], info: ValidationInfo) -> list[str]:
        if len(set(values)) != len(values):
            name, dup = info.data.get("name"), next(v for v in values if values.count(v) > 1)
            raise SpaceSpecError(f"attribute {name!r}: duplicate value {dup!r}", field=name,
                                 value=dup)
        return values


class _NumericSpec(_Spec):
    """A numeric attribute's domain ``[low, high]``."""

    name: _Name
    type: Literal["numeric"]
    low: _Number
    high: _Number
    optional: bool = Field(default=False, strict=True)

    @field_validator("high")
    @classmethod
    def _above_low(cls, high: float, info: ValidationInfo) -> float:
        low, name = info.data.get("low"), info.data.get("name")
        if low is not None and not low < high:
            raise SpaceSpecError(f"attribute {name!r}: low {low!r} must be below high {high!r}",
                                 field=name, value=[low, high])
        return high


class UniformSpec(_NumericSpec):
    """A numeric attribute cut into ``granules`` equal cells."""

    granules: int = Field(strict=True, ge=1)


class BreakpointSpec(_NumericSpec):
    """A numeric attribute cut at ``breakpoints``."""

    breakpoints: list[_Number] = Field(strict=True, min_length=1)

    @field_validator("breakpoints")
    @classmethod
    def _inside(cls, points: list[float], info: ValidationInfo) -> list[float]:
        low, high, name = (info.data.get(k) for k in ("low", "high", "name"))
        if low is None or high is None:  # refused by their own rule
            return points
        prev = low
        for b in points:
            if not prev < b < high:
                raise SpaceSpecError(
                    f"attribute {name!r}: breakpoints must increase strictly inside "
                    f"({low}, {high}), got {b!r}", field=name, value=b)
            prev = b
        return points


class StringSpec(_Spec):
    """A string attribute cut at lexicographic ``breakpoints`` (code-point order)."""

    name: _Name
    type: Literal["string"]
    breakpoints: list[Annotated[str, Strict()]] = Field(strict=True, min_length=1)
    optional: bool = Field(default=False, strict=True)

    @field_validator("breakpoints")
    @classmethod
    def _increasing(cls, points: list[str], info: ValidationInfo) -> list[str]:
        name = info.data.get("name")
        for prev, b in zip(points, points[1:], strict=False):
            if not prev < b:
                raise SpaceSpecError(f"attribute {name!r}: breakpoints must increase "
                                     f"strictly, got {b!r}", field=name, value=b)
        return points


class HashedSpec(_Spec):
    """An attribute of open-ended strings hashed into ``buckets`` cells."""

    name: _Name
    type: Literal["hashed"]
    buckets: int = Field(strict=True, ge=1, le=MAX_BUCKETS)
    optional: bool = Field(default=False, strict=True)


class _UncutSpec(_NumericSpec):
    """A numeric attribute with both or neither of granules and breakpoints: refused."""

    granules: Any = None
    breakpoints: Any = None

    @model_validator(mode="after")
    def _refuse(self) -> _UncutSpec:
        raise SpaceSpecError(f"attribute {self.name!r}: give exactly one of granules or "
                             "breakpoints", field=self.name, value=None)


def _attribute_kind(spec: Any) -> str | None:
    """The model of an attribute: its type and, if numeric, how it is cut."""
    kind = spec.get("type") if isinstance(spec, Mapping) else None
    if kind != "numeric":
        return kind if kind in ("discrete", "string", "hashed") else None
    cuts = [key for key in ("granules", "breakpoints") if key in spec]
    return cuts[0] if len(cuts) == 1 else "uncut"


AttributeSpec = Annotated[
    Annotated[UniformSpec, Tag("granules")] | Annotated[BreakpointSpec, Tag("breakpoints")]
    | Annotated[DiscreteSpec, Tag("discrete")] | Annotated[StringSpec, Tag("string")]
    | Annotated[HashedSpec, Tag("hashed")] | Annotated[_UncutSpec, Tag("uncut")],
    Discriminator(_attribute_kind)]
"""One attribute of a spec."""


class SpaceSpec(_Spec):
    """A whole spec (``app_id`` is checked by :class:`~dls.space.ContentSpace` itself)."""

    attributes: list[AttributeSpec] = Field(strict=True, min_length=1)
    app_id: Any = None
    filters: _FiltersSpec | None = None

    def filter_settings(self) -> FilterSettings:
        """The spec's filter settings (the defaults without a ``filters`` object)."""
        return FilterSettings() if self.filters is None else self.filters.build()


def parse_space_spec(spec: Any) -> SpaceSpec:
    """``spec`` (a JSON object) validated.

    Raises:
        SpaceSpecError: the first rule ``spec`` breaks, naming the field and the value.
    """
    return _parse(SpaceSpec, spec)


# -- errors -------------------------------------------------------------------------------
# What a field must be, for the errors that say "<field> must be <rule>, got <value>".
_RULES = {
    "counter_bits": "4 or 8", "seed": f"an integer in [0, {2**32 - 1}]",
    "label_budget": f"an integer in [1, {2**40}]", "expected_items": "a positive integer",
    "fp_rate": "in (0, 1)", "m": "a positive integer", "k": "an integer in [1, 64]",
    "granules": "a positive integer", "breakpoints": "a non-empty list",
    "buckets": f"an integer in [1, {MAX_BUCKETS}]", "optional": "true or false",
    "values": "a non-empty list",
}
# The order of the rules where an object breaks several: an attribute's name, unknown keys
# (by name), then the fields as declared (the items of a list in their order).
_PRECEDENCE = {key: i for i, key in enumerate((
    "name", "<unknown>", "attributes", "app_id", "filters", "client", "routing",
    "counter_bits", "seed", "label_budget", "expected_items", "fp_rate", "m", "k", "low",
    "high", "granules", "breakpoints", "values", "buckets", "optional"))}

_M = TypeVar("_M", bound=_Spec)


def _rank(err: ErrorDetails) -> tuple[tuple[int, str], ...]:
    last = len(err["loc"]) - 1
    return tuple(
        (part, "") if isinstance(part, int)
        else (_PRECEDENCE["<unknown>"], part) if i == last and err["type"] == "extra_forbidden"
        else (_PRECEDENCE.get(part, len(_PRECEDENCE)), "")
        for i, part in enumerate(err["loc"]))


def _at(spec: Any, loc: Sequence[str | int]) -> Any:
    """The value at ``loc`` in the raw spec (None where there is none)."""
    for part in loc:
        if isinstance(spec, Mapping):
            spec = spec.get(part)
        elif isinstance(spec, list) and isinstance(part, int) and 0 <= part < len(spec):
            spec = spec[part]
        else:
            return None
    return spec


def _parse(model: type[_M], spec: Any, where: str | None = None) -> _M:
    """``spec`` validated by ``model`` (``where``: the key of ``spec`` in a space spec)."""
    try:
        return model.model_validate(spec)
    except ValidationError as exc:
        err = min(exc.errors(), key=_rank)
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, SpaceSpecError):  # raised by a validator above
            raise cause from None
        loc = ((where,) if where else ()) + tuple(err["loc"])
        if len(loc) > 2:  # drop the union tag pydantic puts after an attribute or a size
            loc = loc[:2] + loc[3:]
        raise _spec_error(loc, err["type"], {where: spec} if where else spec) from None


def _spec_error(loc: tuple[str | int, ...], kind: str, spec: Any) -> SpaceSpecError:
    """The error for the rule ``kind`` broken at ``loc`` of the raw ``spec``."""
    value = _at(spec, loc)
    if not loc:
        return SpaceSpecError(f"a space spec must be an object, got {value!r}", field="space",
                              value=value)
    if len(loc) == 1 and kind == "extra_forbidden":
        return SpaceSpecError(f"space spec: unknown key {loc[0]!r}", field=str(loc[0]),
                              value=value)
    if loc[0] == "filters":
        return _filters_error(loc, kind, value)
    if len(loc) == 1:
        return SpaceSpecError(f"attributes must be a non-empty list, got {value!r}",
                              field="attributes", value=value)
    return _attribute_error(int(loc[1]), loc[2:], kind, _at(spec, loc[:2]))


def _filters_error(loc: tuple[str | int, ...], kind: str, value: Any) -> SpaceSpecError:
    path = ".".join(map(str, loc))
    if kind == "extra_forbidden":
        return SpaceSpecError(f"filters: unknown key {loc[-1]!r}", field=path, value=value)
    if loc[-1] in ("filters", "client", "routing"):
        if not isinstance(value, Mapping):
            return SpaceSpecError(f"{path} must be an object, got {value!r}", field=path,
                                  value=value)
        return SpaceSpecError(f"{path} must hold either expected_items and fp_rate, or m and "
                              f"k; got keys {sorted(value)}", field=path, value=dict(value))
    return SpaceSpecError(f"{path} must be {_RULES[str(loc[-1])]}, got {value!r}", field=path,
                          value=value)


def _is_name(name: Any) -> bool:
    try:
        TypeAdapter(_Name).validate_python(name)  # on the error path only
    except ValidationError:
        return False
    return True


def _attribute_error(i: int, loc: tuple[str | int, ...], kind: str, spec: Any
                     ) -> SpaceSpecError:
    """The error of attribute ``i`` (``spec``) at ``loc`` inside it."""
    if not isinstance(spec, Mapping):
        return SpaceSpecError(f"attributes[{i}] must be an object, got {spec!r}",
                              field=f"attributes[{i}]", value=spec)
    name, given = spec.get("name"), spec.get("type")
    if loc == ("name",) or not loc and not _is_name(name):
        return SpaceSpecError(
            f"attributes[{i}].name must be an identifier (letters, digits, _ and ., not a "
            f"keyword), got {name!r}", field=f"attributes[{i}].name", value=name)
    value = _at(spec, loc)
    key = str(loc[0]) if loc else ""
    if not loc:
        rule = f"type must be 'numeric', 'discrete', 'string' or 'hashed', got {given!r}"
        value = given
    elif kind == "extra_forbidden":
        rule = f"unknown key {key!r}"
    elif len(loc) == 2 and key == "breakpoints" and given == "string":
        rule = f"breakpoints must be strings, got {value!r}"
    elif key in ("low", "high") or len(loc) == 2 and key == "breakpoints":
        what = key if len(loc) == 1 else "breakpoint"
        rule = f"{what} must be {'finite' if kind == 'finite_number' else 'a number'}, got " \
               f"{value!r}"
    elif len(loc) == 2:
        rule = f"discrete values must be strings, got {value!r}"
    else:
        rule = f"{key} must be {_RULES[key]}, got {value!r}"
    return SpaceSpecError(f"attribute {name!r}: {rule}", field=name, value=value)
