"""The systems the paper benchmarks compare, each behind the ``Matcher`` interface.

A system is named by the module that implements it (``benchmarks.baselines.<module>``).
Modules are looked up when a run starts: one that is not there yet is skipped with a
printed notice (``--require-all`` turns that into an error), so the harness runs while the
baselines are still being written.

:class:`BrokerMatcher` is a DLS broker whose client filters have a given ``m`` and ``k``
(the false-positive sweep of Table 10 needs that; ``DLSMatcher`` sizes its filters from an
item count and a target rate) and, with ``client_filter="direct"``, exact label sets.

A baseline class is built by passing the keyword arguments its ``__init__`` names among
those of :func:`build_kwargs` (``d``, ``g``, ``n_clients``, ``high``, ``space``,
``mode``, ...), so small differences of constructor signature do not need glue code.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.baselines.base import Matcher
from benchmarks.core import map_boxes
from benchmarks.workload import DOMAIN_HIGH, attr_names, space_spec
from broker_node.state import BrokerState
from dls.mapping import event_labels_batch
from dls.space import ContentSpace

NEIGHBOURS = ("N1", "N2")
ROUTING_FILTER = {"m": 2**20, "k": 7}
CLIENT_FP_RATE = 0.01

__all__ = [
    "SYSTEMS",
    "BrokerMatcher",
    "SystemSpec",
    "available_systems",
    "build",
    "build_kwargs",
]


class BrokerMatcher:
    """A DLS broker with client filters of given ``m`` and ``k`` (or direct label sets).

    Insert and match only (the false-positive sweep); the clients are registered in order,
    so bank index ``j`` is workload client ``j``. ``attributes`` replaces the ``g`` equal
    cells of each attribute (e.g. by the equi-depth cells of :mod:`dls.tuning`).
    """

    def __init__(self, d: int, g: int, n_clients: int, *, high: int = DOMAIN_HIGH,
                 client_filter: str = "cbf", routing_filter: str = "cbf",
                 client_m: int = 65_536, client_k: int = 4, name: str = "dls",
                 attributes: list[dict[str, Any]] | None = None) -> None:
        self.name = name
        spec = space_spec(d, g, {"client": {"m": client_m, "k": client_k},
                                 "routing": dict(ROUTING_FILTER)}, high)
        if attributes is not None:  # other cells of the same d attributes (tuned ones)
            spec["attributes"] = attributes
        self.space = ContentSpace.from_spec(spec)
        self.state = BrokerState.for_space("B", NEIGHBOURS, self.space,
                                           client_filter=client_filter,
                                           routing_filter=routing_filter,
                                           resize_filters=False)  # the paper's sizes
        self._names = [f"c{i}" for i in range(n_clients)]
        for i, nm in enumerate(self._names):
            if self.state.client_index(nm) != i:
                raise AssertionError("client bank indexes must follow registration order")
        self._n = 0
        self._cols = attr_names(d)

    def insert(self, lo: np.ndarray, hi: np.ndarray, owners: np.ndarray) -> int:
        offsets, labels = map_boxes(self.space, lo, hi)
        ids = [f"s{i}" for i in range(self._n, self._n + len(owners))]
        self._n += len(owners)
        clients = [self._names[o] for o in np.asarray(owners).tolist()]
        msgs = self.state.subscribe_many(clients, ids, offsets, labels)
        return sum(len(m.labels) for m in msgs if m.to == NEIGHBOURS[0])

    def event_labels(self, events: np.ndarray) -> np.ndarray:
        ev = np.asarray(events)
        labels, valid = event_labels_batch(self.space, {c: ev[:, i] for i, c in
                                                        enumerate(self._cols)})
        if not valid.all():
            raise ValueError(f"events: row {int(np.argmin(valid))} is outside the domain")
        return labels

    def match(self, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        routes = self.state.route(self.event_labels(events))
        return routes.offsets, routes.clients


@dataclass(frozen=True)
class SystemSpec:
    """One system of the comparison: its name, its module and how to build it."""

    name: str
    module: str
    #: Class name in the module, or None to take the module's one ``Matcher`` class.
    cls: str | None
    extra: tuple[tuple[str, Any], ...] = ()
    #: True for exact matchers (no false positives expected).
    exact: bool = False


SYSTEMS: tuple[SystemSpec, ...] = (
    SystemSpec("bruteforce", "benchmarks.baselines.bruteforce", None, exact=True),
    SystemSpec("dls", "benchmarks.baselines.dls", None, (("mode", "exact"),)),
    SystemSpec("dls-paper", "benchmarks.baselines.dls", None, (("mode", "paper"),)),
    SystemSpec("mics", "benchmarks.baselines.mics", None),
    SystemSpec("rtree", "benchmarks.baselines.rtree_index", None, exact=True),
)


def build_kwargs(d: int, g: int, n_clients: int, *, high: int = DOMAIN_HIGH,
                 client_items: int = 64, n_subs: int = 0,
                 update_threads: int = 1) -> dict[str, Any]:
    """Every keyword a system constructor may ask for.

    ``n_subs`` (``expected_subscriptions``): how many subscriptions the experiment may
    insert, so that a system can prepare, untimed, the inputs its API takes for them
    (DLS: the string ids), as a caller holds them before it subscribes.
    ``update_threads``: the DLS systems' (``BrokerConfig.update_threads``).
    """
    spec = space_spec(d, g, {"client": {"expected_items": max(1, client_items),
                                        "fp_rate": CLIENT_FP_RATE},
                             "routing": dict(ROUTING_FILTER)}, high)
    return {"d": d, "g": g, "n_clients": n_clients, "high": high, "domain_high": high,
            "granules": g, "space": ContentSpace.from_spec(spec), "space_spec": spec,
            "client_items": client_items, "expected_items": client_items,
            "client_expected_items": client_items, "client_fp_rate": CLIENT_FP_RATE,
            "expected_subscriptions": n_subs, "update_threads": update_threads}


def _is_matcher_class(obj: Any) -> bool:
    return (inspect.isclass(obj) and all(callable(getattr(obj, m, None)) for m in
                                         ("insert", "match", "memory_bytes")))


def _find_class(mod: Any, spec: SystemSpec) -> type | None:
    if spec.cls:
        return getattr(mod, spec.cls, None)
    names = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
    found = [getattr(mod, n) for n in names if _is_matcher_class(getattr(mod, n, None))]
    found = [c for c in found if c.__module__ == mod.__name__]
    if len(found) == 1:
        return found[0]
    # several classes (e.g. one per mode): the one whose ``name`` is the system's
    for c in found:
        if getattr(c, "name", None) == spec.name:
            return c
    return found[0] if found else None


def build(spec: SystemSpec, kwargs: dict[str, Any]) -> Matcher:
    """An empty instance of a system."""
    cls = _find_class(importlib.import_module(spec.module), spec)
    if cls is None:
        raise LookupError(f"system {spec.name!r}: no Matcher class in {spec.module}")
    kw = {**kwargs, **dict(spec.extra)}
    params = inspect.signature(cls).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        args = kw
    else:
        args = {k: v for k, v in kw.items() if k in params}
    missing = [k for k, p in params.items() if p.default is p.empty
               and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and k not in args]
    if missing:
        raise TypeError(f"system {spec.name!r}: {cls.__name__} needs {missing}, which the "
                        f"harness does not provide")
    obj = cls(**args)
    if "mode" in dict(spec.extra) and "mode" not in args:
        raise TypeError(f"system {spec.name!r}: {cls.__name__} takes no 'mode'")
    return obj


def available_systems(wanted: tuple[str, ...] | None = None, *, require_all: bool = False,
                      log: Callable[[str], None] = print) -> list[SystemSpec]:
    """Systems whose module is present, in comparison order (the others: a notice)."""
    out = []
    for spec in SYSTEMS:
        if wanted is not None and spec.name not in wanted:
            continue
        try:
            importlib.import_module(spec.module)
            present = True
        except ModuleNotFoundError:
            present = False
        if present:
            out.append(spec)
        elif require_all:
            raise LookupError(f"system {spec.name!r}: module {spec.module} is missing")
        else:
            log(f"notice: {spec.module} not present yet; {spec.name} skipped")
    return out
