"""A stable digest of a broker's state: equal states, equal digests; any change, another one.

:func:`state_digest` hashes everything routing depends on, in a form that does not depend
on the order or batching of the operations that built the state:

* the node, its neighbours, its label space and filter configuration;
* the clients, by bank index (the index is what the filters are keyed by);
* every live subscription: id, client and labels, in id order;
* per neighbour: the labels it advertised to us (exact) and those we advertise to it;
* the exact count of every label (local subscriptions plus neighbours' advertisements) and
  the live advertisements per neighbour;
* the filters: the client bank's counters (one column per client) and each neighbour's
  event routing table (in ``paper`` mode also its SFF).

Traffic counters (labels advertised and withdrawn so far) and ``BrokerState.version`` (a
cache key, moved by every call, refused or not) are history, not state: they are left out.
Tests use the digest to show that a refused message changes nothing
(``tests/broker_node/test_fuzz.py``) and that a rebuilt state is the one it replaces.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from broker_node.state import BrokerState

__all__ = ["state_digest"]


class _Feed:
    """Length-prefixed, typed chunks into one hash (no two inputs give the same stream)."""

    def __init__(self) -> None:
        self.h = hashlib.blake2b(digest_size=20)

    def text(self, tag: str, value: Any) -> None:
        data = repr(value).encode("utf-8", "surrogatepass")
        self.h.update(b"t%s:%d:" % (tag.encode(), len(data)))
        self.h.update(data)

    def array(self, tag: str, arr: np.ndarray) -> None:
        a = np.ascontiguousarray(arr)
        self.h.update(b"a%s:%s:%s:" % (tag.encode(), a.dtype.str.encode(),
                                       repr(a.shape).encode()))
        self.h.update(a.tobytes())


def _tables(state: BrokerState) -> dict[str, Any]:
    """The state's own tables, read only.

    ``BrokerState`` exposes no accessor for them and its module is at its size limit, so
    the digest reads them here, in this one place: the registry, the exact count table,
    the client bank and the neighbours' filters.
    """
    d = vars(state)
    return {"registry": d["_registry"], "total": d["_total"],
            "bank": state._bank,  # made again first if it was deferred
            "ert": d["_ert"], "sff": d["_sff"]}


def _bank_counts(bank: Any) -> np.ndarray:
    """The bank's counter matrix cut to its clients (its spare capacity is no state)."""
    counts = bank.counters if hasattr(bank, "counters") else bank.counts
    return np.asarray(counts)[:, :bank.n_clients]


def state_digest(state: BrokerState) -> str:
    """A hex digest of ``state``: the same for equal states, another after any change."""
    t = _tables(state)
    f = _Feed()
    f.text("node", (state.node_id, state.neighbours, state.label_base,
                    state.label_space_size, state.config))
    f.text("clients", state.clients)
    registry = t["registry"]
    f.text("subscriptions", len(registry))
    for sid in sorted(registry.codes):
        client, labels = registry.get(sid)
        f.text("sub", (sid, state.client_name(client)))
        f.array("labels", np.sort(np.asarray(labels, dtype=np.uint64)))
    total = t["total"]
    live = np.sort(total.nonzero())
    f.array("live", live)
    f.array("counts", np.asarray(total.get(live), dtype=np.int64))
    for n in state.neighbours:
        f.text("neighbour", (n, state.counters.per_neighbour_live.get(n)))
        f.array("received", np.sort(state.received_from(n)))
        f.array("advertised", np.sort(state.advertised_to(n)))
        f.array("ert", t["ert"][n].counters)
        if n in t["sff"]:
            f.array("sff", t["sff"][n].counters)
    f.array("bank", _bank_counts(t["bank"]))
    return f.h.hexdigest()
