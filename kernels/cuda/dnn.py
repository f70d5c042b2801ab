"""Convolutions through cuDNN, NVIDIA's library of deep-learning primitives, by device address.

onnxruntime's CUDA provider and PyTorch run convolutions through cuDNN; so does this backend
where the library is installed (PyTorch's wheels bring it: the ``nvidia-cudnn-cu12`` /
``-cu13`` packages). The binding is ctypes over cuDNN's C API -- the convolution descriptors,
``cudnnGetConvolutionForwardAlgorithm_v7``'s heuristics and ``cudnnConvolutionForward`` --
because nothing lighter exposes it: CuPy dropped its cuDNN binding in v14, and the Python
frontend of cuDNN's graph API brings a CUTLASS DSL and hundreds of megabytes with it.

A convolution's descriptors and algorithm (:class:`Conv`) are made once, when a plan's work is
recorded (``launch.call``), and kept with the recording; each replay is one
``cudnnSetStream`` + ``cudnnConvolutionForward`` on the caller's stream, reading and writing
device addresses fixed at record time, so a CUDA graph captured from the replay holds cuDNN's
kernels. The algorithm is the heuristics' first that runs here within
:data:`WORKSPACE_LIMIT` bytes of scratch and keeps float32 exact: float32 convolutions are
restricted to FMA math (no TF32 rounding) unless ``JITORT_CUDA_TF32=1``, as jitort's products
(``blas.tf32``); float16 ones run on tensor cores with float32 accumulation. Each thread has a
cuDNN handle and a workspace of its own (a plan is replayed by the thread that recorded it).

``JITORT_CUDA_DNN=off`` leaves cuDNN out; under Numba's CUDA simulator it is never used
(tests/cuda's ``cudnn`` fixture puts a stand-in with :class:`Cudnn`'s methods in ``_lib``).
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
import weakref

import numpy as np

from . import blas

# cudnn_graph.h: cudnnDataType_t, cudnnTensorFormat_t, cudnnMathType_t, cudnnConvolutionMode_t
DATA = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.float16): 2}
NCHW = 0
DEFAULT_MATH, TENSOR_OP_MATH, ALLOW_CONVERSION_MATH, FMA_MATH = 0, 1, 2, 3
CROSS_CORRELATION = 1
DTYPES = frozenset(DATA)

#: Scratch bytes an algorithm may ask for (more: the next algorithm of the heuristics' list).
WORKSPACE_LIMIT = 64 << 20
#: Bytes the operands' addresses are aligned to for cuDNN (its kernels read vectors; a
#: convolution whose operand starts elsewhere runs another way).
ALIGN = 16
#: cuDNN's 4-D descriptors count elements in 32-bit ints.
_MAX_ELEMENTS = 2 ** 31 - 1

# host scalars cudnnConvolutionForward reads alpha and beta through (when the call is
# enqueued: a captured graph holds the values): double for float64 data, float otherwise
_SCALARS = {np.dtype(np.float64): np.array([1.0, 0.0], np.float64)}
_FLOAT_SCALARS = np.array([1.0, 0.0], np.float32)


class CudnnError(RuntimeError):
    """A cuDNN call returned an error status."""


class _Perf(ctypes.Structure):
    """cudnn_cnn.h's cudnnConvolutionFwdAlgoPerf_t."""

    _fields_ = [("algo", ctypes.c_int), ("status", ctypes.c_int), ("time", ctypes.c_float),
                ("memory", ctypes.c_size_t), ("determinism", ctypes.c_int),
                ("mathType", ctypes.c_int), ("reserved", ctypes.c_int * 3)]


