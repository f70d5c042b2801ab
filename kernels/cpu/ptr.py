"""CPU kernels' raw element pointer (``eptr``), in a module of its own so that kernels that
need nothing else from ``gemm`` (``scan``) do not share its cache closure. Imports nothing from
jitort.
"""
from numba import types
from numba.extending import intrinsic
from numba.np.arrayobj import make_array


@intrinsic
def eptr(typingctx, arr, off):
    """Raw pointer (``CPointer(dtype)``) to element ``off`` of ``arr``'s data (any layout;
    ``off`` counts elements from the first one). Indexing it has no bounds or wraparound
    checks and creates no array views (whose NRT reference counting costs ~10 ns each), so
    short inner copy loops vectorize; the caller guarantees the range is valid."""
    if not isinstance(arr, types.Array) or not isinstance(off, types.Integer):
        return None
    sig = types.CPointer(arr.dtype)(arr, off)

    def codegen(context, builder, sig, args):
        data = make_array(sig.args[0])(context, builder, args[0]).data
        return builder.gep(data, [context.cast(builder, args[1], sig.args[1], types.intp)])
    return sig, codegen
