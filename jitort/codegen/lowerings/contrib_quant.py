"""CPU lowerings: onnxruntime's quantized contrib ops (domain ``com.microsoft``): MatMulNBits,
MatMulIntegerToFloat, DynamicQuantizeMatMul, QLinearAdd, QLinearMul, QLinearSigmoid,
QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearConcat.

Kernels: ``jitort.kernels.cpu.contrib_quant`` (arithmetic: its module docstring), the quant
family's integer products (``_lower_qmm``) and dynamic quantization, and the float gemm.

MatMulNBits' constant weights are dequantized to float32 once, at compile time, and prepacked
for jitort's gemm (``sgemm.pack_b``), which then runs the product as any float32 MatMul with
constant weights: the choice against a kernel reading the packed codes is measured in
``benchmarks/test_bench_contrib_quant.py``.

Declined (run by the interpreter, so ``strict=True`` names them), by the support predicates:
non-constant quantized weights, scales or zero points where the kernels bake them in
(MatMulNBits' B / scales / zero points, the QLinear* element-wise ops' scales and zero points),
MatMulNBits' ``g_idx`` and bits other than 2, 4, 8, float16 operands.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ..calls import KernelModule, Scalar, Zeros
from ..registry import Unlowerable, lowering
from .common import _axis, _prod
from .quant import _Q8, _dt, _lower_qmm, _mm_shapes, _vec

if TYPE_CHECKING:
    from ..emitter import Emitter

MS = "com.microsoft"
_cq = KernelModule("contrib_quant")
_gemm = KernelModule("gemm")
_quant = KernelModule("quant")
_F32 = np.dtype(np.float32)


def _const(n: Node, *idx: int) -> bool:
    """Inputs ``idx`` absent or constant."""
    return all(n.input(i) is None or n.input(i).is_const for i in idx)


def _scalar(n: Node, i: int, default=0):
    """Input ``i``'s one value (a constant: checked by the support predicates)."""
    v = n.input(i)
    if v is None:
        return default
    if v.const.size != 1:
        raise Unlowerable(n, f"input {i} has {v.const.size} values where one (per-tensor) is "
                          "supported")
    return v.const.reshape(-1)[0]


# --- MatMulNBits --------------------------------------------------------------------------------

def _nbits_ok(n: Node) -> bool:
    return (_dt(n.inputs[0]) == _F32 and _dt(n.outputs[0]) == _F32 and _const(n, 1, 2, 3)
            and n.input(4) is None and int(n.attrs.get("bits", 4)) in (2, 4, 8)
            and (n.input(5) is None or _dt(n.inputs[5]) == _F32))