_P, _I, _PI = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int)
# the C functions used, with their argument types (pointers must not pass as C ints)
_SIGNATURES = {
    "cudnnCreate": [ctypes.POINTER(_P)],
    "cudnnSetStream": [_P, _P],
    "cudnnCreateTensorDescriptor": [ctypes.POINTER(_P)],
    "cudnnSetTensor4dDescriptor": [_P, _I, _I, _I, _I, _I, _I],
    "cudnnDestroyTensorDescriptor": [_P],
    "cudnnCreateFilterDescriptor": [ctypes.POINTER(_P)],
    "cudnnSetFilter4dDescriptor": [_P, _I, _I, _I, _I, _I, _I],
    "cudnnDestroyFilterDescriptor": [_P],
    "cudnnCreateConvolutionDescriptor": [ctypes.POINTER(_P)],
    "cudnnSetConvolution2dDescriptor": [_P, _I, _I, _I, _I, _I, _I, _I, _I],
    "cudnnSetConvolutionGroupCount": [_P, _I],
    "cudnnSetConvolutionMathType": [_P, _I],
    "cudnnDestroyConvolutionDescriptor": [_P],
    "cudnnGetConvolution2dForwardOutputDim": [_P, _P, _P, _PI, _PI, _PI, _PI],
    "cudnnGetConvolutionForwardAlgorithmMaxCount": [_P, _PI],
    "cudnnGetConvolutionForwardAlgorithm_v7": [_P, _P, _P, _P, _P, _I, _PI,
                                               ctypes.POINTER(_Perf)],
    "cudnnConvolutionForward": [_P, _P, _P, _P, _P, _P, _P, _I, _P, ctypes.c_size_t, _P, _P,
                                _P],
}
_DESTROY = {"tensor": "cudnnDestroyTensorDescriptor", "filter": "cudnnDestroyFilterDescriptor",
            "conv": "cudnnDestroyConvolutionDescriptor"}


