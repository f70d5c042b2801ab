"""Matrix products through cuBLAS, by CuPy's ``matmul``, where CuPy can run here.

jitort's tensors are flat device arrays with element offsets; :func:`view` makes a CuPy array
of one operand over the same memory (``__cuda_array_interface__``, strides in elements: no
copy), and :func:`matmul_into` enqueues ``out = a @ b`` on the caller's stream. The views are
made once, when a plan's work is recorded (``launch.call``), so a replay, or the CUDA graph
captured from it, holds only the cuBLAS kernels.

Float32 stays exact float32: CuPy computes with TF32 only when ``CUPY_TF32=1`` is set before
it is imported (onnxruntime's ``use_tf32`` analog; off by default, as jitort's CPU results).
``JITORT_CUDA_BLAS=own`` keeps jitort's own GEMM kernel (kernels/cuda/gemm.py); under Numba's
CUDA simulator, or without CuPy, that kernel is the only one.
"""
import os

_UNSET = object()
_cupy = _UNSET
_streams: dict = {}


def cupy_or_none():
    """The ``cupy`` module if cuBLAS can serve here, else None (decided once)."""
    global _cupy
    if _cupy is _UNSET:
        _cupy = _load()
    return _cupy


def _load():
    if os.environ.get("JITORT_CUDA_BLAS", "cublas").strip().lower() == "own":
        return None
    from numba.core import config
    if config.ENABLE_CUDASIM:
        return None
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception:  # not installed, or no driver / device it can use
        return None
    return cupy


def serves(nb: int, sab: int, sbb: int) -> bool:
    """Whether :func:`matmul_into` takes a product of ``nb`` batches with these batch strides
    (a batch stride of 0 broadcasts one matrix): one matrix pair, or batches on both sides
    (a broadcast batch would make CuPy copy the operand, which a captured graph cannot)."""
    return nb == 1 or (sab != 0 and sbb != 0)


def view(cp, flat, offset: int, shape, strides):
    """A CuPy array over ``flat[offset:]`` with ``shape`` and ``strides`` (in elements)."""
    base = cp.asarray(flat)[offset:]
    item = base.dtype.itemsize
    return cp.lib.stride_tricks.as_strided(base, shape=tuple(shape),
                                           strides=tuple(s * item for s in strides))


def _cupy_stream(cp, stream):
    """CuPy's view of a numba stream (0, or the simulator's stream without a handle: the
    default stream)."""
    handle = getattr(stream, "handle", None) if stream else None
    handle = int(getattr(handle, "value", handle) or 0)
    if not handle:
        return cp.cuda.Stream.null
    got = _streams.get(handle)
    if got is None:
        got = _streams[handle] = cp.cuda.ExternalStream(handle)
    return got


def matmul_into(a, b, out, stream=0):
    """``out = a @ b`` (CuPy arrays from :func:`view`) on ``stream`` (a numba stream, or 0)."""
    cp = cupy_or_none()
    with _cupy_stream(cp, stream):
        cp.matmul(a, b, out=out)
