"""Cells fitted to the data: equi-depth breakpoints from a sample of event values.

The paper cuts every numeric attribute into ``g`` equal cells and leaves tuning the cells
as future work (§7: "model parameters tuning is manual and require domain knowledge").
Equal cells suit uniform data. On skewed data most events fall into a few cells, and a
subscription whose bounds cut through such a cell lets through many events it does not
want: the quantisation false positives. Equi-depth cells take the same number of cells
(so the label layout keeps its width) but place the breakpoints at quantiles of a sample
of event values. Every cell then holds about the same share of the events, and the cells
are narrow where the data is dense.

A content space is fixed for the life of a network: every subscription's labels depend on
it. So the space is tuned once, from a sample taken before deployment (or for a new
``app_id``), not while nodes run. Tuning changes false positives only: the mapping of any
space, tuned or not, never drops an event that a subscription matches.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from dls.exceptions import SpaceSpecError
from dls.space import ContentSpace

__all__ = ["cell_shares", "equi_depth_breakpoints", "equi_depth_strings", "tune_space"]


def _sample(values: Any, field: str, low: float, high: float) -> np.ndarray:
    """The sample as sorted float64, refused if empty, non-finite or out of the domain."""
    try:
        v = np.asarray(values, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise SpaceSpecError(f"attribute {field!r}: sample values must be numbers",
                             field=field, value=repr(values)[:80]) from None
    if v.size == 0:
        raise SpaceSpecError(f"attribute {field!r}: the sample is empty", field=field,
                             value=[])
    bad = ~np.isfinite(v) | (v < low) | (v > high)
    if bad.any():
        x = float(v[int(np.argmax(bad))])
        raise SpaceSpecError(
            f"attribute {field!r}: sample value {x!r} is not a finite number in "
            f"[{low}, {high}]", field=field, value=x)
    return np.sort(v)


def equi_depth_breakpoints(values: Any, cells: int, low: float, high: float, *,
                           field: str = "values") -> tuple[float, ...]:
    """Breakpoints that cut ``[low, high]`` into up to ``cells`` cells of equal sample mass.

    Breakpoint ``i`` is the sample value of rank ``floor(i * n / cells)`` (a value ``x``
    falls in the cell numbered by how many breakpoints are ``<= x``, so about ``i * n /
    cells`` sample values lie below breakpoint ``i``). Repeated values give repeated
    quantiles, which are merged: a sample with few distinct values gets fewer cells.
    Breakpoints equal to ``low`` are dropped (they would leave an empty first cell).

    Args:
        values: Sample of the attribute's values.
        cells: Number of cells wanted (at least 1).
        low: Lower end of the attribute's domain.
        high: Upper end of the attribute's domain.
        field: Attribute name for error messages.

    Returns:
        Strictly increasing breakpoints inside ``(low, high)``; empty if the sample
        cannot separate any two cells.

    Raises:
        SpaceSpecError: ``cells`` is not a positive integer, or the sample is empty or has
            a value that is not a finite number inside ``[low, high]``.
    """
    if not isinstance(cells, int | np.integer) or isinstance(cells, bool) or cells < 1:
        raise SpaceSpecError(f"attribute {field!r}: cells must be a positive integer, got "
                             f"{cells!r}", field=field, value=cells)
    v = _sample(values, field, low, high)
    ranks = (np.arange(1, int(cells), dtype=np.int64) * v.size) // int(cells)
    points = np.unique(v[ranks])
    return tuple(float(b) for b in points if low < b < high)


def equi_depth_strings(values: Any, cells: int, *, field: str = "values") -> tuple[str, ...]:
    """Lexicographic breakpoints cutting a string sample into up to ``cells`` equal shares.

    The same rule as :func:`equi_depth_breakpoints` on the sample sorted in code-point
    order; ``""`` is never a breakpoint (no string lies below it).

    Raises:
        SpaceSpecError: ``cells`` is not a positive integer, or the sample is empty or holds
            something other than strings.
    """
    if not isinstance(cells, int | np.integer) or isinstance(cells, bool) or cells < 1:
        raise SpaceSpecError(f"attribute {field!r}: cells must be a positive integer, got "
                             f"{cells!r}", field=field, value=cells)
    v = list(values)
    bad = [x for x in v if not isinstance(x, str)]
    if bad:
        raise SpaceSpecError(f"attribute {field!r}: sample values must be strings, got "
                             f"{bad[0]!r}", field=field, value=bad[0])
    if not v:
        raise SpaceSpecError(f"attribute {field!r}: the sample is empty", field=field,
                             value=[])
    v.sort()
    ranks = (np.arange(1, int(cells), dtype=np.int64) * len(v)) // int(cells)
    return tuple(sorted({v[int(r)] for r in ranks} - {""}))


def cell_shares(space: ContentSpace, name: str, values: Any) -> np.ndarray:
    """Share of ``values`` in each cell of attribute ``name`` of ``space``."""
    attr = space.by_name[name]
    given: Any = list(values) if attr.kind == "string" else np.asarray(values, np.float64)
    cells = np.asarray(attr.cells(given), dtype=np.int64)
    counts = np.bincount(cells, minlength=attr.n_cells)
    return counts / max(1, counts.sum())


def tune_space(spec: Mapping[str, Any], samples: Mapping[str, Any], *,
               cells: int | None = None) -> dict[str, Any]:
    """A copy of ``spec`` whose sampled numeric and string attributes get equi-depth cuts.

    Each numeric attribute named in ``samples`` keeps its number of cells (``granules``,
    or one more than its breakpoints) unless ``cells`` says otherwise, and gets the
    breakpoints of :func:`equi_depth_breakpoints` instead. An attribute whose sample
    yields no breakpoint at all (every value the same) is left as it was. Everything
    else (other attributes, filters, app id) is kept as given.

    Raises:
        SpaceSpecError: ``spec`` is not a valid space, a sample names an attribute the
            space does not have or one that is not numeric, or a sample is bad (see
            :func:`equi_depth_breakpoints`).
    """
    ContentSpace.from_spec(dict(spec))  # the input itself must be a valid space
    out = copy.deepcopy(dict(spec))
    by_name = {a["name"]: a for a in out["attributes"]}
    for name in samples:
        if name not in by_name:
            raise SpaceSpecError(f"sample for unknown attribute {name!r}", field=str(name),
                                 value=sorted(by_name))
        if by_name[name].get("type") not in ("numeric", "string"):
            raise SpaceSpecError(f"attribute {name!r} is {by_name[name].get('type')}: only "
                                 "numeric and string attributes can be tuned", field=name,
                                 value=by_name[name].get("type"))
    for name, values in samples.items():
        attr = by_name[name]
        if attr["type"] == "string":
            n = cells if cells is not None else len(attr["breakpoints"]) + 1
            cuts = equi_depth_strings(values, n, field=name)
            if cuts:
                attr["breakpoints"] = list(cuts)
            continue
        n = cells if cells is not None else (
            attr["granules"] if "granules" in attr else len(attr["breakpoints"]) + 1)
        low, high = float(attr["low"]), float(attr["high"])
        points = equi_depth_breakpoints(values, n, low, high, field=name)
        if not points:
            continue
        attr.pop("granules", None)
        attr["breakpoints"] = [int(b) if b.is_integer() else b for b in points]
    ContentSpace.from_spec(out)  # the result is valid by construction; checked anyway
    return out
