"""A run of LabelSubscription messages read at once: what a node's subscribe topic brings.

A node takes subscriptions in runs of up to a batch (1,000 by default). Read one by one,
each costs a fastavro call, a dict, a record object and a labels array; at tens of
thousands a second that is most of the node's time. Here one compiled pass walks the
bodies of a whole run (the single-object header, then ``client``, ``id``, ``labels``,
``where``, ``row`` as :file:`schemas/avro/LabelSubscription.avsc` orders them) and says
where each field lies; the labels of all of them become one array, their rows one block.

This is a fast path, not a second decoder with its own rules: a run comes back only when
every message is of the current schema version, decodes completely, has labels in whole
8-byte words, a row of the space's size and text fields that are UTF-8. Anything else
(a bad message, an earlier schema version, a subscription without a row) gives None, and
the caller reads the run one message at a time, as :meth:`~connectors.serde.avro.Serde.
decode` does, dead-lettering what is wrong with its exact reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from dls import _jit

__all__ = ["SubscriptionRun", "read_run"]

_BE_U64 = np.dtype(">u8")
#: columns of the scan's output: start and end of client, id, labels, where, row
_FIELDS = 10


@dataclass(frozen=True)
class SubscriptionRun:
    """The fields of a run of LabelSubscription messages, in order."""

    clients: list[str]
    ids: list[str]
    offsets: np.ndarray  # int64, n + 1: message i's labels are labels[offsets[i]:offsets[i+1]]
    labels: np.ndarray  # uint64, native order
    rows: np.ndarray  # uint8 (n, row size): the rows as sent


@_jit.njit
def _varint(buf: Any, p: int, end: int) -> tuple[int, int]:
    """An Avro long (zig-zag varint) at ``p``: ``(value, next position)``; (-1, -1) if bad."""
    z = 0
    shift = 0
    while True:
        if p >= end or shift > 63:
            return -1, -1
        b = int(buf[p])
        p += 1
        z |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    return (z >> 1) ^ -(z & 1), p


@_jit.njit
def _scan(buf: Any, starts: Any, ends: Any, header: Any, out: Any) -> int:
    """Where each message's fields lie (``out[i]``, -1 for a null); the first bad one, or -1.

    Bad: not the ``header`` given (another schema or version), a length past the
    message's end or negative, a union branch other than null (0) or the value (1), or
    bytes left after the last field.
    """
    h = header.shape[0]
    for i in range(starts.shape[0]):
        p, end = starts[i], ends[i]
        if end - p < h:
            return i
        for j in range(h):
            if buf[p + j] != header[j]:
                return i
        p += h
        for f in range(5):
            if f >= 3:  # where, row: a union with null
                branch, p = _varint(buf, p, end)
                if branch == 0:
                    out[i, 2 * f] = -1
                    out[i, 2 * f + 1] = -1
                    continue
                if branch != 1:
                    return i
            n, p = _varint(buf, p, end)
            if n < 0 or p + n > end:
                return i
            out[i, 2 * f] = p
            out[i, 2 * f + 1] = p + n
            p += n
        if p != end:
            return i
    return -1


def read_run(values: Sequence[bytes | None], header: bytes, row_size: int
             ) -> SubscriptionRun | None:
    """The run's fields, or None when any message needs reading on its own (see above).

    ``header``: the current LabelSubscription's single-object header; ``row_size``: the
    bytes of one of the space's rows.
    """
    if not _jit.ENABLED or not values or any(type(v) is not bytes for v in values):
        return None
    vals = cast(list[bytes], list(values))
    n = len(vals)
    lens = np.fromiter(map(len, vals), np.int64, n)
    ends = np.cumsum(lens)
    starts = ends - lens
    out = np.empty((n, _FIELDS), dtype=np.int64)
    buf = np.frombuffer(b"".join(vals), dtype=np.uint8)
    if _scan(buf, starts, ends, np.frombuffer(header, dtype=np.uint8), out) >= 0:
        return None
    rel = out - np.where(out >= 0, starts[:, None], 0)  # positions inside each message
    lab_len = rel[:, 5] - rel[:, 4]
    if (lab_len % 8).any() or (rel[:, 8] < 0).any() or (rel[:, 9] - rel[:, 8] != row_size).any():
        return None
    spans = rel.tolist()
    try:
        clients = [v[s[0]:s[1]].decode() for v, s in zip(vals, spans, strict=True)]
        ids = [v[s[2]:s[3]].decode() for v, s in zip(vals, spans, strict=True)]
        for v, s in zip(vals, spans, strict=True):
            if s[6] >= 0:
                v[s[6]:s[7]].decode()  # a where that is no text is read on its own
    except UnicodeDecodeError:
        return None
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lab_len // 8, out=offsets[1:])
    labels = np.frombuffer(b"".join(v[s[4]:s[5]] for v, s in zip(vals, spans, strict=True)),
                           dtype=_BE_U64).astype(np.uint64)
    rows = np.frombuffer(b"".join(v[s[8]:s[9]] for v, s in zip(vals, spans, strict=True)),
                         dtype=np.uint8).reshape(n, row_size)
    return SubscriptionRun(clients, ids, offsets, labels, rows)
