"""Numba's thread count inside njit code (an intrinsic on the threading layer's C symbol).

A module of its own: kernels all over the library ask for it, and a kernel module's cache
folder is keyed by every module it imports (``kernels/_cache``)."""
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def num_threads(typingctx):
    """Numba's current thread count inside njit code, cacheable.

    ``numba.get_num_threads()`` in njit code goes through a ctypes pointer, which makes every
    caller uncachable ("dynamic globals"). This calls the threading layer's C symbol, which
    ``_launch_threads`` registers (kernels/cpu/__init__ launches the threads on import, so the
    symbol also resolves when the caller is loaded from the cache).
    """
    from numba.np.ufunc.parallel import _launch_threads
    _launch_threads()

    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(cgutils.intp_t, []),
                                            "get_num_threads")
        return builder.call(fn, [])
    return types.intp(), codegen
