"""Compiled kernels of the node's exact check (``broker_node.edge.EdgeTable``).

Each candidate client of a label is decided by walking its subscriptions' rows until one
holds the label's cell wholly (SURE), which a numpy pass cannot stop early: it compares
every row of every candidate. The numpy reference lives with its caller
(``EdgeTable._reference``); ``tests/broker_node/test_edge.py`` checks that both give the
same verdicts. Like every kernel here, compiled only when :data:`dls._jit.ENABLED` (else
these are plain Python functions, used by that test alone).

Arrays (a row is one subscription; ``cells`` one row per event, one column per attribute;
``labels`` the events' labels): ``span``: ``(rows, numeric attributes, 4)`` int32, the
cells a row holds, ``[first, last]``, then those it holds wholly; ``masks``: ``(rows,
words)`` uint64, the discrete cells a row holds, attribute ``j`` from word ``word_off[j]``;
``general``: the rows held as label sets (any subscription but a simple one): row ``r``'s
sorted labels are ``g_labels[g_start[r]:g_start[r] + g_count[r]]``, ``g_inside`` flags the
interior ones; ``start``/``count``/``flat``: each client's rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dls._jit import njit

__all__ = ["edge_walk"]

SURE, CHECK, NONE = 0, 1, 2


@njit
def edge_walk(which: Any, cids: Any, evs: Any, cells: Any, labels: Any, num_cols: Any,
              disc_cols: Any, word_off: Any, start: Any, count: Any, flat: Any, span: Any,
              masks: Any, general: Any, g_start: Any, g_count: Any, g_labels: Any,
              g_inside: Any, verdict: Any, n_rows: Any, at: Any, out_rows: Any,
              out_owner: Any, write: Any) -> None:
    """Walk the rows of candidates ``which`` (client ``cids[i]``, event ``evs[i]``).

    ``write`` False: ``verdict[i]`` SURE (a row holds the cell wholly: the client's other
    rows are not read), CHECK (some row holds it) or NONE, and ``n_rows[i]`` how many rows
    hold it. ``write`` True (CHECK candidates): the rows holding the cell are written to
    ``out_rows`` from ``at[m]`` on, with ``out_owner`` the candidate.
    """
    one, zero = np.uint64(1), np.uint64(0)
    for m in range(which.shape[0]):
        i = which[m]
        c, e = cids[i], evs[i]
        k = at[m] if write else 0
        sure = False
        for t in range(start[c], start[c] + count[c]):
            r = flat[t]
            h = 2  # 0: the row does not hold the cell; 1: it holds it; 2: wholly
            if general[r]:
                lo, end = g_start[r], g_start[r] + g_count[r]
                hi = end
                while lo < hi:  # binary search in the row's sorted labels
                    mid = (lo + hi) // 2
                    if g_labels[mid] < labels[e]:
                        lo = mid + 1
                    else:
                        hi = mid
                h = 0 if lo == end or g_labels[lo] != labels[e] else (
                    2 if g_inside[lo] else 1)
            else:
                for j in range(num_cols.shape[0]):
                    x = cells[e, num_cols[j]]
                    if x < span[r, j, 0] or x > span[r, j, 1]:
                        h = 0
                        break
                    if x < span[r, j, 2] or x > span[r, j, 3]:
                        h = 1
                for j in range(disc_cols.shape[0] if h else 0):
                    x = cells[e, disc_cols[j]]
                    if (masks[r, word_off[j] + x // 64] >> np.uint64(x % 64)) & one == zero:
                        h = 0
                        break
            if not h:
                continue
            if write:
                out_rows[k] = r
                out_owner[k] = i
            k += 1
            if h == 2 and not write:
                sure = True
                break
        if not write:
            n_rows[i] = k
            verdict[i] = SURE if sure else (CHECK if k else NONE)
