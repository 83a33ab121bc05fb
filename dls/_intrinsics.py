"""LLVM intrinsics the compiled kernels call (:mod:`dls._kernels`, :mod:`dls._idkernels`).

Imported only when :data:`dls._jit.ENABLED`: these are numba ``intrinsic`` functions, usable
inside ``njit`` code only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

__all__ = ["bswap", "ctz", "popcount", "prefetch"]


def _unary(emit: Callable[[Any, Any], Any]) -> Any:
    """A numba intrinsic of one integer argument whose LLVM code is ``emit(builder, x)``."""
    def typer(typingctx: Any, src: Any) -> Any:
        if not isinstance(src, types.Integer):
            return None

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return emit(builder, args[0])

        return src(src), codegen

    return intrinsic(typer)


popcount: Any = _unary(lambda b, x: b.ctpop(x))
"""Set bits of an integer (LLVM ctpop)."""
ctz: Any = _unary(lambda b, x: b.cttz(x, ir.Constant(ir.IntType(1), 0)))
"""Trailing zero bits of a non-zero integer (LLVM cttz)."""
bswap: Any = _unary(lambda b, x: b.bswap(x))
"""An integer with its bytes in reverse order (LLVM bswap)."""


def _prefetch_typer(typingctx: Any, arr: Any, idx: Any) -> Any:
    if not isinstance(arr, types.Array) or arr.ndim != 1 or not isinstance(idx, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]],
                                       wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        # a read (0), kept in every cache level (3), of data (1)
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(arr, idx), codegen


prefetch: Any = intrinsic(_prefetch_typer)
"""Ask the CPU to load the line of ``arr[i]`` (1-D array) into cache; no fault, no result.

A loop whose loads depend on each other (an index read, then the element it names) waits
for each miss in turn; prefetching a few iterations ahead lets those misses overlap.
"""
