"""Label shards: which of ``shards`` parts of a network a label belongs to.

A sharded network (``NodeSettings.shards`` > 1) is that many independent networks over
disjoint sets of labels: routing a label depends only on the subscriptions that hold it,
so each shard routes its labels exactly as the whole network would. A label's shard is
MurmurHash3's 64-bit finaliser of the label, modulo ``shards``: stable (it is persisted in
topic names and sent between processes), and spread evenly even for the consecutive labels
of neighbouring cells. Every writer (the SDK, the Spark job, the nodes) and reader uses
these two functions, and a test pins their values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dls._murmur import _F1, _F2
from dls.exceptions import DLSError
from dls.hashing import _fmix64

__all__ = ["FMIX_MULTIPLIERS", "check_shards", "label_shard", "label_shards"]

_M64 = (1 << 64) - 1
#: The finaliser's two multipliers, for the other implementations of a label's shard (the
#: Catalyst expressions of :mod:`spark.catalyst.shards`)
FMIX_MULTIPLIERS = (int(_F1), int(_F2))
_F1_INT, _F2_INT = FMIX_MULTIPLIERS


def check_shards(shards: Any) -> int:
    """Return ``shards`` if it is a shard count (an integer >= 1), else raise DLSError."""
    if type(shards) is not int or shards < 1:
        raise DLSError(f"shards must be an integer >= 1, got {shards!r}", field="shards",
                       value=shards)
    return shards


def label_shard(label: int, shards: int) -> int:
    """The shard of one label (0 when ``shards`` is 1)."""
    if shards == 1:
        return 0
    k = int(label) & _M64
    k ^= k >> 33
    k = (k * _F1_INT) & _M64
    k ^= k >> 33
    k = (k * _F2_INT) & _M64
    k ^= k >> 33
    return k % shards


def label_shards(labels: np.ndarray, shards: int) -> np.ndarray:
    """The shard of each label (uint64 array) as an int64 array, like :func:`label_shard`."""
    if shards == 1:
        return np.zeros(np.shape(labels), dtype=np.int64)
    k = _fmix64(np.array(labels, dtype=np.uint64))  # a copy: mixed in place
    return (k % np.uint64(shards)).astype(np.int64)
