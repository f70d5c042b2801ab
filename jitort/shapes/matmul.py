"""Shape functions: matrix products (MatMul, Gemm, jitort's MatMulBias).

The quantized products are in :mod:`.quant`, Einsum in :mod:`.einsum`."""
from __future__ import annotations

from .core import _bcast2, _fail, _get, _matmul_shape, register


@register("MatMul")
def _matmul(node, shapes, values):
    return [_matmul_shape(node, shapes[0], shapes[1], shapes)]


@register("MatMulBias", domain="jitort")
def _matmul_bias(node, shapes, values):
    """jitort.MatMulBias: the MatMul's shape (the bias is one row of its last dim)."""
    return [_matmul_shape(node, shapes[0], shapes[1], shapes)]


@register("Gemm")
def _gemm(node, shapes, values):
    a, b = shapes[0], shapes[1]
    if len(a) != 2 or len(b) != 2:
        raise _fail(node, "Gemm operands must be 2-D", shapes)
    at = node.attrs
    m, k = (a[1], a[0]) if at.get("transA", 0) else (a[0], a[1])
    k2, n = (b[1], b[0]) if at.get("transB", 0) else (b[0], b[1])
    if k != k2:
        raise _fail(node, f"inner dimensions differ ({k} vs {k2})", shapes)
    out = (m, n)
    c = _get(shapes, 2)
    if c is not None and c != out:
        if _bcast2(out, c) != out:
            raise _fail(node, f"C is not broadcastable to {out}", shapes)
    return [out]
