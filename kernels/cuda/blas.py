"""Matrix products through cuBLAS, called directly by device address (CuPy's thin binding).

jitort's tensors are flat device arrays with element offsets, and a product's operands are
addressed through strides (a transposed operand, a batch stride of 0 for a matrix shared by
every batch). :func:`strided` turns such a row-major product into the arguments of one
strided-batched cuBLAS GEMM (column-major: ``Y^T = B^T A^T``, transposes and leading dimensions
from the strides), or None where an operand has no unit stride; :func:`gemm_strided` enqueues
it on the caller's stream. Nothing is allocated and nothing copied: the call names device
addresses fixed when a plan's work is recorded (``launch.call``), so a replay, or the CUDA
graph captured from it, holds only cuBLAS's kernels, and a batch-broadcast weight (a
convolution's, over its images) is read in place.

The binding is CuPy's (``cupy_backends.cuda.libs.cublas``); each thread has a cuBLAS handle of
its own, set to the caller's stream before each call. float16 products (the CUDA pipeline keeps
them float16) go through ``cublasGemm[StridedBatched]Ex`` with float32 accumulation, on tensor
cores. Float32 stays exact float32: the handle's math mode is cuBLAS's default, which never
rounds float32 inputs to TF32;
``JITORT_CUDA_TF32=1`` allows TF32 tensor cores (onnxruntime's ``use_tf32``).
``JITORT_CUDA_BLAS=own`` keeps jitort's own GEMM kernel (kernels/cuda/gemm.py); under Numba's
CUDA simulator, or without CuPy, that kernel is the only one.
"""
import contextlib
import os
import threading

import numpy as np

# cublas_api.h: cublasOperation_t and cublasMath_t
OP_N, OP_T = 0, 1
DEFAULT_MATH, TF32_TENSOR_OP_MATH = 0, 3

_UNSET = object()
_lib = _UNSET
_cupy = None  # the cupy module, once library() found it usable
_streams: dict = {}  # stream handle -> CuPy's ExternalStream of it
_local = threading.local()
_ROUTINES = {np.dtype(np.float32): ("sgemm", "sgemmStridedBatched"),
             np.dtype(np.float64): ("dgemm", "dgemmStridedBatched"),
             # float16 operands and result, float32 accumulation and scalars (tensor cores)
             np.dtype(np.float16): ("gemmEx", "gemmStridedBatchedEx")}
DTYPES = frozenset(_ROUTINES)  # the dtypes whose products cuBLAS takes here
# library_types.h / cublas_api.h: cudaDataType CUDA_R_16F, cublasComputeType_t
# CUBLAS_COMPUTE_32F, cublasGemmAlgo_t CUBLAS_GEMM_DEFAULT
R_16F, COMPUTE_32F, GEMM_DEFAULT = 2, 68, -1
# host scalars the Ex routines read alpha and beta through (host pointer mode: read when the
# call is enqueued, so a captured graph holds the values)
_ONE_ZERO = np.array([1.0, 0.0], np.float32)


def library():
    """CuPy's cuBLAS binding if cuBLAS can serve here, else None (decided once)."""
    global _lib
    if _lib is _UNSET:
        _lib = _load()
    return _lib


def _load():
    if os.environ.get("JITORT_CUDA_BLAS", "cublas").strip().lower() == "own":
        return None
    from numba.core import config
    if config.ENABLE_CUDASIM:
        return None
    global _cupy
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
        cublas = getattr(cupy.cuda, "cublas", None)  # the binding, as CuPy exposes it
        if cublas is None:
            from cupy_backends.cuda.libs import cublas
    except Exception:  # not installed, or no driver / device it can use
        return None
    _cupy = cupy
    return cublas


def tf32() -> bool:
    """Whether float32 products may use TF32 tensor cores (``JITORT_CUDA_TF32``)."""
    return os.environ.get("JITORT_CUDA_TF32", "0").strip().lower() in ("1", "true", "yes", "on")


def address(arr, offset: int) -> int:
    """The device address of element ``offset`` of a flat device array."""
    return arr.__cuda_array_interface__["data"][0] + offset * arr.dtype.itemsize


def _operand(s_outer: int, s_inner: int, outer: int, inner: int):
    """How cuBLAS reads an (outer x inner) row-major-indexed operand whose element (i, p)
    lies at ``i * s_outer + p * s_inner``: ``(OP_N, ld)`` when the inner index is contiguous
    (column-major, it is the (inner x outer) matrix of leading dimension ``s_outer``),
    ``(OP_T, ld)`` when the outer one is, None otherwise. A dimension of 1 may carry any
    stride; the leading dimension then is the smallest cuBLAS accepts."""
    if inner == 1:
        s_inner = 1
    if s_inner == 1:
        ld = s_outer if outer > 1 else max(inner, 1)
        return (OP_N, ld) if ld >= max(inner, 1) else None
    if outer == 1 or s_outer == 1:
        return (OP_T, s_inner) if s_inner >= max(outer, 1) else None
    return None


