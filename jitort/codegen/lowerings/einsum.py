"""CPU lowerings: Einsum, in the forms exporters emit, as transposes, reshapes and batched GEMMs.

One operand: a permutation and/or a sum over letters the output drops (a generated reduction,
then a transpose when the order differs). Two operands: each letter is a batch letter (both
operands and the output), an M letter (first operand and output), an N letter (second operand
and output), a K letter (both operands, summed) or summed within one operand only (reduced
first). The operands are used in place when their axes already read as (batch, M, K) /
(batch, K, M) and (batch, K, N) / (batch, N, K) -- the GEMM takes either with its transpose
flags -- and copied into that order otherwise; the product is written straight into the output
when its letters read (batch, M, N) or (batch, N, M) (the operands swap), else through a
scratch buffer and a transpose. A letter repeated within one operand is taken as a diagonal
first (a gathered copy). Declined: three or more operands, batch letters whose sizes differ
(broadcast), integer data.
"""
from __future__ import annotations

import string
from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ..calls import KernelModule, Scalar, View, Zeros
from ..registry import Unlowerable, lowering
from .common import _float_io, _prod, loop_copy_kernel
from .reduce import canonical_runs, reduce_source

if TYPE_CHECKING:
    from ..emitter import Emitter

_data = KernelModule("data")
_gemm = KernelModule("gemm")


def _parse(n: Node, ranks: list[int]) -> tuple[list[str], str]:
    """The operands' letters and the output's, the ellipsis replaced by upper-case letters."""
    eq = n.attrs.get("equation", "")
    eq = (eq.decode() if isinstance(eq, bytes) else eq).replace(" ", "")
    lhs, rhs = eq.split("->") if "->" in eq else (eq, None)
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise Unlowerable(n, f"Einsum {eq!r}: {len(terms)} terms for {len(ranks)} operands")
    ell_rank = 0
    for t, r in zip(terms, ranks):
        if "..." in t:
            ell_rank = max(ell_rank, r - len(t.replace("...", "")))
    spare = [c for c in string.ascii_uppercase if c not in eq][::-1]
    if ell_rank > len(spare):
        raise Unlowerable(n, "Einsum: ellipsis too long")
    ell = "".join(spare[:ell_rank])  # ellipsis letters, right-aligned across operands

    def expand(t, r):
        if "..." not in t:
            return t
        pre, post = t.split("...")
        k = r - len(pre) - len(post)
        return pre + ell[ell_rank - k:] + post

    letters = [expand(t, r) for t, r in zip(terms, ranks)]
    if rhs is None:
        counts: dict[str, int] = {}
        for t in letters:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    else:
        out = expand(rhs, ell_rank + len(rhs.replace("...", "")))
    for t, r in zip(letters, ranks):
        if len(t) != r:
            raise Unlowerable(n, f"Einsum: term {t!r} for an operand of rank {r}")
    if len(set(out)) != len(out):
        raise Unlowerable(n, f"Einsum: repeated output letter in {out!r}")
    return letters, out


def _permute(em: Emitter, src: View, shape, perm, dtype, dst: View | None = None) -> View:
    """``src`` (of ``shape``) with its axes permuted by ``perm``, written into ``dst`` (a scratch
    buffer if None; no copy then when ``perm`` keeps the data in place); returns the result,
    shaped [shape[p] for p in perm]."""
    out_shape = [shape[p] for p in perm]
    keep = [p for p in perm if shape[p] != 1]  # size-1 axes do not move data
    runs: list[list[int]] = []
    for p in keep:
        if runs and runs[-1][-1] < p and all(shape[q] == 1 for q in range(runs[-1][-1] + 1, p)):
            runs[-1].append(p)
        else:
            runs.append([p])
    if len(runs) <= 1 and dst is None:
        return src.reshape(em.sizes(out_shape))
    if dst is None:
        dst = em.temp(_prod(out_shape), dtype)
    if len(runs) <= 1:
        em.call(_data.copy_flat, src.flat(), dst.flat())
        return dst.reshape(em.sizes(out_shape))
    order = sorted(range(len(runs)), key=lambda i: runs[i][0])
    in_shape = [_prod([shape[a] for a in runs[i]]) for i in order]
    run_shape = [_prod([shape[a] for a in r]) for r in runs]
    r = len(runs)
    pos = {i: j for j, i in enumerate(order)}
    idx_in = ["" for _ in range(r)]
    for k in range(r):
        idx_in[pos[k]] = f"i{k}"
    kname = loop_copy_kernel(em, f"k_einsum_perm{r}", r, idx_in)
    em.call(kname, dst.reshape(em.sizes(run_shape)), src.reshape(em.sizes(in_shape)))
    return dst.reshape(em.sizes(out_shape))


def _diagonal(em: Emitter, src: View, letters: str, shape, dtype):
    """The diagonal of ``src`` over its repeated letters (``ii->i``): a gathered copy in
    scratch; returns (view, letters, shape) with each letter once."""
    uniq = "".join(dict.fromkeys(letters))
    ushape = [shape[letters.index(c)] for c in uniq]
    dst = em.temp(_prod(ushape), dtype)
    r = len(uniq)
    kname = loop_copy_kernel(em, f"k_einsum_diag{r}_{len(letters)}", r,
                             [f"i{uniq.index(c)}" for c in letters], tail=",")
    dv = dst.reshape(em.sizes(ushape))
    em.call(kname, dv, src)
    return dv, uniq, ushape


