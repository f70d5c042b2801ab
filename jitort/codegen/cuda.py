"""The CUDA backend: lowers a segment into a generated host driver that launches CUDA kernels.

It mirrors the CPU backend (:mod:`jitort.codegen.cpu`) and reuses its pieces: the shape pass
and unit-dim probing of :class:`~jitort.codegen.cpu.SegmentCompiler`, elementwise fusion
(:func:`~jitort.codegen.cpu.group_nodes`, :func:`~jitort.codegen.elementwise.collapse`) and the
loop-nest emitter (:func:`~jitort.codegen.elementwise.kernel_source`) rendered in the CUDA
style: the same op table with device math, one thread per element instead of a loop nest, and
``@cuda.jit`` instead of ``@njit``. Everything else calls ``jitort.kernels.cuda``.

The emitter, the registry and the lowerings' helpers are in :mod:`jitort.codegen.cuda_emit`
(which also explains the driver's addressing); the op lowerings in
:mod:`jitort.codegen.cuda_ops`, one module per family.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..ir import Node
from ..planner import Buffer, MemoryPlan, plan_memory
from . import cuda_ops
from . import module as modmgr
from .calls import Call, Launch
from .cpu import SegmentCompiler
from .cuda_emit import _PRELUDE, ERR, LOWER, SUPPORT, CudaEmitter, _data, _gemm, lowering
from .cuda_render import driver_source
from .elementwise import (EXPR, HALF, LoopStyle, NoMath, Operand, kernel_source,
                          supports_elementwise)
from .fusion import Group, collapse_group, fused_steps, group_operands
from .lowerings import _prod
from .lowprec import is_lowp
from .registry import Backend, Unlowerable, lower_step

#: The CUDA op-family modules (imported: each registered its lowerings in ``LOWER``).
FAMILIES = cuda_ops.FAMILIES

#: What tests and the runtime import from here (the emitter and handles live in cuda_emit).
__all__ = ["CUDA_STYLE", "CudaBackend", "CudaEmitter", "CudaPlan", "CudaSegmentCompiler",
           "ERR", "EW_BLOCK", "FAMILIES", "LOWER", "SUPPORT", "_data", "_gemm", "lowering",
           "supports_device_elementwise"]

#: Threads per block of generated elementwise kernels.
EW_BLOCK = 128

# --- the elementwise table: the CPU's expressions with device math ---------------------------

#: The templates' math functions (:data:`~jitort.codegen.elementwise.CPU_MATH`) as a CUDA
#: kernel calls them; the others (np.fmod, np.trunc, ...) have no device version here.
CUDA_MATH = {**{f: f"math.{f}" for f in ("exp", "log", "log1p", "sqrt", "tanh", "erf", "sin",
                                         "cos", "tan", "sinh", "cosh")},
             **{f"arc{f}": f"math.a{f}" for f in ("sin", "cos", "tan", "sinh", "cosh", "tanh")},
             "exp32": "math.exp", "tanh32": "math.tanh", "erf32": "math.erf",
             "sigmoid32": "_cm.sigmoid32",
             # float16 values are numba-cuda float16 arrays on the device (not uint16 words
             # as on the CPU): the conversions are casts (cvt.f32.f16 / cvt.rn.f16.f32)
             "f16_to_f32": "np.float32", "f32_to_f16": "np.float16",
             "round_f16": "_cm.round_f16"}
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


BF16 = HALF[1]

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
    # (bfloat16 and the low-precision conversions, kernels/cpu/lowprec.py, have no device
    # version: the CPU backend takes those nodes)
    return (n.op_type in CUDA_EXPR and supports_elementwise(n)
            and not any(v is not None and v.dtype is not None
                        and (is_lowp(v.dtype) or np.dtype(v.dtype) == BF16)
                        for v in list(n.inputs) + n.outputs))


# --- the backend ----------------------------------------------------------------------------

class CudaBackend(Backend):
    """Claims the nodes the CUDA code generator can lower (float32/float64 compute ops,
    data movement of plain dtypes, the elementwise table minus ops without device math)."""

    name = "cuda"
    support = SUPPORT

    def elementwise(self, node: Node) -> bool:
        return supports_device_elementwise(node)


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
