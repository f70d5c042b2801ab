"""CPU lowerings: matrix products: MatMul, MatMulBias, Gemm."""
from __future__ import annotations

from typing import TYPE_CHECKING


from ...ir import Node
from ..registry import Unlowerable, lowering
from ..elementwise import tname
from .common import (_is_float, _prod, act_args, ACT_CODES, float_literal)

if TYPE_CHECKING:
    from ..cpu import Emitter


def _matmul_views(em: Emitter, n: Node):
    a, b, y = n.inputs[0], n.inputs[1], n.outputs[0]
    sa, sb = em.shape(a), em.shape(b)
    if len(sa) == 0 or len(sb) == 0:
        raise Unlowerable(n, "MatMul of a scalar")
    sa2 = (1,) + tuple(sa) if len(sa) == 1 else tuple(sa)
    sb2 = tuple(sb) + (1,) if len(sb) == 1 else tuple(sb)
    m, k = sa2[-2], sa2[-1]
    n_ = sb2[-1]
    ba, bb = sa2[:-2], sb2[:-2]
    if _prod(bb) == 1:  # weights-like B: one big GEMM over all rows of A
        av = f"{em.arr(a)}.reshape({em.tuple_expr((1, _prod(ba) * m, k))})"
        bv = f"{em.arr(b)}.reshape({em.tuple_expr((1, k, n_))})"
        yv = (1, _prod(ba) * m, n_)
    else:
        rank = max(len(ba), len(bb))
        ba_, bb_ = (1,) * (rank - len(ba)) + ba, (1,) * (rank - len(bb)) + bb
        if ba_ == bb_:
            batch = _prod(ba_)
            av = f"{em.arr(a)}.reshape({em.tuple_expr((batch, m, k))})"
            bv = f"{em.arr(b)}.reshape({em.tuple_expr((batch, k, n_))})"
        elif _prod(ba_) == 1:
            batch = _prod(bb_)
            av = f"{em.arr(a)}.reshape({em.tuple_expr((1, m, k))})"
            bv = f"{em.arr(b)}.reshape({em.tuple_expr((batch, k, n_))})"
        else:
            raise Unlowerable(n, f"MatMul batch broadcast {sa} x {sb}")
        yv = (batch, m, n_)
    return av, bv, yv


@lowering("MatMul", supports=lambda n: _is_float(n.inputs[0], n.inputs[1], n.outputs[0])
          and n.inputs[0].dtype == n.inputs[1].dtype)
def lower_matmul(em: Emitter, n: Node) -> None:
    av, bv, yshape = _matmul_views(em, n)
    y = em.out(n.outputs[0])
    em.call(f"_gemm.matmul3d({av}, {bv}, {y}.reshape({em.tuple_expr(yshape)}))")



@lowering("MatMulBias", domain="jitort", supports=lambda n: _is_float(n.inputs[0], n.inputs[1])
          and n.attrs.get("activation", "") in ACT_CODES)
def lower_matmul_bias(em: Emitter, n: Node) -> None:
    av, bv, yshape = _matmul_views(em, n)
    bias = em.arr(n.inputs[2])
    y = em.out(n.outputs[0])
    act, alpha, beta = act_args(n)
    dt = tname(n.outputs[0].dtype)
    em.call(f"_gemm.matmul3d_bias_act({av}, {bv}, {bias}, {y}.reshape({em.tuple_expr(yshape)}), "
            f"{act}, {float_literal(alpha, dt)}, {float_literal(beta, dt)})")


@lowering("Gemm", supports=lambda n: _is_float(n.inputs[0], n.inputs[1], n.outputs[0])
          and all(v is None or v.dtype == n.inputs[0].dtype for v in n.inputs))
def lower_gemm(em: Emitter, n: Node) -> None:
    a, b, y = n.inputs[0], n.inputs[1], n.outputs[0]
    c = n.input(2)
    m, nn = em.shape(y)
    dt = tname(y.dtype)
    if c is not None:
        sc = em.shape(c)
        c2 = {0: (1, 1), 1: (1, sc[0] if sc else 1)}.get(len(sc), tuple(sc))
        cv = f"{em.arr(c)}.reshape({em.tuple_expr(c2)})"
    else:
        cv = f"np.zeros((1, 1), {dt})"
    yv = em.out(y)
    em.call(f"_gemm.gemm({em.arr(a)}, {em.arr(b)}, {cv}, {yv}, {dt}({float(n.attrs.get('alpha', 1.0))!r}), "
            f"{dt}({float(n.attrs.get('beta', 1.0))!r}), {bool(n.attrs.get('transA', 0))}, "
            f"{bool(n.attrs.get('transB', 0))}, {c is not None})")
