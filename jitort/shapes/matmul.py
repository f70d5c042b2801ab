"""Shape functions: matrix products."""
from __future__ import annotations

from .core import (_bcast2, _fail, _get, _JITORT_REGISTRY, _str, register)


def _matmul_shape(node, a, b, shapes):
    la, lb = len(a), len(b)
    if la == 0 or lb == 0:
        raise _fail(node, "MatMul operands must have rank >= 1", shapes)
    if la >= 2 and lb >= 2:
        if a[-1] != b[-2]:
            raise _fail(node, f"inner dimensions differ ({a[-1]} vs {b[-2]})", shapes)
        if la == 2 and lb == 2:
            return (a[0], b[1])
        ba, bb = a[:-2], b[:-2]
        batch = ba if ba == bb else _bcast2(ba, bb)
        if batch is None:
            raise _fail(node, "batch dimensions are not broadcastable", shapes)
        return batch + (a[-2], b[-1])
    if la == 1 and lb == 1:
        if a[0] != b[0]:
            raise _fail(node, f"inner dimensions differ ({a[0]} vs {b[0]})", shapes)
        return ()
    if la == 1:  # (k) @ (..., k, n) -> (..., n)
        if a[0] != b[-2]:
            raise _fail(node, f"inner dimensions differ ({a[0]} vs {b[-2]})", shapes)
        return b[:-2] + (b[-1],)
    # (..., m, k) @ (k) -> (..., m)
    if a[-1] != b[0]:
        raise _fail(node, f"inner dimensions differ ({a[-1]} vs {b[0]})", shapes)
    return a[:-1]


@register("MatMul", "MatMulInteger")
def _matmul(node, shapes, values):
    return [_matmul_shape(node, shapes[0], shapes[1], shapes)]


def _matmul_bias(node, shapes, values):
    """jitort.MatMulBias: the MatMul's shape (the bias is one row of its last dim)."""
    return [_matmul_shape(node, shapes[0], shapes[1], shapes)]


_JITORT_REGISTRY["MatMulBias"] = _matmul_bias


@register("QLinearMatMul")
def _qlinear_matmul(node, shapes, values):
    return [_matmul_shape(node, shapes[0], shapes[3], shapes)]


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


@register("Einsum")
def _einsum(node, shapes, values):
    eq = _str(node.attrs.get("equation"), "").replace(" ", "")
    if "->" in eq:
        lhs, rhs = eq.split("->")
    else:
        lhs, rhs = eq, None
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise _fail(node, f"equation {eq!r} has {len(terms)} operands, got {len(shapes)}", shapes)
    dims: dict[str, int] = {}
    counts: dict[str, int] = {}
    ell = ()
    for term, s in zip(terms, shapes):
        if "..." in term:
            pre, post = term.split("...")
            ne = len(s) - len(pre) - len(post)
            if ne < 0:
                raise _fail(node, f"operand rank {len(s)} too small for {term!r}", shapes)
            e = tuple(s[len(pre):len(pre) + ne])
            r = _bcast2(ell, e)
            if r is None:
                raise _fail(node, "ellipsis dimensions are not broadcastable", shapes)
            ell = r
            letters = list(pre) + list(post)
            ldims = list(s[:len(pre)]) + list(s[len(pre) + ne:])
        else:
            if len(term) != len(s):
                raise _fail(node, f"operand rank {len(s)} does not match {term!r}", shapes)
            letters, ldims = list(term), list(s)
        for c, d in zip(letters, ldims):
            counts[c] = counts.get(c, 0) + 1
            old = dims.get(c)
            if old is None or old == 1:
                dims[c] = d
            elif d != old and d != 1:
                raise _fail(node, f"dimension {c!r} is {old} and {d}", shapes)
    if rhs is None:
        out_letters = "".join(sorted(c for c, n in counts.items() if n == 1))
        return [ell + tuple(dims[c] for c in out_letters)]
    if "..." in rhs:
        pre, post = rhs.split("...")
        return [tuple(dims[c] for c in pre) + ell + tuple(dims[c] for c in post)]
    return [tuple(dims[c] for c in rhs)]