@lowering("MatMulNBits", domain=MS, supports=_nbits_ok)
def lower_matmul_nbits(em: Emitter, n: Node) -> None:
    from jitort.kernels.cpu.contrib_quant import dequantize_nbits
    from jitort.kernels.cpu.sgemm import pack_b
    a, b, sc, zp, bias, y = n.inputs[0], n.inputs[1], n.inputs[2], n.input(3), n.input(5), \
        n.outputs[0]
    k, nn = int(n.attrs["K"]), int(n.attrs["N"])
    bits, block = int(n.attrs.get("bits", 4)), int(n.attrs["block_size"])
    if block < 16 or block & (block - 1):
        raise Unlowerable(n, f"block_size {block} (a power of 2 from 16 is required)")
    nblk = (k + block - 1) // block
    if b.const.size != nn * nblk * (block * bits // 8) or sc.const.size != nn * nblk:
        raise Unlowerable(n, f"B of shape {b.const.shape} / scales of shape {sc.const.shape} "
                          f"for K={k}, N={nn}, block_size={block}, bits={bits}")
    key = ("nbits", id(b.const), id(sc.const), None if zp is None else id(zp.const))

    def make():
        w = dequantize_nbits(b.const, sc.const, None if zp is None else zp.const, k, nn, bits,
                             block)
        return pack_b(w)
    pk = em.constant(key, make)
    rows = _prod(em.shape(a)[:-1])
    av = em.shaped(a, (1, rows, k))
    yv = em.write(y).reshape(em.sizes((1, rows, nn)))
    bv = Zeros("float32", (0,)) if bias is None else em.read(bias)
    em.call(_gemm.matmul_packed, av, pk, bv, yv, 0, Scalar("float64", 0.0),
            Scalar("float64", 0.0))


# --- MatMulIntegerToFloat / DynamicQuantizeMatMul -----------------------------------------------

def _to_float(em: Emitter, n: Node, a, za, b, zb, sa, sb, bias, into_a=None) -> None:
    """The exact int32 product (``_lower_qmm`` into a temporary) scaled to float32."""
    a3, b3, y3 = _mm_shapes(em, n, a, b)
    c = em.temp(_prod(y3), np.int32).reshape(em.sizes(y3))
    a_in, za_in = into_a or (None, None)
    _lower_qmm(em, n, a, za, b, zb, None, n.outputs[0], None, into=(a_in, za_in, c))
    nn = b3[2]
    sbv = _vec(em, n, sb, nn, "b scale", np.float32)
    if bias is not None and tuple(em.shape(bias)) != (nn,):
        raise Unlowerable(n, f"bias of shape {tuple(em.shape(bias))}")
    bv = Zeros("float32", (1,)) if bias is None else em.read(bias)
    yv = em.write(n.outputs[0]).reshape(em.sizes(y3))
    em.call(_cq.int_to_float, c, sa, sbv, bv, bias is not None, yv)


@lowering("MatMulIntegerToFloat", domain=MS, supports=lambda n: _dt(n.inputs[0]) in _Q8
          and _dt(n.inputs[1]) in _Q8 and _dt(n.outputs[0]) == _F32
          and all(n.input(i) is None or _dt(n.inputs[i]) == _F32 for i in (2, 3, 6)))
def lower_matmul_integer_to_float(em: Emitter, n: Node) -> None:
    i = n.inputs
    sa = _vec(em, n, i[2], None, "a scale (per-row a scales are not supported)", np.float32)
    _to_float(em, n, i[0], n.input(4), i[1], n.input(5), sa, i[3], n.input(6))


@lowering("DynamicQuantizeMatMul", domain=MS, supports=lambda n: _dt(n.inputs[0]) == _F32
          and _dt(n.inputs[1]) in _Q8 and _dt(n.outputs[0]) == _F32
          and all(n.input(i) is None or _dt(n.inputs[i]) == _F32 for i in (2, 4)))
def lower_dynamic_quantize_matmul(em: Emitter, n: Node) -> None:
    a = n.inputs[0]
    total = _prod(em.shape(a))
    one = em.sizes((1,))
    aq = em.temp(total, np.uint8)
    s, z = em.temp(1, np.float32).reshape(one), em.temp(1, np.uint8).reshape(one)
    em.call(_quant.dynamic_quantize, em.shaped(a, (total,)), aq.reshape(em.sizes((total,))),
            s, z)
    _to_float(em, n, a, None, n.inputs[1], n.input(3), s, n.inputs[2], n.input(4),
              into_a=(aq, z))


# --- QLinearAdd / QLinearMul --------------------------------------------------------------------

def _q_ok(n: Node, data, consts) -> bool:
    """8-bit data inputs / output, float32 scales, the scales and zero points constant."""
    return (all(_dt(n.inputs[i]) in _Q8 for i in data) and _dt(n.outputs[0]) in _Q8
            and _const(n, *consts))


def _range(y) -> tuple[float, float]:
    info = np.iinfo(_dt(y))
    return float(info.min), float(info.max)


def _bcast4(em: Emitter, n: Node, v, rank: int):
    s = (1,) * (rank - len(em.shape(v))) + tuple(em.shape(v))
    return em.shaped(v, (1,) * (4 - rank) + s)


@lowering("QLinearAdd", "QLinearMul", domain=MS,
          supports=lambda n: _q_ok(n, (0, 3), (1, 2, 4, 5, 6, 7)))
def lower_qlinear_binary(em: Emitter, n: Node) -> None:
    a, b, y = n.inputs[0], n.inputs[3], n.outputs[0]
    ys = tuple(em.shape(y))
    if len(ys) > 4:
        raise Unlowerable(n, f"rank {len(ys)} (up to 4 is compiled)")
    sa, sb, sc = (np.float32(_scalar(n, i)) for i in (1, 4, 6))
    za, zb, zc = (int(_scalar(n, i)) for i in (2, 5, 7))
    mul = n.op_type == "QLinearMul"
    if mul:
        ra, rb = np.float32(sa * sb) / sc, np.float32(0)
    else:
        ra, rb = sa / sc, sb / sc
    if _prod(em.shape(a)) == _prod(ys) and _prod(em.shape(b)) == _prod(ys):
        t = _prod(ys)  # no broadcast: one contiguous run
        av, bv, y4 = em.shaped(a, (1, 1, 1, t)), em.shaped(b, (1, 1, 1, t)), (1, 1, 1, t)
    else:
        av, bv = _bcast4(em, n, a, len(ys)), _bcast4(em, n, b, len(ys))
        y4 = (1,) * (4 - len(ys)) + ys
    lo, hi = _range(y)
    yv = em.write(y).reshape(em.sizes(y4))
    em.call(_cq.qlinear_binary, av, bv, yv, mul, Scalar("float32", float(ra)),
            Scalar("float32", float(rb)), za, zb, zc, lo, hi)


# --- table-driven: QLinearSigmoid / QLinearLeakyRelu / QLinearConcat ----------------------------

def _table(em: Emitter, n: Node, key, fn, xs, zx, ys, zy, x, y):
    """A 256-entry requantization table, a compile-time constant."""
    from jitort.kernels.cpu.contrib_quant import build_lut
    return em.constant(("qlut",) + key + (float(xs), int(zx), float(ys), int(zy),
                                          _dt(x).name, _dt(y).name),
                       lambda: build_lut(fn, xs, zx, ys, zy, _dt(x), _dt(y)))


def _off(x) -> int:
    return 128 if _dt(x) == np.int8 else 0


def _sigmoid(v):
    return (np.float32(1) / (np.float32(1) + np.exp(-v.astype(np.float32)))).astype(np.float32)


@lowering("QLinearSigmoid", "QLinearLeakyRelu", domain=MS,
          supports=lambda n: _q_ok(n, (0,), (1, 2, 3, 4)))
def lower_qlinear_lut(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    if n.op_type == "QLinearSigmoid":
        fn, key = _sigmoid, ("sigmoid",)
    else:
        alpha = np.float32(n.attrs.get("alpha", 0.01))
        fn, key = (lambda v: np.where(v >= 0, v, v * alpha).astype(np.float32)), \
            ("leaky", float(alpha))
    tab = _table(em, n, key, fn, _scalar(n, 1), _scalar(n, 2), _scalar(n, 3), _scalar(n, 4),
                 x, y)
    total = _prod(em.shape(x))
    yv = em.write(y).reshape(em.sizes((total,)))
    em.call(_cq.lut_apply, em.shaped(x, (total,)), tab, yv, _off(x))


def _concat_ok(n: Node) -> bool:
    ins = n.inputs
    return (len(ins) >= 5 and (len(ins) - 2) % 3 == 0 and _dt(n.outputs[0]) in _Q8
            and all(_dt(ins[i]) == _dt(n.outputs[0]) for i in range(2, len(ins), 3))
            and _const(n, 0, 1, *(i for i in range(len(ins)) if i % 3 != 2)))


@lowering("QLinearConcat", domain=MS, supports=_concat_ok)
def lower_qlinear_concat(em: Emitter, n: Node) -> None:
    y = n.outputs[0]
    ys = tuple(em.shape(y))
    ax = _axis(int(n.attrs.get("axis", 0)), len(ys))
    outer, inner = _prod(ys[:ax]), _prod(ys[ax + 1:])
    yv = em.write(y).reshape(em.sizes((outer, ys[ax] * inner)))
    sy, zy = _scalar(n, 0), _scalar(n, 1)
    col = 0
    for i in range(2, len(n.inputs), 3):
        x = n.inputs[i]
        width = em.shape(x)[ax] * inner
        tab = _table(em, n, ("identity",), lambda v: v, _scalar(n, i + 1), _scalar(n, i + 2),
                     sy, zy, x, y)
        em.call(_cq.lut_concat, em.shaped(x, (outer, width)), tab, _off(x), yv, em.size(col))
        col += width


# --- QLinearGlobalAveragePool -------------------------------------------------------------------

@lowering("QLinearGlobalAveragePool", domain=MS, supports=lambda n: _q_ok(n, (0,), (1, 2, 3, 4)))
def lower_qlinear_gap(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    xs = tuple(em.shape(x))
    last = bool(n.attrs.get("channels_last", 0))
    nb, c = xs[0], (xs[-1] if last else xs[1])
    img = _prod(xs[1:-1]) if last else _prod(xs[2:])
    sx, zx, sy, zy = _scalar(n, 1), int(_scalar(n, 2)), _scalar(n, 3), int(_scalar(n, 4))
    img = int(img)  # pinned: the requantization scale depends on it
    scale = np.float32(sx) / (np.float32(sy) * np.float32(img))
    lo, hi = _range(y)
    x3 = (nb, img, c) if last else (nb, c, img)
    yv = em.write(y).reshape(em.sizes((nb, c)))
    em.call(_cq.qlinear_gap, em.shaped(x, x3), yv, zx, Scalar("float32", float(scale)), zy,
            Scalar("float32", lo - zy), Scalar("float32", hi - zy), last)