def strided(a, ao, sab, asi, asp, b, bo, sbb, bsp, bsj, y, yo, nb, m, n, k, alpha=1.0,
            syb=None):
    """The arguments of :func:`gemm_strided` for ``y[z] = alpha * a[z] @ b[z]``, z < nb: a (m, k)
    with element (i, p) at ``ao + z*sab + i*asi + p*asp``, b (k, n) likewise, y[z] a row-major
    (m, n) matrix at ``yo + z*syb`` (default ``m*n``: the batches consecutive); None when
    cuBLAS cannot take it (a dtype it lacks here, mixed dtypes, an operand without a unit
    stride, a negative batch stride)."""
    dt = y.dtype
    if dt not in _ROUTINES or a.dtype != dt or b.dtype != dt or min(sab, sbb) < 0:
        return None
    ra = _operand(asi, asp, m, k)
    rb = _operand(bsp, bsj, k, n)
    if ra is None or rb is None:
        return None
    # row-major Y (m, n) is column-major Y^T (n, m) = op(B) @ op(A), leading dimension n
    return (dt.str, rb[0], ra[0], n, m, k, float(alpha), address(b, bo), rb[1], sbb,
            address(a, ao), ra[1], sab, address(y, yo), max(n, 1), m * n if syb is None else syb,
            nb)


def _handle(lib) -> int:
    """This thread's cuBLAS handle (created on first use, in the math mode the options ask)."""
    h = getattr(_local, "handle", None)
    if h is None:
        h = lib.create()
        lib.setMathMode(h, TF32_TENSOR_OP_MATH if tf32() else DEFAULT_MATH)
        _local.handle = h
    return h


def stream_handle(stream) -> int:
    """The CUDA stream of a numba stream (0, or no handle: the default stream)."""
    handle = getattr(stream, "handle", None) if stream else None
    return int(getattr(handle, "value", handle) or 0)


def gemm_strided(dtype, op1, op2, m, n, k, alpha, p1, ld1, s1, p2, ld2, s2, py, ldy, sy, count,
                 stream=0):
    """One column-major cuBLAS GEMM, ``Y[z] = alpha * op1(M1[z]) @ op2(M2[z])`` for z < count
    (batch strides in elements; 0 repeats a matrix), enqueued on ``stream`` (a numba stream,
    or 0): the arguments :func:`strided` makes."""
    lib = library()
    h = _handle(lib)
    sh = stream_handle(stream)
    lib.setStream(h, sh)
    dt = np.dtype(dtype)
    single, batched = _ROUTINES[dt]
    with _current_stream(sh):
        if dt == np.float16:
            _half(lib, h, op1, op2, m, n, k, alpha, p1, ld1, s1, p2, ld2, s2, py, ldy, sy, count)
        elif count == 1:
            getattr(lib, single)(h, op1, op2, m, n, k, alpha, p1, ld1, p2, ld2, 0.0, py, ldy)
        else:
            getattr(lib, batched)(h, op1, op2, m, n, k, alpha, p1, ld1, s1, p2, ld2, s2, 0.0, py,
                                  ldy, sy, count)


def _current_stream(handle: int):
    """CuPy's current stream made ``handle`` for a call: once any CuPy stream has been made
    current in the process, CuPy's binding sets a handle's stream to CuPy's current one before
    each routine, over :func:`gemm_strided`'s ``setStream``."""
    if _cupy is None:  # a stand-in binding (tests)
        return contextlib.nullcontext()
    if not handle:
        return _cupy.cuda.Stream.null
    got = _streams.get(handle)
    if got is None:
        got = _streams[handle] = _cupy.cuda.ExternalStream(handle)
    return got


def _half(lib, h, op1, op2, m, n, k, alpha, p1, ld1, s1, p2, ld2, s2, py, ldy, sy, count):
    """:func:`gemm_strided` on float16 matrices: ``cublasGemm[StridedBatched]Ex`` with float32
    compute (alpha and beta as host float32 scalars)."""
    scalars = _ONE_ZERO if alpha == 1 else np.array([alpha, 0.0], np.float32)
    pa, pb = scalars.ctypes.data, scalars.ctypes.data + 4
    if count == 1:
        lib.gemmEx(h, op1, op2, m, n, k, pa, p1, R_16F, ld1, p2, R_16F, ld2, pb, py, R_16F,
                   ldy, COMPUTE_32F, GEMM_DEFAULT)
    else:
        lib.gemmStridedBatchedEx(h, op1, op2, m, n, k, pa, p1, R_16F, ld1, s1, p2, R_16F, ld2,
                                 s2, pb, py, R_16F, ldy, sy, count, COMPUTE_32F, GEMM_DEFAULT)
