"""Label shards in Catalyst: :func:`dls.shards.label_shard` on bigint labels, exactly.

A label's shard is MurmurHash3's 64-bit finaliser (``fmix64``) of the label modulo the
shard count. ``fmix64`` multiplies 64-bit words, wrapping; a Spark ``bigint * bigint``
does not wrap: with ANSI mode on (Spark 4's default) an overflow throws, with it off it
wraps, so neither can be relied on. :func:`mul64` computes the wrapped product from
pieces whose sums and products stay below 2**50 (the label in two 32-bit halves, the
constant in four 16-bit ones, the result assembled from its low and high 32-bit words
with shifts, which never overflow), so it is exact in either mode and costs a few long
operations. :func:`umod` takes the unsigned remainder the same way (two 32-bit halves).

The steps run as stages over an array of labels (:func:`with_label_shards`), each a
``transform`` whose lambda variable is the previous stage's value: one expression per
step, not a tree that repeats the label in every place a step uses it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from dls.shards import FMIX_MULTIPLIERS
from spark.catalyst.columns import fns
from spark.catalyst.sqlfns import Expr, select

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["mul64", "umod", "with_label_shards", "xorshift33"]

_M32 = 0xFFFFFFFF
_M16 = 0xFFFF


def _long(v: int) -> Column:
    return fns().lit(v).cast("bigint")


def xorshift33(x: Column) -> Column:
    """``x ^ (x >>> 33)`` of a bigint (a step of ``fmix64``)."""
    return x.bitwiseXOR(fns().shiftrightunsigned(x, 33))


def mul64(x: Column, c: int) -> Column:
    """``x * c mod 2**64`` of a bigint ``x`` and an unsigned 64-bit constant ``c``.

    As a bigint (two's complement), exact whether or not the session runs ANSI mode: no
    operation overflows.
    """
    F = fns()
    c0, c1, c2, c3 = ((c >> s) & _M16 for s in (0, 16, 32, 48))
    lo32, hi32 = x.bitwiseAND(_long(_M32)), F.shiftrightunsigned(x, 32)  # each < 2**32
    t0 = lo32 * _long(c0)  # < 2**48
    t1 = lo32 * _long(c1)
    low = t0.bitwiseAND(_long(_M32)) + F.shiftleft(t1.bitwiseAND(_long(_M16)), 16)  # < 2**33
    # The high word, mod 2**32 (every term < 2**49, so the sum fits).
    mid = (lo32 * _long(c3) + hi32 * _long(c1)).bitwiseAND(_long(_M16))
    high = (F.shiftrightunsigned(t0, 32) + F.shiftrightunsigned(t1, 16)
            + F.shiftrightunsigned(low, 32) + lo32 * _long(c2) + hi32 * _long(c0)
            + F.shiftleft(mid, 16))
    return F.shiftleft(high.bitwiseAND(_long(_M32)), 32).bitwiseOR(low.bitwiseAND(_long(_M32)))


def umod(x: Column, n: int) -> Column:
    """The unsigned 64-bit value of bigint ``x`` modulo ``n`` (1 <= n < 2**20), as an int."""
    F = fns()
    hi = F.shiftrightunsigned(x, 32) % _long(n)
    lo = x.bitwiseAND(_long(_M32))
    return ((hi * _long((1 << 32) % n) + lo) % _long(n)).cast("int")


def _steps(shards: int) -> list[Callable[[Column], Column]]:
    f1, f2 = FMIX_MULTIPLIERS
    return [xorshift33, lambda x: mul64(x, f1), xorshift33,
            lambda x: mul64(x, f2), xorshift33, lambda x: umod(x, shards)]


def with_label_shards(df: DataFrame, labels: Column, out: str, shards: int) -> DataFrame:
    """Add ``out``: the shard (int) of each label of ``labels`` (an array of bigint labels).

    As :func:`dls.shards.label_shards`; a null array gives null. ``labels``: an
    expression of :mod:`spark.catalyst.sqlfns` or a pyspark ``Column``.
    """
    F = fns()
    cur = labels
    names = []
    if not isinstance(labels, Expr):  # a pyspark Column: a column of its own first
        df = select(df, "*", labels.alias("_sh_in"))
        cur = F.col("_sh_in")
        names.append("_sh_in")
    for i, step in enumerate(_steps(shards)):
        name = f"_sh{i}"
        df = select(df, "*", F.transform(cur, step).alias(name))
        cur = F.col(name)
        names.append(name)
    return select(df, "*", cur.alias(out)).drop(*names)
