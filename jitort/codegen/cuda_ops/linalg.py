"""CUDA lowerings of matrix products: MatMul, jitort.MatMulBias, Gemm."""
from __future__ import annotations

from ...ir import Node
from ..cuda_emit import CudaEmitter, _gemm, _one_product_dtype, lowering
from ..lowerings import _prod, act_args, ACT_CODES
from ..registry import Unlowerable


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
    return _one_product_dtype(n.inputs[0], n.inputs[1], n.outputs[0])


@lowering("MatMul", supports=_mm_ok)
def lower_matmul(em: CudaEmitter, n: Node) -> None:
    nb, m, nn, k, sab, sbb = _mm_geometry(em, n)
    a, b = em.read(n.inputs[0]), em.read(n.inputs[1])
    y = em.write(n.outputs[0])
    em.call(_gemm.matmul3d, a, em.size(sab), b, em.size(sbb), y, *em.sizes((nb, m, nn, k)))


@lowering("MatMulBias", domain="jitort",
          supports=lambda n: _one_product_dtype(*n.inputs[:3], n.outputs[0])
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


@lowering("Gemm", supports=lambda n: _one_product_dtype(*n.inputs, n.outputs[0]))
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
