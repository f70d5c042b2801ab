"""The CUDA backend's emitter and lowering registry, shared by the op lowerings of
:mod:`jitort.codegen.cuda_ops` and the segment compiler of :mod:`jitort.codegen.cuda`.

Addressing: a tensor is a flat typed device array plus an element offset (the per-dtype views
of the one device workspace, a weight, a segment input or output), so a Reshape is free and a
kernel takes one array per operand whatever its rank. The generated driver::

    call(W, C, X, Y, E, d, o)

``W`` maps a dtype name to the workspace viewed as that dtype, ``C`` the plan's constants on
the device (uploaded once), ``X``/``Y`` the segment's flat inputs/outputs, ``E`` an int32 error
flag (Gather's index check), ``d`` the sizes and launch grids, ``o`` each workspace buffer's
element offset. The text depends on the structure only, so new shapes reuse it and the kernels.
Lowerings emit kernel-call objects (``em.call(_gemm.gemm, ...)``, :mod:`jitort.codegen.calls`);
:mod:`jitort.codegen.cuda_render` writes the driver from them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ir import Node, Value
from . import module as modmgr
from .calls import Call, DeviceArray, DeviceView, Dim, Generated, KernelModule
from .cuda_render import check_device_arg
from .emitter import recorded_read
from .lowerings import _prod
from .registry import registry

#: Handles on the CUDA kernel library: ``_gemm.gemm`` is ``jitort.kernels.cuda.gemm.gemm``.
_data, _gemm, _conv, _pool, _softmax, _norm, _reduce = (
    KernelModule(m, package="cuda") for m in ("data", "gemm", "conv", "pool", "softmax", "norm",
                                              "reduce"))

# --- registry ----------------------------------------------------------------------------

Lowering = Callable[["CudaEmitter", Node], None]
LOWER: dict[tuple[str, str], Lowering] = {}
SUPPORT: dict[tuple[str, str], Callable[[Node], bool]] = {}


lowering = registry(LOWER, SUPPORT)  # CUDA lowerings register here, not in the CPU's table


# --- the emitter -----------------------------------------------------------------------------

@dataclass
class _Row:
    """A workspace buffer: bytes, dtype and the steps it is live."""

    nbytes: int
    dtype: np.dtype
    begin: int
    end: int


#: The driver's int32 error flag (Gather's index check), passed whole.
ERR = DeviceArray("E")


class CudaEmitter:
    """Builds one driver's kernel calls for one signature: each value is a
    :class:`~jitort.codegen.calls.DeviceView` (array and element offset), each size a
    :class:`~jitort.codegen.calls.Dim` of ``d``; :meth:`call` records a
    :class:`~jitort.codegen.calls.Call` (rendered by :mod:`jitort.codegen.cuda_render`)."""

    def __init__(self, seg, shapes, hostvals, memo):
        self.seg, self.shapes, self.hostvals, self.memo = seg, shapes, hostvals, memo
        self.calls: list[tuple[int, Call]] = []  # (step, call)
        self.dims: list[int] = []
        self.rows: list[_Row] = []
        self.views: dict[int, DeviceView] = {}  # id(value) -> its array and offset
        self.root: dict[int, int] = {}  # id(value) -> workspace row backing it
        self.consts: list[np.ndarray] = []
        self._const_index: dict[int, int] = {}
        self.kernels: dict[str, str] = {}
        self.dtypes: set[str] = set()
        self.uses_err = False
        self.step = 0
        self.in_index = {id(v): i for i, v in enumerate(seg.arg_inputs)}
        self.out_index = {id(v): i for i, v in enumerate(seg.arg_outputs)}

    def size(self, n: int) -> Dim:
        """A size (or integer parameter) in the driver: a slot of the ``d`` array."""
        self.dims.append(int(n))
        return Dim(len(self.dims) - 1)

    def sizes(self, xs) -> tuple[Dim, ...]:
        return tuple(self.size(x) for x in xs)

    def shape(self, v: Value) -> tuple[int, ...]:
        return v.const.shape if v.is_const else self.shapes[id(v)]

    def read(self, v: Value) -> DeviceView:
        """``v``'s array and offset as a kernel-call argument; records the read."""
        return recorded_read(self, v, self._first_view)

    def _first_view(self, v: Value) -> DeviceView:
        if id(v) in self.in_index:
            return DeviceView(f"X[{self.in_index[id(v)]}]")
        if v.is_const or id(v) in self.hostvals:
            host = v.const if v.is_const else self.hostvals[id(v)]
            k = self._const_index.get(id(host))
            if k is None:
                k = self._const_index[id(host)] = len(self.consts)
                self.consts.append(np.ascontiguousarray(host).reshape(-1))
            return DeviceView(f"C[{k}]")
        raise KeyError(f"value {v.name!r} read before it is produced")

    def write(self, v: Value) -> DeviceView:
        """The array and offset ``v`` is written to at this step."""
        if id(v) in self.out_index:
            got = DeviceView(f"Y[{self.out_index[id(v)]}]")
        else:
            dt = np.dtype(v.dtype)
            self.rows.append(_Row(_prod(self.shape(v)) * dt.itemsize, dt, self.step, self.step))
            r = len(self.rows) - 1
            self.root[id(v)] = r
            self.dtypes.add(dt.name)
            got = DeviceView(f"w_{dt.name}", r)
        self.views[id(v)] = got
        return got

    def temp(self, nelems: int, dtype) -> DeviceView:
        """Scratch of ``nelems`` elements in the workspace, live at this step only (a kernel's
        intermediate, not an ONNX value)."""
        dt = np.dtype(dtype)
        self.rows.append(_Row(max(1, int(nelems)) * dt.itemsize, dt, self.step, self.step))
        self.dtypes.add(dt.name)
        return DeviceView(f"w_{dt.name}", len(self.rows) - 1)

    def alias(self, dst: Value, src: Value) -> None:
        """``dst`` is ``src`` reshaped: the same array and offset (a copy if ``dst`` is an output)."""
        s = self.read(src)
        if id(dst) in self.out_index:
            n = _prod(self.shape(dst))
            self.call(_data.copy_nd, s, (1,), self.write(dst), (1,), (self.size(n),))
            return
        self.views[id(dst)] = s
        if id(src) in self.root:
            self.root[id(dst)] = self.root[id(src)]

    def error_flag(self) -> DeviceArray:
        """The driver's error flag, checked after the call."""
        self.uses_err = True
        return ERR

    def call(self, callee, *args) -> None:
        """Emit ``callee(*args)`` at this step: a CUDA library
        :class:`~jitort.codegen.calls.Kernel` or a :class:`~jitort.codegen.calls.Launch`."""
        for a in args:
            check_device_arg(a)
        self.calls.append((self.step, Call(callee, args)))

    def generated(self, prefix: str, source: str) -> Generated:
        """A kernel generated for this model (see :meth:`kernel`)."""
        return Generated(self.kernel(prefix, source))

    def kernel(self, prefix: str, source: str) -> str:
        # the header is hashed too (it names the versions the text compiles with): else a new
        # header gave the same name another text, taken for a damaged file
        name = modmgr.module_name(prefix, modmgr.header() + _PRELUDE
                                  + source.replace("__KNAME__", prefix))
        self.kernels[name] = source.replace("__KNAME__", name)
        return name