def _sum_out(em: Emitter, n: Node, src: View, letters: str, shape, drop: set, dtype):
    """Sum ``src`` over the letters in ``drop``; returns (view, letters, shape) left."""
    axes = [k for k, c in enumerate(letters) if c in drop]
    runs = canonical_runs(shape, axes)
    left = "".join(c for c in letters if c not in drop)
    lshape = [d for c, d in zip(letters, shape) if c not in drop]
    dst = em.temp(_prod(lshape), dtype)
    if not runs:
        runs = [(1, False)]
    flags = tuple(r for _, r in runs)
    kname = em.generated(f"k_reduce{len(flags)}",
                         reduce_source("ReduceSum", np.dtype(dtype), flags, False))
    em.call(kname, src.reshape(em.sizes([s for s, _ in runs])),
            dst.reshape(em.sizes([1 if r else s for s, r in runs])))
    return dst.reshape(em.sizes(lshape)), left, lshape


def _einsum_ok(n: Node) -> bool:
    return (_float_io(n) and len(n.inputs) in (1, 2)
            and all(v is not None and v.dtype == n.outputs[0].dtype for v in n.inputs))


@lowering("Einsum", supports=_einsum_ok)
def lower_einsum(em: Emitter, n: Node) -> None:
    y = n.outputs[0]
    shapes = [list(em.shape(v)) for v in n.inputs]
    letters, out = _parse(n, [len(s) for s in shapes])
    dims: dict[str, int] = {}
    for t, s in zip(letters, shapes):
        for c, d in zip(t, s):
            if c in dims and dims[c] != d:
                raise Unlowerable(n, f"Einsum: letter {c!r} has sizes {dims[c]} and {d} (broadcast)")
            dims[c] = d
    dt = y.dtype
    srcs = [em.read(v) for v in n.inputs]
    for j, t in enumerate(letters):  # diagonals first: each letter once per operand
        if len(set(t)) != len(t):
            srcs[j], letters[j], shapes[j] = _diagonal(em, srcs[j], t, shapes[j], dt)
    # letters summed within one operand only
    for j, t in enumerate(letters):
        others = set(out).union(*[set(u) for i, u in enumerate(letters) if i != j])
        drop = {c for c in t if c not in others}
        if drop:
            srcs[j], letters[j], shapes[j] = _sum_out(em, n, srcs[j], t, shapes[j], drop, dt)
    if len(letters) == 1:
        t = letters[0]
        yv = em.write(y)
        _permute(em, srcs[0], shapes[0], [t.index(c) for c in out], dt, yv)
        return
    ta_l, tb_l = letters
    batch = [c for c in out if c in ta_l and c in tb_l]
    ms = [c for c in out if c in ta_l and c not in tb_l]
    ns = [c for c in out if c in tb_l and c not in ta_l]
    ks = [c for c in ta_l if c in tb_l and c not in out]
    bt, m, nn, k = (_prod([dims[c] for c in g]) for g in (batch, ms, ns, ks))

    def layout(t, shape, src, first, second):
        """(view as (bt, x, y) with trans flag) for operand letters t: as is when t reads
        batch+first+second (flag 0) or batch+second+first (flag 1), else a permuted copy."""
        s = "".join(t)
        if s == "".join(batch + first + second):
            return src, 0
        if s == "".join(batch + second + first):
            return src, 1
        perm = [t.index(c) for c in batch + first + second]
        return _permute(em, src, shape, perm, dt), 0

    a_src, ta = layout(ta_l, shapes[0], srcs[0], ms, ks)
    b_src, tb = layout(tb_l, shapes[1], srcs[1], ks, ns)
    a3 = (bt, k, m) if ta else (bt, m, k)
    b3 = (bt, nn, k) if tb else (bt, k, nn)
    a_e = a_src.reshape(em.sizes(a3))
    b_e = b_src.reshape(em.sizes(b3))
    tn = np.dtype(dt).name

    def gemm(a, b, o, fa, fb):
        em.call(_gemm._mm_run, a, b, o, Zeros(tn, (0,)), Zeros(tn, (1, 1)),
                Scalar("int64", fa), Scalar("int64", fb), Scalar("float64", 1.0),
                Scalar("float64", 0.0), Scalar("int64", 0), Scalar("int64", 0),
                Scalar("float64", 0.0), Scalar("float64", 0.0), Zeros("float32", (0,)))

    if "".join(out) == "".join(batch + ms + ns):
        yv = em.write(y)
        gemm(a_e, b_e, yv.reshape(em.sizes((bt, m, nn))), ta, tb)
        return
    if "".join(out) == "".join(batch + ns + ms):  # y^T = b^T a^T
        yv = em.write(y)
        gemm(b_e, a_e, yv.reshape(em.sizes((bt, nn, m))), 1 - tb, 1 - ta)
        return
    tmp = em.temp(bt * m * nn, dt)
    gemm(a_e, b_e, tmp.reshape(em.sizes((bt, m, nn))), ta, tb)
    order = batch + ms + ns
    yv = em.write(y)
    _permute(em, tmp, [dims[c] for c in order], [order.index(c) for c in out], dt, yv)
