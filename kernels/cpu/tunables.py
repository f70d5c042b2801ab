"""Decisions the compiled kernels read at run time: one process-wide table of int64 values.

A rule compiled into a kernel (which path a product of a given shape takes) cannot follow a
calibration made after the kernel was cached; a value read from this table at the decision
can. The table is a numpy array whose address is registered with LLVM under
``jitort_tunables`` when this module is imported (as ``blas`` registers the gemm symbols),
so cached kernels link to it by name. Every entry starts at ``DEFAULT`` (-1): the kernel
applies its built-in rule; jitort's calibration (``jitort.tuning``) writes decisions into
slots with :func:`set_values` before a model runs. Imports nothing from jitort.

Slots:

* ``GEMM_OWN`` .. ``GEMM_OWN + 80``: per-call float32 products (``gemm._mm_task``): 1 runs
  jitort's gemm packing B per call (``ogemm``), 0 the BLAS, by bucket
  ``gemm_bucket(rows, k, n)``.
"""
import llvmlite.binding as llb
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

SIZE = 256
DEFAULT = -1
GEMM_OWN = 0
GEMM_ROW_CLASSES = 5      # rows 1, 2-7, 8-31, 32-127, 128+
GEMM_DIM_CLASSES = 4      # K / N up to 128, 512, 2048, more
GEMM_OWN_SLOTS = GEMM_ROW_CLASSES * GEMM_DIM_CLASSES * GEMM_DIM_CLASSES

_SYMBOL = "jitort_tunables"
_VALUES = np.full(SIZE, DEFAULT, np.int64)
llb.add_symbol(_SYMBOL, _VALUES.ctypes.data)


def set_values(start: int, values) -> None:
    """Write ``values`` into slots ``start``.. (``DEFAULT`` restores a kernel's own rule)."""
    v = np.asarray(values, np.int64).ravel()
    if start < 0 or start + v.size > SIZE:
        raise IndexError(f"tunable slots {start}..{start + v.size} outside 0..{SIZE}")
    _VALUES[start:start + v.size] = v


def values(start: int, count: int) -> np.ndarray:
    return _VALUES[start:start + count].copy()


def reset() -> None:
    _VALUES[:] = DEFAULT


@intrinsic
def read(typingctx, slot):
    """The int64 in slot ``slot`` of the table (no bounds check: slots are constants)."""
    if not isinstance(slot, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        arr = ir.ArrayType(i64, SIZE)
        mod = builder.module
        g = mod.globals.get(_SYMBOL)
        if g is None:
            g = ir.GlobalVariable(mod, arr, _SYMBOL)
            g.linkage = "external"
        idx = context.cast(builder, args[0], sig.args[0], types.int64)
        p = builder.gep(g, [ir.Constant(i64, 0), idx])
        return builder.load_atomic(p, "monotonic", 8)
    return types.int64(slot), codegen


@njit(inline='always')
def row_class(rows):
    """Index of a product's row count among the classes 1, 2-7, 8-31, 32-127, 128+."""
    return 0 if rows <= 1 else 1 if rows < 8 else 2 if rows < 32 else 3 if rows < 128 else 4


@njit(inline='always')
def dim_class(d):
    """Index of a product's K or N among the classes up to 128, 512, 2048, more."""
    return 0 if d <= 128 else 1 if d <= 512 else 2 if d <= 2048 else 3


@njit(inline='always')
def gemm_bucket(rows, k, n):
    """Slot offset (from GEMM_OWN) of a product's bucket (the classes above, which
    ``jitort.tuning_choices`` uses too)."""
    return (row_class(rows) * GEMM_DIM_CLASSES + dim_class(k)) * GEMM_DIM_CLASSES + dim_class(n)


def gemm_bucket_py(rows: int, k: int, n: int) -> int:
    """``gemm_bucket`` in Python, through its helpers' Python functions too (calling the jitted
    helpers from Python would load or compile them in every process that asks)."""
    rc, dc = row_class.py_func, dim_class.py_func
    return (rc(rows) * GEMM_DIM_CLASSES + dc(k)) * GEMM_DIM_CLASSES + dc(n)