_PRELUDE = """import math
import numpy as np
from numba import cuda
from jitort.kernels.cuda import mathfn as _cm


"""

# --- predicates and helpers of the lowerings ------------------------------------------------

_F = (np.dtype(np.float32), np.dtype(np.float64))
#: dtypes the device holds as numba-cuda arrays of their own (float16 too: data movement moves
#: its elements; arithmetic on it converts to float32, in the fused elementwise kernels)
_PLAIN = tuple(np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.int16,
                                     np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
                                     np.bool_))


def _is_float(*vals) -> bool:
    return all(v is not None and v.dtype is not None and np.dtype(v.dtype) in _F for v in vals)


def _one_dtype_of(vals, dtypes) -> bool:
    """The values (None: absent, skipped) share one dtype, one of ``dtypes``."""
    dts = {np.dtype(v.dtype) if v.dtype is not None else None for v in vals if v is not None}
    return len(dts) == 1 and dts.pop() in dtypes


def _same_float(n: Node) -> bool:
    """Every present input and the first output share one float dtype."""
    return _one_dtype_of(list(n.inputs) + n.outputs[:1], _F)


#: the dtypes of matrix products and convolutions: float16 too (kept by the CUDA pipeline's
#: precision pass; cuBLAS and the kernels accumulate it in float32)
_PRODUCT_DTYPES = (np.dtype(np.float16),) + _F


def _one_product_dtype(*vals) -> bool:
    """The values (None: absent, skipped) share one dtype of ``_PRODUCT_DTYPES``."""
    return _one_dtype_of(vals, _PRODUCT_DTYPES)


def _plain(n: Node) -> bool:
    return all(v.dtype is not None and np.dtype(v.dtype) in _PLAIN
               for v in list(n.all_inputs()) + list(n.outputs) if v is not None)


def _strides(shape) -> list[int]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return out[::-1]
