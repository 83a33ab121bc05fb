"""The systems the paper benchmarks compare, each behind the ``Matcher`` interface.

A system is named by the module that implements it (``benchmarks.baselines.<module>``).
Modules are looked up when a run starts: one that is not there yet is skipped with a
printed notice (``--require-all`` turns that into an error), so the harness runs while the
baselines are still being written.

Until ``benchmarks.baselines.dls`` exists, the two DLS systems go through
:class:`BrokerMatcher`, a thin adapter around ``broker_node.state.BrokerState`` set up as
``benchmarks.core`` does (one broker, two neighbours, bit-sliced CBF client bank sized
for the mean distinct labels per client at 1 %, CBF routing tables m = 2^20, k = 7).
``bruteforce`` goes through :class:`BruteForceAdapter` while the class in
``benchmarks/baselines/bruteforce.py`` lacks ``insert``/``delete``/``match``.

A baseline class is built by passing the keyword arguments its ``__init__`` names among
those of :func:`build_kwargs` (``d``, ``g``, ``n_clients``, ``high``, ``space``,
``mode``, ...), so small differences of constructor signature do not need glue code.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.baselines.base import Matcher
from benchmarks.baselines.bruteforce import BruteForceMatcher
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
    "BruteForceAdapter",
    "SystemSpec",
    "available_systems",
    "build",
    "build_kwargs",
]


class BrokerMatcher:
    """DLS through ``BrokerState``: boxes -> labels -> ``subscribe_many``; events -> route.

    Forwarding traffic is the number of labels advertised (or withdrawn) towards the first
    neighbour, the paper's Table 3/4 unit. ``insert`` includes the mapping of boxes to
    labels (the client's work in the paper), so it is the full cost from raw boxes.
    """

    supports_delete = True

    def __init__(self, d: int, g: int, n_clients: int, *, high: int = DOMAIN_HIGH,
                 mode: str = "exact", client_filter: str = "cbf",
                 routing_filter: str = "cbf", client_items: int = 64,
                 client_fp_rate: float = CLIENT_FP_RATE, client_m: int | None = None,
                 client_k: int | None = None, name: str | None = None) -> None:
        self.name = name or ("dls" if mode == "exact" else "dls-paper")
        client: dict[str, Any] = ({"m": client_m, "k": client_k} if client_m
                                  else {"expected_items": max(1, int(client_items)),
                                        "fp_rate": client_fp_rate})
        spec = space_spec(d, g, {"client": client, "routing": dict(ROUTING_FILTER)}, high)
        self.space = ContentSpace.from_spec(spec)
        kw: dict[str, Any] = {"mode": mode, "client_filter": client_filter}
        if mode == "exact":
            kw["routing_filter"] = routing_filter
        self.state = BrokerState.for_space("B", NEIGHBOURS, self.space, **kw)
        self.n_clients = n_clients
        self._names = [f"c{i}" for i in range(n_clients)]
        for i, nm in enumerate(self._names):
            if self.state.client_index(nm) != i:
                raise AssertionError("client bank indexes must follow registration order")
        self._owners = np.zeros(0, dtype=np.int64)
        self._cols = attr_names(d)

    def insert(self, lo: np.ndarray, hi: np.ndarray, owners: np.ndarray) -> int:
        n0 = len(self._owners)
        n = len(owners)
        offsets, labels = map_boxes(self.space, lo, hi)
        ids = [f"s{i}" for i in range(n0, n0 + n)]
        clients = [self._names[o] for o in np.asarray(owners).tolist()]
        msgs = self.state.subscribe_many(clients, ids, offsets, labels)
        self._owners = np.concatenate([self._owners, np.asarray(owners, dtype=np.int64)])
        return sum(len(m.labels) for m in msgs if m.to == NEIGHBOURS[0])

    def delete(self, ids: np.ndarray) -> int:
        idx = np.asarray(ids, dtype=np.int64)
        clients = [self._names[o] for o in self._owners[idx].tolist()]
        msgs = self.state.unsubscribe_many(clients, [f"s{i}" for i in idx.tolist()])
        return sum(len(m.labels) for m in msgs if m.to == NEIGHBOURS[0])

    def event_labels(self, events: np.ndarray) -> np.ndarray:
        ev = np.asarray(events)
        labels, valid = event_labels_batch(self.space, {c: ev[:, i] for i, c in
                                                        enumerate(self._cols)})
        if not valid.all():
            raise ValueError(f"events outside the domain: row {int(np.argmin(valid))}")
        return labels

    def match(self, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        routes = self.state.route(self.event_labels(events))
        return routes.offsets, routes.clients

    def memory_bytes(self) -> int:
        """Client bank, routing filters, exact tables and the registry's label arrays."""
        st = self.state
        total = st._bank.memory_bytes()
        total += sum(f.memory_bytes() for f in st._ert.values())
        total += sum(f.memory_bytes() for f in st._sff.values())
        total += st._total.memory_bytes() + sum(t.memory_bytes() for t in st._recv.values())
        for offsets, labels, clients, _ in st._registry.batches.values():
            total += offsets.nbytes + labels.nbytes + clients.nbytes
        codes = st._registry.codes
        if codes:  # the id -> code dict: its table plus one key string and one int each
            total += sys.getsizeof(codes) + len(codes) * (sys.getsizeof("s1000000") + 32)
        return int(total)


class BruteForceAdapter:
    """``BruteForceMatcher`` behind the ``Matcher`` interface (deletes by insertion number)."""

    name = "bruteforce"
    supports_delete = True

    def __init__(self, d: int, n_clients: int) -> None:
        self.bf = BruteForceMatcher(d, n_clients)
        self._row_of: np.ndarray = np.zeros(0, dtype=np.int64)  # insertion no. -> row, -1

    def insert(self, lo: np.ndarray, hi: np.ndarray, owners: np.ndarray) -> int:
        n0, n = len(self.bf), len(owners)
        self.bf.add(lo, hi, owners)
        self._row_of = np.concatenate([self._row_of, np.arange(n0, n0 + n)])
        return 0

    def delete(self, ids: np.ndarray) -> int:
        idx = np.asarray(ids, dtype=np.int64)
        rows = self._row_of[idx]
        if (rows < 0).any():
            raise KeyError(f"subscription {int(idx[np.argmax(rows < 0)])} already deleted")
        self.bf.remove_rows(rows)
        live = self._row_of >= 0
        live[idx] = False
        self._row_of = np.where(live, np.cumsum(live) - 1, -1)
        return 0

    def match(self, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.bf.match(events)

    def memory_bytes(self) -> int:
        return self.bf.memory_bytes() + int(self._row_of.nbytes)


@dataclass(frozen=True)
class SystemSpec:
    """One system of the comparison: its name, its module and how to build it."""

    name: str
    module: str
    #: Class name in the module, or None to take the module's one ``Matcher`` class.
    cls: str | None
    extra: tuple[tuple[str, Any], ...] = ()
    #: Built here when the module is missing (None: skipped).
    fallback: Callable[..., Matcher] | None = None
    #: True for exact matchers (no false positives expected).
    exact: bool = False


def _fallback_dls(mode: str) -> Callable[..., Matcher]:
    def make(**kw: Any) -> Matcher:
        return BrokerMatcher(kw["d"], kw["g"], kw["n_clients"], high=kw["high"], mode=mode,
                             client_items=kw["client_items"])
    return make


def _fallback_bf(**kw: Any) -> Matcher:
    return BruteForceAdapter(kw["d"], kw["n_clients"])


SYSTEMS: tuple[SystemSpec, ...] = (
    SystemSpec("bruteforce", "benchmarks.baselines.bruteforce", None, fallback=_fallback_bf,
               exact=True),
    SystemSpec("dls", "benchmarks.baselines.dls", None, (("mode", "exact"),),
               fallback=_fallback_dls("exact")),
    SystemSpec("dls-paper", "benchmarks.baselines.dls", None, (("mode", "paper"),),
               fallback=_fallback_dls("paper")),
    SystemSpec("mics", "benchmarks.baselines.mics", None),
    SystemSpec("rtree", "benchmarks.baselines.rtree_index", None, exact=True),
)


def build_kwargs(d: int, g: int, n_clients: int, *, high: int = DOMAIN_HIGH,
                 client_items: int = 64) -> dict[str, Any]:
    """Every keyword a system constructor may ask for."""
    spec = space_spec(d, g, {"client": {"expected_items": max(1, client_items),
                                        "fp_rate": CLIENT_FP_RATE},
                             "routing": dict(ROUTING_FILTER)}, high)
    return {"d": d, "g": g, "n_clients": n_clients, "high": high, "domain_high": high,
            "granules": g, "space": ContentSpace.from_spec(spec), "space_spec": spec,
            "client_items": client_items, "expected_items": client_items,
            "client_expected_items": client_items, "client_fp_rate": CLIENT_FP_RATE}


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
    """An empty instance of a system, from its module or its fallback."""
    try:
        mod = importlib.import_module(spec.module)
    except ModuleNotFoundError:
        mod = None
    cls = _find_class(mod, spec) if mod is not None else None
    if cls is None:
        if spec.fallback is None:
            raise LookupError(f"system {spec.name!r}: no Matcher class in {spec.module}")
        return spec.fallback(**kwargs)
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
    """Systems that can run now (module present or a fallback), in comparison order."""
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
        elif spec.fallback is not None:
            log(f"notice: {spec.module} not present yet; {spec.name} runs through the "
                f"harness's own adapter")
            out.append(spec)
        elif require_all:
            raise LookupError(f"system {spec.name!r}: module {spec.module} is missing")
        else:
            log(f"notice: {spec.module} not present yet; {spec.name} skipped")
    return out
