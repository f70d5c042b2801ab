"""CPU lowerings: matrix products: MatMul, MatMulBias, Gemm.

A float32 product whose B is a constant matrix (weights: batch 1) runs on jitort's own gemm
with B packed once at compile time (``kernels.cpu.sgemm``; ``gemm.matmul_packed`` /
``gemm.gemm_packed``), as onnxruntime prepacks its MatMul / Gemm weights for MLAS: the vendor
BLAS packs all of B on every call. Which of the two a shape takes is the ``gemm.weights``
choice of ``jitort.tuning`` (measured on this machine by ``jitort tune``; a shape rule
before that). ``JITORT_PACKED_GEMM=0`` keeps the per-call path.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ... import options, tuning
from ...ir import Node
from ..calls import KernelModule, Scalar, Zeros
from ..registry import Unlowerable, lowering
from ..symbolic import concrete
from .common import (_is_float, _prod, act_args, ACT_CODES)

if TYPE_CHECKING:
    from ..emitter import Emitter

_gemm = KernelModule("gemm")


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
        av = em.shaped(a, (1, _prod(ba) * m, k))
        bv = em.shaped(b, (1, k, n_))
        yv = (1, _prod(ba) * m, n_)
    else:
        rank = max(len(ba), len(bb))
        ba_, bb_ = (1,) * (rank - len(ba)) + ba, (1,) * (rank - len(bb)) + bb
        if ba_ == bb_:
            batch = _prod(ba_)
            av = em.shaped(a, (batch, m, k))
            bv = em.shaped(b, (batch, k, n_))
        elif _prod(ba_) == 1:
            batch = _prod(bb_)
            av = em.shaped(a, (1, m, k))
            bv = em.shaped(b, (batch, k, n_))
        else:
            raise Unlowerable(n, f"MatMul batch broadcast {sa} x {sb}")
        yv = (batch, m, n_)
    return av, bv, yv


def _packed_b(em: Emitter, b, k: int, n_: int, trans: bool, rows):
    """B prepacked for ``sgemm`` (a compile-time constant), or None when B is not a
    float32 constant matrix of k x n_ (n_ x k when ``trans``), the per-call path is the
    faster one for this shape on this machine (``jitort.tuning``'s ``gemm.weights``: the
    calibrated pick of the shape's bucket, else its default rule; ``rows``: A's row count at
    this plan), or packing is switched off."""
    if (not b.is_const or np.dtype(b.dtype) != np.float32
            or not (options.read("packed_gemm") if em.options is None else em.options.packed_gemm)
            or k == 0 or n_ == 0):
        return None
    if tuning.choose("gemm.weights", rows=concrete(rows), k=k, n=n_, trans=bool(trans),
                     dtype="float32") != "packed":
        return None
    from jitort.kernels.cpu.sgemm import pack_b
    w = b.const.reshape((n_, k) if trans else (k, n_))
    return em.constant(("sgemm", bool(trans), id(b.const)), lambda: pack_b(w.T if trans else w))


def _lower_packed(em: Emitter, n: Node, bias) -> bool:
    """MatMul / MatMulBias over a prepacked constant B (see the module docstring); False
    when B does not qualify."""
    a, b, y = n.inputs[0], n.inputs[1], n.outputs[0]
    sa, sb = em.shape(a), em.shape(b)
    if len(sa) == 0 or len(sb) != 2 or np.dtype(y.dtype) != np.float32:
        return False
    k, n_ = (int(d) for d in b.const.shape) if b.is_const else (0, 0)
    rows = _prod(sa[:-1])
    pk = _packed_b(em, b, k, n_, False, rows)
    if pk is None:
        return False
    av = em.shaped(a, (1, rows, k))
    yv = em.write(y).reshape(em.sizes((1, rows, n_)))
    if bias is None:
        em.call(_gemm.matmul_packed, av, pk, Zeros("float32", (0,)), yv, 0, 0.0, 0.0)
    else:
        act, alpha, beta = act_args(n)
        em.call(_gemm.matmul_packed, av, pk, em.read(bias), yv, act,
                Scalar("float64", float(alpha)), Scalar("float64", float(beta)))
    return True


@lowering("MatMul", supports=lambda n: _is_float(n.inputs[0], n.inputs[1], n.outputs[0])
          and n.inputs[0].dtype == n.inputs[1].dtype)
def lower_matmul(em: Emitter, n: Node) -> None:
    if _lower_packed(em, n, None):
        return
    av, bv, yshape = _matmul_views(em, n)
    y = em.write(n.outputs[0])
    em.call(_gemm.matmul3d, av, bv, y.reshape(em.sizes(yshape)))



@lowering("MatMulBias", domain="jitort", supports=lambda n: _is_float(n.inputs[0], n.inputs[1])
          and n.attrs.get("activation", "") in ACT_CODES)
def lower_matmul_bias(em: Emitter, n: Node) -> None:
    if _lower_packed(em, n, n.inputs[2]):
        return
    av, bv, yshape = _matmul_views(em, n)
    bias = em.read(n.inputs[2])
    y = em.write(n.outputs[0])
    act, alpha, beta = act_args(n)
    dt = np.dtype(n.outputs[0].dtype).name
    em.call(_gemm.matmul3d_bias_act, av, bv, bias, y.reshape(em.sizes(yshape)), act,
            Scalar(dt, float(alpha)), Scalar(dt, float(beta)))


@lowering("Gemm", supports=lambda n: _is_float(n.inputs[0], n.inputs[1], n.outputs[0])
          and all(v is None or v.dtype == n.inputs[0].dtype for v in n.inputs))
def lower_gemm(em: Emitter, n: Node) -> None:
    a, b, y = n.inputs[0], n.inputs[1], n.outputs[0]
    c = n.input(2)
    m, nn = em.shape(y)
    dt = np.dtype(y.dtype).name
    if c is not None:
        sc = em.shape(c)
        c2 = {0: (1, 1), 1: (1, sc[0] if sc else 1)}.get(len(sc), tuple(sc))
        cv = em.shaped(c, c2)
    else:
        cv = Zeros(dt, (1, 1))
    yv = em.write(y)
    tb = bool(n.attrs.get('transB', 0))
    pk = None
    if b.is_const and b.const.ndim == 2 and np.dtype(y.dtype) == np.float32:
        k, n_ = b.const.shape[::-1] if tb else b.const.shape
        pk = _packed_b(em, b, int(k), int(n_), tb, m)
    alpha = Scalar(dt, float(n.attrs.get("alpha", 1.0)))
    beta = Scalar(dt, float(n.attrs.get("beta", 1.0)))
    ta = bool(n.attrs.get("transA", 0))
    if pk is not None:
        em.call(_gemm.gemm_packed, em.read(a), pk, cv, yv, alpha, beta, ta, c is not None)
        return
    em.call(_gemm.gemm, em.read(a), em.read(b), cv, yv, alpha, beta, ta, tb, c is not None)
