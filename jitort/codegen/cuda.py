"""The CUDA backend: lowers a segment into a generated host driver that launches CUDA kernels.

It mirrors the CPU backend (:mod:`jitort.codegen.cpu`) and reuses its pieces: the shape pass
and unit-dim probing of :class:`~jitort.codegen.cpu.SegmentCompiler`, elementwise fusion
(:func:`~jitort.codegen.cpu.group_nodes`, :func:`~jitort.codegen.elementwise.collapse`) and the
loop-nest emitter (:func:`~jitort.codegen.elementwise.kernel_source`) rendered in the CUDA
style: the same op table with device math, one thread per element instead of a loop nest, and
``@cuda.jit`` instead of ``@njit``. Everything else calls ``jitort.kernels.cuda``.

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

import threading
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..ir import Node, Value
from ..planner import Buffer, MemoryPlan, plan_memory
from . import module as modmgr
from .calls import Call, DeviceArray, DeviceView, Dim, Generated, KernelModule, Launch
from .cpu import SegmentCompiler
from .cuda_render import check_device_arg, driver_source
from .emitter import recorded_read
from .fusion import Group, collapse_group, fused_steps, group_operands
from .registry import Backend, Unlowerable, lower_step, registry
from .elementwise import (EXPR, LoopStyle, NoMath, Operand, kernel_source,
                          supports_elementwise)
from .lowprec import is_lowp
from .lowerings import (ACT_CODES, REDUCE_KIND, _axes_from_input, _axis, _conv_geometry,
                        _conv_pads, _prod, act_args, slice_start_step)
from .lowerings.common import axis_dims, gather_dims, int_indices, softmax_dims

#: Threads per block of generated elementwise kernels.
EW_BLOCK = 128

#: Handles on the CUDA kernel library: ``_gemm.gemm`` is ``jitort.kernels.cuda.gemm.gemm``.
_data, _gemm, _conv, _pool, _softmax, _norm, _reduce = (
    KernelModule(m, package="cuda") for m in ("data", "gemm", "conv", "pool", "softmax", "norm",
                                              "reduce"))

# --- the elementwise table: the CPU's expressions with device math ---------------------------

#: The templates' math functions (:data:`~jitort.codegen.elementwise.CPU_MATH`) as a CUDA
#: kernel calls them; the others (np.fmod, np.trunc, ...) have no device version here.
CUDA_MATH = {**{f: f"math.{f}" for f in ("exp", "log", "log1p", "sqrt", "tanh", "erf", "sin",
                                         "cos", "tan", "sinh", "cosh")},
             **{f"arc{f}": f"math.a{f}" for f in ("sin", "cos", "tan", "sinh", "cosh", "tanh")},
             "exp32": "math.exp", "tanh32": "math.tanh", "erf32": "math.erf",
             "sigmoid32": "_cm.sigmoid"}
#: Ops whose CPU expression has no device equivalent here (math.floor returns an int in Numba).
_NO_DEVICE = {"Round", "Sign", "Floor", "Ceil"}


def _on_device(fn):
    """``fn`` rendered for a device: a math function without a device version makes the node
    fall back."""
    def render(n, a, d, o):
        try:
            return fn(n, a, d, o)
        except NoMath as e:
            raise Unlowerable(n, f"no device version of {e.args[0]}") from None
    return render


CUDA_EXPR = {op: _on_device(fn) for op, fn in EXPR.items() if op not in _NO_DEVICE}


class CudaStyle(LoopStyle):
    """One thread per output element: the flat thread index is split into the collapsed dims."""

    table = CUDA_EXPR
    math = CUDA_MATH
    widen = None

    def head(self, name, outs, ins, rank, parallel):
        params = [f"{x}, o{x}" for x in outs + ins] + [f"n{k}" for k in range(rank)] + ["total"]
        lines = ["@cuda.jit", f"def {name}({', '.join(params)}):",
                 "    i = cuda.grid(1)", "    if i >= total:", "        return", "    r = i"]
        for k in range(rank - 1, 0, -1):
            lines += [f"    i{k} = r % n{k}", f"    r //= n{k}"]
        lines.append("    i0 = r")
        return lines

    def open_level(self, k, parallel):
        return None  # no loops: every index is known after the prologue

    def load(self, x, op: Operand, rank):
        flat = None
        for k in range(rank):
            if not op.bcast[k]:
                flat = f"i{k}" if flat is None else f"({flat}) * n{k} + i{k}"
        return f"{x}[o{x}]" if flat is None else f"{x}[o{x} + {flat}]"

    def store(self, y, rank):
        return f"{y}[o{y} + i]"


CUDA_STYLE = CudaStyle()


def supports_device_elementwise(n: Node) -> bool:
    # (the low-precision conversions, kernels/cpu/lowprec.py, have no device version: the
    # CPU backend takes those nodes)
    return (n.op_type in CUDA_EXPR and supports_elementwise(n)
            and not any(v is not None and is_lowp(v.dtype) for v in list(n.inputs) + n.outputs))


# --- registry and backend --------------------------------------------------------------------

Lowering = Callable[["CudaEmitter", Node], None]
LOWER: dict[tuple[str, str], Lowering] = {}
SUPPORT: dict[tuple[str, str], Callable[[Node], bool]] = {}


lowering = registry(LOWER, SUPPORT)  # CUDA lowerings register here, not in the CPU's table


class CudaBackend(Backend):
    """Claims the nodes the CUDA code generator can lower (float32/float64 compute ops,
    data movement of plain dtypes, the elementwise table minus ops without device math)."""

    name = "cuda"
    support = SUPPORT

    def elementwise(self, node: Node) -> bool:
        return supports_device_elementwise(node)


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


# --- elementwise groups ----------------------------------------------------------------------

def lower_group(em: CudaEmitter, grp: Group, consumers_outside) -> None:
    """One fused elementwise kernel for ``grp`` (the same analysis as the CPU backend's)."""
    operands, ops, temp_dtypes, outs = group_operands(grp, consumers_outside)
    extents, flags, opnds = collapse_group(em, grp, operands)
    prefix = "kc_" + "_".join(dict.fromkeys(n.op_type.lower() for n in grp.nodes[:4]))
    src = kernel_source("__KNAME__", ops, opnds, outs, len(extents), False, temp_dtypes,
                        style=CUDA_STYLE)
    kernel = em.generated(prefix, src)
    total = _prod(extents)
    args = [em.write(grp.nodes[i].outputs[0]) for i in outs]
    args += [em.read(v) for v in operands]
    args += [*em.sizes(extents), em.size(total)]
    if total:
        em.call(Launch(kernel, em.size(max(1, -(-total // EW_BLOCK))), EW_BLOCK), *args)


# --- lowerings -------------------------------------------------------------------------------

_F = (np.dtype(np.float32), np.dtype(np.float64))
_PLAIN = tuple(np.dtype(t) for t in (np.float32, np.float64, np.int8, np.int16, np.int32,
                                     np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_))


def _is_float(*vals) -> bool:
    return all(v is not None and v.dtype is not None and np.dtype(v.dtype) in _F for v in vals)


def _same_float(n: Node) -> bool:
    """Every present input and the first output share one float dtype."""
    vals = [v for v in n.inputs if v is not None] + n.outputs[:1]
    return _is_float(*vals) and len({np.dtype(v.dtype) for v in vals}) == 1


def _plain(n: Node) -> bool:
    return all(v.dtype is not None and np.dtype(v.dtype) in _PLAIN
               for v in list(n.all_inputs()) + list(n.outputs) if v is not None)


def _strides(shape) -> list[int]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return out[::-1]


@lowering("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", supports=_plain)
def lower_view(em: CudaEmitter, n: Node) -> None:
    em.alias(n.outputs[0], n.inputs[0])


def _mm_geometry(em: CudaEmitter, n: Node):
    """(nb, m, n, k, a batch stride, b batch stride) of a MatMul, or Unlowerable."""
    sa, sb = em.shape(n.inputs[0]), em.shape(n.inputs[1])
    if not sa or not sb:
        raise Unlowerable(n, "MatMul of a scalar")
    sa2 = (1,) + tuple(sa) if len(sa) == 1 else tuple(sa)
    sb2 = tuple(sb) + (1,) if len(sb) == 1 else tuple(sb)
    m, k, nn = sa2[-2], sa2[-1], sb2[-1]
    ba, bb = sa2[:-2], sb2[:-2]
    if _prod(bb) == 1:  # weights-like B: one GEMM over all rows of A
        return 1, _prod(ba) * m, nn, k, 0, 0
    rank = max(len(ba), len(bb))
    ba, bb = (1,) * (rank - len(ba)) + ba, (1,) * (rank - len(bb)) + bb
    if ba == bb:
        return _prod(ba), m, nn, k, m * k, k * nn
    if _prod(ba) == 1:
        return _prod(bb), m, nn, k, 0, k * nn
    raise Unlowerable(n, f"MatMul batch broadcast {sa} x {sb}")


def _mm_ok(n: Node) -> bool:
    return _is_float(n.inputs[0], n.inputs[1], n.outputs[0]) and \
        len({np.dtype(v.dtype) for v in (n.inputs[0], n.inputs[1], n.outputs[0])}) == 1


@lowering("MatMul", supports=_mm_ok)
def lower_matmul(em: CudaEmitter, n: Node) -> None:
    nb, m, nn, k, sab, sbb = _mm_geometry(em, n)
    a, b = em.read(n.inputs[0]), em.read(n.inputs[1])
    y = em.write(n.outputs[0])
    em.call(_gemm.matmul3d, a, em.size(sab), b, em.size(sbb), y, *em.sizes((nb, m, nn, k)))


@lowering("MatMulBias", domain="jitort", supports=lambda n: _mm_ok(n) and _is_float(n.inputs[2])
          and n.attrs.get("activation", "") in ACT_CODES)
def lower_matmul_bias(em: CudaEmitter, n: Node) -> None:
    nb, m, nn, k, sab, sbb = _mm_geometry(em, n)
    if _prod(em.shape(n.inputs[2])) != nn:
        raise Unlowerable(n, "MatMulBias bias is not one row")
    a, b, bias = em.read(n.inputs[0]), em.read(n.inputs[1]), em.read(n.inputs[2])
    y = em.write(n.outputs[0])
    act, alpha, beta = act_args(n)
    em.call(_gemm.matmul3d_bias_act, a, em.size(sab), b, em.size(sbb), bias, y,
            *em.sizes((nb, m, nn, k)), act, float(alpha), float(beta))


@lowering("Gemm", supports=_same_float)
def lower_gemm(em: CudaEmitter, n: Node) -> None:
    a, b, c, y = n.inputs[0], n.inputs[1], n.input(2), n.outputs[0]
    m, nn = em.shape(y)
    ta, tb = bool(n.attrs.get("transA", 0)), bool(n.attrs.get("transB", 0))
    k = em.shape(a)[0] if ta else em.shape(a)[1]
    if c is not None:
        sc = em.shape(c)
        rows, cols = {0: (1, 1), 1: (1, sc[0] if sc else 1)}.get(len(sc), tuple(sc))
        cv, csi, csj = em.read(c), (cols if rows > 1 else 0), (1 if cols > 1 else 0)
    else:
        cv, csi, csj = em.read(a), 0, 0  # not read
    av, bv = em.read(a), em.read(b)
    yv = em.write(y)
    em.call(_gemm.gemm, av, bv, cv, em.size(csi), em.size(csj), yv, *em.sizes((m, nn, k)),
            float(n.attrs.get("alpha", 1.0)), float(n.attrs.get("beta", 1.0)), ta, tb,
            c is not None)


@lowering("Transpose", supports=_plain)
def lower_transpose(em: CudaEmitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    perm = list(n.attrs.get("perm", list(range(len(shape)))[::-1]))
    runs: list[list[int]] = []  # input axes that stay adjacent and in order merge
    for p in perm:
        if runs and runs[-1][-1] + 1 == p:
            runs[-1].append(p)
        else:
            runs.append([p])
    if len(runs) > 6:
        raise Unlowerable(n, "Transpose of more than 6 moving axis groups")
    xs = _strides(shape)
    out_shape = [_prod([shape[a] for a in r]) for r in runs]
    xstr = [xs[r[-1]] for r in runs]
    xv = em.read(x)
    em.call(_data.copy_nd, xv, em.sizes(xstr), em.write(y), em.sizes(_strides(out_shape)),
            em.sizes(out_shape))


@lowering("Concat", supports=_plain)
def lower_concat(em: CudaEmitter, n: Node) -> None:
    y = n.outputs[0]
    axis, (o, total, i) = axis_dims(em, n, y)
    parts = [(v, em.shape(v)[axis]) for v in n.inputs if v is not None]
    srcs = [em.read(v) for v, _ in parts]
    yv = em.write(y)
    start = 0
    for (v, a), s in zip(parts, srcs):
        if a:
            em.call(_data.copy_nd, s, em.sizes((a * i, i, 1)), yv.at(em.size(start * i)),
                    em.sizes((total * i, i, 1)), em.sizes((o, a, i)))
        start += a


@lowering("Split", supports=_plain)
def lower_split(em: CudaEmitter, n: Node) -> None:
    x = n.inputs[0]
    axis, (o, total, i) = axis_dims(em, n, x)
    xv = em.read(x)
    start = 0
    for v in n.outputs:
        a = em.shape(v)[axis]
        yv = em.write(v)
        if a:
            em.call(_data.copy_nd, xv.at(em.size(start * i)), em.sizes((total * i, i, 1)), yv,
                    em.sizes((a * i, i, 1)), em.sizes((o, a, i)))
        start += a


@lowering("Slice", supports=lambda n: _plain(n) and n.since_version >= 10)
def lower_slice(em: CudaEmitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    rank = len(shape)
    if rank == 0 or rank > 6:
        raise Unlowerable(n, f"Slice of rank {rank}")
    start, step = slice_start_step(em, n, shape)  # the ends are in the inferred output shape
    xs = _strides(shape)
    out_shape = em.shape(y)
    xv = em.read(x)
    base = sum(st * s for st, s in zip(start, xs)) if _prod(out_shape) else 0
    em.call(_data.copy_nd, xv.at(em.size(base)), em.sizes([a * b for a, b in zip(xs, step)]),
            em.write(y), em.sizes(_strides(out_shape)), em.sizes(out_shape))


@lowering("Gather", supports=lambda n: _plain(n) and int_indices(n))
def lower_gather(em: CudaEmitter, n: Node) -> None:
    data, idx, y = n.inputs[0], n.inputs[1], n.outputs[0]
    o, a, k, i = gather_dims(em, n)
    dv, iv = em.read(data), em.read(idx)
    em.call(_data.gather3, dv, iv, em.write(y), *em.sizes((o, a, k, i)), em.error_flag())


@lowering("Softmax", "LogSoftmax", supports=_same_float)
def lower_softmax(em: CudaEmitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    if not shape:
        raise Unlowerable(n, "Softmax of a scalar")
    dims = softmax_dims(n, shape)
    kernel = _softmax.softmax3d if n.op_type == "Softmax" else _softmax.logsoftmax3d
    xv = em.read(x)
    em.call(kernel, xv, em.write(y), *em.sizes(dims))


@lowering("LayerNormalization", supports=lambda n: _same_float(n) and len(n.outputs) == 1)
def lower_layernorm(em: CudaEmitter, n: Node) -> None:
    x, scale, bias, y = n.inputs[0], n.inputs[1], n.input(2), n.outputs[0]
    shape = em.shape(x)
    axis = _axis(n.attrs.get("axis", -1), len(shape))
    outer, inner = _prod(shape[:axis]), _prod(shape[axis:])
    if _prod(em.shape(scale)) != inner or (bias is not None and _prod(em.shape(bias)) != inner):
        raise Unlowerable(n, "LayerNormalization scale/bias broadcast")
    xv, sv = em.read(x), em.read(scale)
    bv = em.read(bias) if bias is not None else sv
    em.call(_norm.layernorm2d, xv, sv, bv, em.write(y), em.size(outer), em.size(inner),
            float(n.attrs.get("epsilon", 1e-5)), bias is not None)


@lowering("BatchNormalization", supports=lambda n: _same_float(n) and len(n.outputs) == 1
          and not n.attrs.get("training_mode", 0))
def lower_batchnorm(em: CudaEmitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    if len(shape) < 2:
        raise Unlowerable(n, "BatchNormalization of rank < 2")
    params = [em.read(v) for v in [x] + n.inputs[1:5]]
    em.call(_norm.batchnorm3d, *params, em.write(y),
            *em.sizes((shape[0], shape[1], _prod(shape[2:]))), float(n.attrs.get("epsilon", 1e-5)))


@lowering(*REDUCE_KIND, supports=lambda n: _is_float(n.inputs[0], n.outputs[0])
          and n.inputs[0].dtype == n.outputs[0].dtype)
def lower_reduce(em: CudaEmitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    rank = len(shape)
    if _axes_from_input(n):
        av = n.input(1)
        val = None if av is None else (av.const if av.is_const else em.hostvals.get(id(av)))
        if av is not None and val is None:
            raise Unlowerable(n, "reduction axes not known ahead")
        axes = [] if val is None else val.astype(np.int64).reshape(-1).tolist()
    else:
        axes = list(n.attrs.get("axes", []))
    if not axes:
        if n.attrs.get("noop_with_empty_axes", 0):
            raise Unlowerable(n, "no-op reduction")
        axes = list(range(rank))
    axes = sorted({_axis(a, rank) for a in axes})
    if not axes or axes != list(range(axes[0], axes[-1] + 1)):
        raise Unlowerable(n, f"non-contiguous reduction axes {axes}")
    o, r, i = _prod(shape[:axes[0]]), _prod(shape[axes[0]:axes[-1] + 1]), _prod(shape[axes[-1] + 1:])
    if r == 0:
        raise Unlowerable(n, "reduction over an empty axis")
    xv = em.read(x)
    em.call(_reduce.reduce3d, xv, em.write(y), *em.sizes((o, r, i)), REDUCE_KIND[n.op_type])


def _lower_conv(em: CudaEmitter, n: Node, residual=None, act=(0, 0.0, 0.0)) -> None:
    """One launch of the direct conv kernel for a Conv or FusedConv (bias, optional residual of
    the output's shape and activation applied by each thread to its output element)."""
    x, w, b, y = n.inputs[0], n.inputs[1], n.input(2), n.outputs[0]
    xs, ws, ys, strides, dil, pads, group = _conv_geometry(em, n)
    xv, wv = em.read(x), em.read(w)
    bv = em.read(b) if b is not None else wv
    geo = (xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], ys[2], ys[3], strides[0], strides[1],
           pads[0], pads[1], dil[0], dil[1], group)
    dims = em.sizes(geo)
    if n.op_type == "Conv":
        em.call(_conv.conv2d, xv, wv, bv, em.write(y), *dims, b is not None)
        return
    rv = em.read(residual) if residual is not None else None
    yv = em.write(y)  # a fresh row, live with the residual's at this step: never the same memory
    code, alpha, beta = act
    epi = (code, float(alpha), float(beta))
    if residual is None:
        em.call(_conv.conv2d_bias_act, xv, wv, bv, yv, *dims, b is not None, *epi)
    else:
        em.call(_conv.conv2d_bias_add_act, xv, wv, bv, rv, yv, *dims, b is not None, True, *epi)


@lowering("Conv", supports=_same_float)
def lower_conv(em: CudaEmitter, n: Node) -> None:
    _lower_conv(em, n)


@lowering("FusedConv", domain="jitort", supports=lambda n: _same_float(n)
          and n.attrs.get("activation", "") in ACT_CODES)
def lower_fused_conv(em: CudaEmitter, n: Node) -> None:
    """jitort.FusedConv: ``act(conv(x, W) + B [+ residual])`` in the conv kernel's store (the
    shape pass has checked that the residual has the output's shape)."""
    _lower_conv(em, n, n.input(3), act_args(n))


def _pool_ok(n: Node) -> bool:
    return _is_float(n.inputs[0], n.outputs[0]) and len([o for o in n.outputs if o is not None]) == 1


def _pool_geometry(em: CudaEmitter, n: Node):
    xs, ys = em.shape(n.inputs[0]), em.shape(n.outputs[0])
    if len(xs) != 4:
        raise Unlowerable(n, f"{len(xs) - 2}-D pooling")
    k = list(n.attrs["kernel_shape"])
    s = list(n.attrs.get("strides", [1, 1]))
    dil = list(n.attrs.get("dilations", [1, 1]))
    pads = _conv_pads(n, xs[2:], k, s, dil, ys[2:])
    if n.attrs.get("auto_pad", "NOTSET") in ("NOTSET", ""):
        ends = list(n.attrs.get("pads", [0, 0, 0, 0]))[2:4]
    else:
        ends = [max(0, (ys[2 + a] - 1) * s[a] + (k[a] - 1) * dil[a] + 1 - xs[2 + a]) - pads[a]
                for a in range(2)]
    return (xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3], k[0], k[1], s[0], s[1], pads[0], pads[1]), \
        dil, ends


@lowering("MaxPool", supports=lambda n: _pool_ok(n) and n.attrs.get("storage_order", 0) == 0)
def lower_maxpool(em: CudaEmitter, n: Node) -> None:
    geo, dil, _ = _pool_geometry(em, n)
    xv = em.read(n.inputs[0])
    em.call(_pool.maxpool2d, xv, em.write(n.outputs[0]), *em.sizes(geo + tuple(dil)))


@lowering("AveragePool", supports=lambda n: _pool_ok(n)
          and list(n.attrs.get("dilations", [1, 1])) == [1, 1])
def lower_avgpool(em: CudaEmitter, n: Node) -> None:
    geo, _, ends = _pool_geometry(em, n)
    xv = em.read(n.inputs[0])
    em.call(_pool.avgpool2d, xv, em.write(n.outputs[0]), *em.sizes(geo),
            bool(n.attrs.get("count_include_pad", 0)), em.size(ends[0]), em.size(ends[1]))


@lowering("GlobalAveragePool", "GlobalMaxPool", supports=lambda n: _is_float(n.inputs[0], n.outputs[0]))
def lower_global_pool(em: CudaEmitter, n: Node) -> None:
    xs = em.shape(n.inputs[0])
    if len(xs) < 3 or _prod(xs[2:]) == 0:
        raise Unlowerable(n, "global pooling needs N, C and non-empty spatial dims")
    kernel = _pool.global_avgpool if n.op_type == "GlobalAveragePool" else _pool.global_maxpool
    xv = em.read(n.inputs[0])
    em.call(kernel, xv, em.write(n.outputs[0]), em.size(xs[0] * xs[1]), em.size(_prod(xs[2:])))


# --- segment compilation ---------------------------------------------------------------------

@dataclass
class CudaPlan:
    """Everything a call of one CUDA segment needs for one input-shape signature."""

    driver: Callable
    d: tuple
    o: tuple
    ws_bytes: int
    memory: MemoryPlan
    out_shapes: list[tuple]
    exports: dict[int, np.ndarray]
    consts: list[np.ndarray]  # host copies; the runtime keeps the device copies
    uses_err: bool
    kernel_names: list[str]
    source_path: str
    calls: list[Call]  # the driver's kernel calls, in order
    device_consts: list | None = None
    #: per calling thread, the plan bound to that thread's arrays (a ``jitort.cuda_replay.Bound``)
    local: threading.local = field(default_factory=threading.local, repr=False, compare=False)


_PRELUDE = """import math
import numpy as np
from numba import cuda
from jitort.kernels.cuda import mathfn as _cm


"""


class CudaSegmentCompiler(SegmentCompiler):
    """Plans one CUDA segment per signature (shape pass and unit-dim probe from the CPU's)."""

    def plan(self, env: dict) -> CudaPlan:
        seg = self.seg
        shapes, hostvals, compiled = self._shape_pass(
            {id(v): tuple(env[id(v)].shape) for v in seg.inputs},
            {id(v): env[id(v)] for v in seg.value_inputs})
        self.memo["unit_dims"] = self._probe_unit_dims(env, shapes)
        em = CudaEmitter(seg, shapes, hostvals, self.memo)
        for item, outside in fused_steps(compiled, shapes, supports_device_elementwise,
                                         self.memo.get("unit_dims"), seg.outputs):
            lower_step(em, item, outside, lower_group, LOWER, "no CUDA lowering")
            em.step += 1
        for v in seg.arg_outputs:
            if id(v) not in em.views:
                raise Unlowerable(seg.nodes[-1], f"segment output {v.name} not produced")
        exports = {id(v): hostvals[id(v)] for v in seg.outputs if id(v) in hostvals}
        return self._finish(em, shapes, exports)

    def _finish(self, em: CudaEmitter, shapes, exports) -> CudaPlan:
        calls = [c for _, c in em.calls]
        if em.uses_err:  # the flag is cleared by the driver, on its stream, not by the caller
            calls.insert(0, Call(_data.clear_flag, (ERR,)))
        src = driver_source(calls, em.dtypes)
        names = sorted(em.kernels)
        for name in names:
            modmgr.load(name, modmgr.header() + _PRELUDE + em.kernels[name])
        mod = modmgr.load(modmgr.module_name("cudadriver", src), src)
        bufs = [Buffer(i, r.nbytes, r.begin, max(r.begin, r.end)) for i, r in enumerate(em.rows)]
        mem = plan_memory(bufs)
        o = tuple(b.offset // em.rows[b.key].dtype.itemsize for b in bufs)  # 64-byte aligned
        return CudaPlan(mod.call, tuple(em.dims), o, mem.workspace_bytes, mem,
                        [shapes[id(v)] for v in self.seg.arg_outputs], exports, em.consts,
                        em.uses_err, names, mod.__file__, calls)