class Cudnn:
    """cuDNN's C functions this module calls, as Python methods: descriptors and handles are
    ints, a non-success status raises :class:`CudnnError` with cuDNN's message."""

    def __init__(self, dll: ctypes.CDLL):
        self.dll = dll
        for name, args in _SIGNATURES.items():
            fn = getattr(dll, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        dll.cudnnGetVersion.restype = ctypes.c_size_t
        dll.cudnnGetVersion.argtypes = []
        dll.cudnnGetErrorString.restype = ctypes.c_char_p
        dll.cudnnGetErrorString.argtypes = [ctypes.c_int]

    def _check(self, status: int, what: str) -> None:
        if status:
            msg = self.dll.cudnnGetErrorString(status).decode(errors="replace")
            raise CudnnError(f"{what}: {msg} ({status})")

    def _new(self, fn: str) -> int:
        p = _P()
        self._check(getattr(self.dll, fn)(ctypes.byref(p)), fn)
        return int(p.value or 0)

    def version(self) -> int:
        return int(self.dll.cudnnGetVersion())

    def create(self) -> int:
        return self._new("cudnnCreate")

    def set_stream(self, handle: int, stream: int) -> None:
        self._check(self.dll.cudnnSetStream(handle, stream or None), "cudnnSetStream")

    def tensor4d(self, dtype: int, n: int, c: int, h: int, w: int) -> int:
        d = self._new("cudnnCreateTensorDescriptor")
        self._check(self.dll.cudnnSetTensor4dDescriptor(d, NCHW, dtype, n, c, h, w),
                    "cudnnSetTensor4dDescriptor")
        return d

    def filter4d(self, dtype: int, k: int, c: int, h: int, w: int) -> int:
        d = self._new("cudnnCreateFilterDescriptor")
        self._check(self.dll.cudnnSetFilter4dDescriptor(d, dtype, NCHW, k, c, h, w),
                    "cudnnSetFilter4dDescriptor")
        return d

    def conv2d(self, ph: int, pw: int, sh: int, sw: int, dh: int, dw: int, compute: int,
               groups: int, math: int) -> int:
        d = self._new("cudnnCreateConvolutionDescriptor")
        self._check(self.dll.cudnnSetConvolution2dDescriptor(d, ph, pw, sh, sw, dh, dw,
                                                             CROSS_CORRELATION, compute),
                    "cudnnSetConvolution2dDescriptor")
        self._check(self.dll.cudnnSetConvolutionGroupCount(d, groups),
                    "cudnnSetConvolutionGroupCount")
        self.set_math(d, math)
        return d

    def set_math(self, conv: int, math: int) -> None:
        self._check(self.dll.cudnnSetConvolutionMathType(conv, math),
                    "cudnnSetConvolutionMathType")

    def destroy(self, kind: str, desc: int) -> None:
        getattr(self.dll, _DESTROY[kind])(desc)

    def output_dim(self, conv: int, x: int, w: int) -> tuple:
        dims = [ctypes.c_int() for _ in range(4)]
        self._check(self.dll.cudnnGetConvolution2dForwardOutputDim(
            conv, x, w, *[ctypes.byref(d) for d in dims]), "cudnnGetConvolution2dForwardOutputDim")
        return tuple(d.value for d in dims)

    def algorithms(self, handle: int, x: int, w: int, conv: int, y: int) -> list:
        """The heuristics' ranked ``(algo, status, workspace bytes, math type)``."""
        count = ctypes.c_int()
        self._check(self.dll.cudnnGetConvolutionForwardAlgorithmMaxCount(
            handle, ctypes.byref(count)), "cudnnGetConvolutionForwardAlgorithmMaxCount")
        perf = (_Perf * max(1, count.value))()
        got = ctypes.c_int()
        self._check(self.dll.cudnnGetConvolutionForwardAlgorithm_v7(
            handle, x, w, conv, y, len(perf), ctypes.byref(got), perf),
            "cudnnGetConvolutionForwardAlgorithm_v7")
        return [(p.algo, p.status, int(p.memory), p.mathType) for p in perf[:got.value]]

    def forward(self, handle: int, alpha: int, x: int, px: int, w: int, pw: int, conv: int,
                algo: int, pws: int, ws_bytes: int, beta: int, y: int, py: int) -> None:
        self._check(self.dll.cudnnConvolutionForward(handle, alpha, x, px, w, pw, conv, algo,
                                                     pws or None, ws_bytes, beta, y, py),
                    "cudnnConvolutionForward")


_UNSET = object()
_lib = _UNSET
_local = threading.local()


def library():
    """The cuDNN binding if cuDNN can serve here, else None (decided once)."""
    global _lib
    if _lib is _UNSET:
        _lib = _load()
    return _lib


def _candidates() -> list[str]:
    """Where libcudnn may be: the ``nvidia-cudnn-cu*`` wheels' folder on ``sys.path``, then the
    loader's own search (and a copy some other library already loaded)."""
    out = []
    for base in sys.path:
        path = os.path.join(base or ".", "nvidia", "cudnn", "lib", "libcudnn.so.9")
        if os.path.exists(path):
            out.append(path)
    return out + ["libcudnn.so.9", "libcudnn.so"]


def _load():
    if os.environ.get("JITORT_CUDA_DNN", "on").strip().lower() in ("0", "off", "no", "false"):
        return None
    from numba.core import config
    if config.ENABLE_CUDASIM:
        return None
    for path in _candidates():
        try:
            lib = Cudnn(ctypes.CDLL(path))
            if lib.version() >= 8000:  # the v7 heuristics and group counts: cuDNN 7.x has them,
                return lib             # but jitort is tested on 8 and 9 only
        except (OSError, AttributeError, CudnnError):
            continue
    return None


def takes(dtype, n, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, group) -> bool:
    """Whether cuDNN can run this NCHW convolution as the launcher states it: a dtype it has,
    sizes its 32-bit descriptors hold, and the output size cuDNN derives from the (symmetric)
    pads equal to ``oh`` x ``ow`` (ONNX pads may differ between the sides; then the windows
    would not be the launcher's)."""
    if library() is None or np.dtype(dtype) not in DTYPES or min(n, c, h, wd, kout) < 1:
        return False
    if max(n * c * h * wd, n * kout * oh * ow, kout * (c // group) * kh * kw) > _MAX_ELEMENTS:
        return False
    return ((h + 2 * ph - dh * (kh - 1) - 1) // sh + 1 == oh
            and (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1 == ow)


def _handle(lib) -> int:
    h = getattr(_local, "handle", None)
    if h is None:
        h = _local.handle = lib.create()
    return h


def _math(dt: np.dtype) -> int:
    if dt == np.float16:
        return TENSOR_OP_MATH
    if dt == np.float32:
        return DEFAULT_MATH if blas.tf32() else FMA_MATH  # DEFAULT permits TF32 on Ampere on
    return DEFAULT_MATH


class Conv:
    """One convolution's cuDNN descriptors and algorithm (made once, when a plan's work is
    recorded): ``algo`` and ``workspace`` (bytes) are what the heuristics picked."""

    def __init__(self, lib, handle, dtype, n, c, h, wd, kout, kh, kw, ph, pw, sh, sw, dh, dw,
                 group, oh, ow):
        dt = np.dtype(dtype)
        data = DATA[dt]
        compute = DATA[np.dtype(np.float64)] if dt == np.float64 else DATA[np.dtype(np.float32)]
        self.lib, self.dtype = lib, dt
        self.descs = []
        try:
            self.x = self._keep("tensor", lib.tensor4d(data, n, c, h, wd))
            self.w = self._keep("filter", lib.filter4d(data, kout, c // group, kh, kw))
            math = _math(dt)
            self.conv = self._keep("conv", lib.conv2d(ph, pw, sh, sw, dh, dw, compute, group,
                                                      math))
            self.y = self._keep("tensor", lib.tensor4d(data, n, kout, oh, ow))
            got = lib.output_dim(self.conv, self.x, self.w)
            if got != (n, kout, oh, ow):
                raise CudnnError(f"cuDNN's output {got} is not the convolution's "
                                 f"{(n, kout, oh, ow)}")
            self.algo, self.workspace = self._pick(lib.algorithms(handle, self.x, self.w,
                                                                  self.conv, self.y), math)
        except BaseException:
            self._destroy(lib, self.descs)
            raise
        weakref.finalize(self, self._destroy, lib, self.descs)

    def _keep(self, kind: str, desc: int) -> int:
        self.descs.append((kind, desc))
        return desc

    def _pick(self, ranked: list, math: int) -> tuple[int, int]:
        """The first algorithm that runs, within the workspace limit, in an allowed math."""
        exact = self.dtype == np.float32 and math == FMA_MATH
        for algo, status, memory, algo_math in ranked:
            if status or memory > WORKSPACE_LIMIT:
                continue
            if exact and algo_math in (TENSOR_OP_MATH, ALLOW_CONVERSION_MATH):
                continue  # a tensor-core algorithm would round float32 to TF32
            if not exact and algo_math != math:
                self.lib.set_math(self.conv, algo_math)
            return algo, memory
        raise CudnnError(f"no cuDNN algorithm for this convolution within {WORKSPACE_LIMIT} "
                         f"bytes of workspace: {ranked}")

    @staticmethod
    def _destroy(lib, descs) -> None:
        for kind, desc in descs:
            lib.destroy(kind, desc)
        descs.clear()


def conv(dtype, n, c, h, wd, kout, kh, kw, ph, pw, sh, sw, dh, dw, group, oh, ow) -> Conv:
    """This thread's :class:`Conv` for a geometry (made once; raises :class:`CudnnError`
    where cuDNN has no algorithm for it)."""
    lib = library()
    key = (np.dtype(dtype).str, n, c, h, wd, kout, kh, kw, ph, pw, sh, sw, dh, dw, group, oh, ow,
           blas.tf32())
    cache = getattr(_local, "convs", None)
    if cache is None:
        cache = _local.convs = {}
    got = cache.get(key)
    if got is None:
        got = cache[key] = Conv(lib, _handle(lib), dtype, n, c, h, wd, kout, kh, kw, ph, pw, sh,
                                sw, dh, dw, group, oh, ow)
    return got


def workspace(cuda, nbytes: int):
    """A device array of at least ``nbytes`` bytes, this thread's scratch for cuDNN (grown by
    a new array: recordings keep the one they were made with alive), or None for 0."""
    if not nbytes:
        return None
    ws = getattr(_local, "workspace", None)
    if ws is None or ws.size < nbytes:
        ws = _local.workspace = cuda.device_array(nbytes, np.uint8)
    return ws


def forward(op: Conv, px: int, pw: int, py: int, ws, stream=0) -> None:
    """``y = conv(x, w)`` (device addresses) on ``stream``: the arguments of ``launch.call``."""
    lib = op.lib
    h = _handle(lib)
    lib.set_stream(h, blas.stream_handle(stream))
    scalars = _SCALARS.get(op.dtype, _FLOAT_SCALARS)
    item = scalars.itemsize
    pws = 0 if ws is None else blas.address(ws, 0)
    lib.forward(h, scalars.ctypes.data, op.x, px, op.w, pw, op.conv, op.algo, pws, op.workspace,
                scalars.ctypes.data + item, op.y, py)
