"""Compiled kernels of the node's exact check (``broker_node.edge.EdgeTable``).

Each candidate client of a label is decided by walking its subscriptions' rows until one
holds the label's cell wholly (SURE), which a numpy pass cannot stop early: it compares
every row of every candidate. The numpy reference lives with its caller
(``EdgeTable._classify_reference``); ``tests/broker_node/test_edge.py`` checks that both
give the same verdicts. Like every kernel here, compiled only when :data:`dls._jit.ENABLED`
(else these are plain Python functions, used by that test alone).

Arrays (a row is one subscription; ``cells`` one row per event, one column per attribute):
``span``: ``(rows, numeric attributes, 4)`` int32, the cells a row holds, ``[first,
last]``, then those it holds wholly; ``masks``: ``(rows, words)`` uint64, the discrete cells
a row holds, attribute ``j`` from word ``word_off[j]``; ``general``: rows the kernels leave
to Python (a general row); ``start``/``count``/``flat``: each client's rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dls._jit import njit

__all__ = ["edge_check_rows", "edge_verdicts"]

SURE, CHECK, NONE, UNDECIDED = 0, 1, 2, 3


@njit
def edge_verdicts(cids: Any, evs: Any, cells: Any, num_cols: Any, disc_cols: Any,
                  word_off: Any, start: Any, count: Any, flat: Any, span: Any,
                  masks: Any, general: Any, verdict: Any, n_rows: Any) -> None:
    """The verdict of candidate ``i`` (client ``cids[i]``, event ``evs[i]``) of each ``i``.

    ``verdict[i]``: SURE (a simple row holds the cell wholly: its other rows are not
    read), CHECK / NONE (some / no simple row holds it, the client has no general row),
    or UNDECIDED (no simple row holds it wholly and the client has a general row);
    ``n_rows[i]``: how many of its simple rows hold the cell (up to the SURE one).
    """
    one, zero = np.uint64(1), np.uint64(0)
    for i in range(cids.shape[0]):
        c, e = cids[i], evs[i]
        k = 0
        sure = False
        gen = False
        for t in range(start[c], start[c] + count[c]):
            r = flat[t]
            if general[r]:
                gen = True
                continue
            h = 2  # 0: the row does not hold the cell; 1: it holds it; 2: wholly
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
            if h:
                k += 1
                if h == 2:
                    sure = True
                    break
        n_rows[i] = k
        if sure:
            verdict[i] = SURE
        elif gen:
            verdict[i] = UNDECIDED
        else:
            verdict[i] = CHECK if k else NONE


@njit
def edge_check_rows(which: Any, cids: Any, evs: Any, cells: Any, num_cols: Any,
                    disc_cols: Any, word_off: Any, start: Any, count: Any, flat: Any,
                    span: Any, masks: Any, general: Any, at: Any,
                    out_rows: Any, out_owner: Any) -> None:
    """The simple rows holding the cell of each candidate ``which[m]``, from ``at[m]`` on.

    Written to ``out_rows`` (the row) and ``out_owner`` (the candidate ``which[m]``).
    """
    one, zero = np.uint64(1), np.uint64(0)
    for m in range(which.shape[0]):
        i = which[m]
        c, e = cids[i], evs[i]
        p = at[m]
        for t in range(start[c], start[c] + count[c]):
            r = flat[t]
            if general[r]:
                continue
            h = True
            for j in range(num_cols.shape[0]):
                x = cells[e, num_cols[j]]
                if x < span[r, j, 0] or x > span[r, j, 1]:
                    h = False
                    break
            for j in range(disc_cols.shape[0] if h else 0):
                x = cells[e, disc_cols[j]]
                if (masks[r, word_off[j] + x // 64] >> np.uint64(x % 64)) & one == zero:
                    h = False
                    break
            if h:
                out_rows[p] = r
                out_owner[p] = i
                p += 1
