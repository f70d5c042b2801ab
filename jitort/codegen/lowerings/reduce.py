"""CPU lowerings: reductions.

A float reduction over one contiguous run of axes calls the tuned ``_reduce.reduce3d``; any
other reduction (axes in several runs, integer data) gets a generated loop nest over the
canonical view of the input (size-1 axes dropped, neighbouring axes with the same
reduced/kept status merged), reading ``x`` once in memory order.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ..calls import KernelModule
from ..elementwise import FLOATS, lit, tname
from ..registry import Unlowerable, lowering
from .common import (_axis, _prod)

if TYPE_CHECKING:
    from ..emitter import Emitter

_reduce = KernelModule("reduce")


REDUCE_KIND = {"ReduceSum": 0, "ReduceMean": 1, "ReduceMax": 2, "ReduceMin": 3, "ReduceProd": 4,
               "ReduceL1": 5, "ReduceL2": 6, "ReduceLogSum": 7, "ReduceLogSumExp": 8,
               "ReduceSumSquare": 9}

_INTS = tuple(np.dtype(t) for t in (np.int32, np.int64))
#: integer element types per op (as onnxruntime's CPU provider registers them)
_INT_OK = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
           "ReduceL2", "ReduceSumSquare", "ReduceLogSum"}


#: elements from which a generated reduction runs its outer rows in a prange (at more than one
#: thread; 4x below its value under Numba's TBB layer, as a region's cost fell:
#: kernels/cpu/workers.py)
_PAR_ELEMS = 1 << 15


def _axes_from_input(n: Node) -> bool:
    return n.since_version >= (13 if n.op_type == "ReduceSum" else 18)


#: 8-bit integers: ReduceMax/ReduceMin only (as onnxruntime registers them)
_BYTES = (np.dtype(np.int8), np.dtype(np.uint8))
#: bool: ReduceMax/ReduceMin only (opset 20): any / all, False / True over an empty set
_BOOL = np.dtype(np.bool_)


def _reduce_ok(n: Node) -> bool:
    x, y = n.inputs[0], n.outputs[0]
    if x.dtype is None or y.dtype is None or x.dtype != y.dtype:
        return False
    dt = np.dtype(x.dtype)
    return dt in FLOATS or (dt in _INTS and n.op_type in _INT_OK) or (
        dt in _BYTES + (_BOOL,) and n.op_type in ("ReduceMax", "ReduceMin"))


def canonical_runs(shape, axes) -> list[tuple[int, bool]]:
    """``shape`` as runs of (size, reduced): axes of static size 1 dropped, neighbours with the
    same status merged. Shared with MeanVarianceNormalization. A symbolic size is never tested
    for 1: that would make a guard, and a new input shape with that dim 1 would lower to
    another kernel (one compiled driver serves every shape; tests/test_dynamic.py)."""
    from ..symbolic import Sym
    runs: list[list] = []
    for k, d in enumerate(shape):
        if not isinstance(d, Sym) and d == 1:
            continue
        red = k in axes
        if runs and runs[-1][1] == red:
            runs[-1][0] = runs[-1][0] * d
        else:
            runs.append([d, red])
    return [(s, r) for s, r in runs]


def reduce_axes(em: Emitter, n: Node, rank: int) -> list[int] | None:
    """The sorted reduced axes, or None for a no-op (empty axes with noop_with_empty_axes)."""
    if _axes_from_input(n):
        av = n.input(1)
        if av is None:
            axes = []
        else:
            val = av.const if av.is_const else em.hostvals.get(id(av))
            if val is None:
                raise Unlowerable(n, "reduction axes not known ahead")
            axes = np.asarray(val).astype(np.int64).reshape(-1).tolist()
    else:
        axes = list(n.attrs.get("axes", None) or [])
    if not axes:
        if n.attrs.get("noop_with_empty_axes", 0) and _axes_from_input(n):
            return None
        axes = list(range(rank))
    return sorted({_axis(int(a), rank) for a in axes})


@lowering(*REDUCE_KIND, supports=_reduce_ok)
def lower_reduce(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    rank = len(shape)
    axes = reduce_axes(em, n, rank)
    if axes is None:
        em.alias(y, x)
        return
    runs = canonical_runs(shape, axes)
    red = [k for k, (_, r) in enumerate(runs) if r]
    if np.dtype(x.dtype) in FLOATS and len(red) == 1:
        k = red[0]
        o = _prod([s for s, _ in runs[:k]])
        i = _prod([s for s, _ in runs[k + 1:]])
        yv = em.write(y)
        xv = em.shaped(x, (o, runs[k][0], i))
        em.call(_reduce.reduce3d, xv, yv.reshape(em.sizes((o, i))), REDUCE_KIND[n.op_type])
        return
    if not runs:
        runs = [(1, False)]
    flags = tuple(r for _, r in runs)
    sizes = [s for s, _ in runs]
    par = em.split("reduce_par", n, 0 if flags[0] else _prod(sizes), _PAR_ELEMS,
                   sizes[0]) and not flags[0]
    src = reduce_source(n.op_type, np.dtype(x.dtype), flags, par)
    kern = em.generated(f"k_reduce{len(flags)}", src)
    yv = em.write(y)
    xv = em.shaped(x, sizes)
    em.call(kern, xv, yv.reshape(em.sizes([1 if r else s for s, r in runs])))


def reduce_source(op: str, dt: np.dtype, flags: tuple[bool, ...], parallel: bool) -> str:
    """A kernel ``(x, y)`` reducing the axes ``flags`` marks of x (canonical rank) into y (same
    rank, 1 where reduced), in x's memory order."""
    r = len(flags)
    is_f = dt.kind == "f"
    tn = tname(dt)
    if dt == _BOOL:  # ReduceMax / ReduceMin only
        init = lit(op == "ReduceMin", dt)
    elif op in ("ReduceMax", "ReduceLogSumExp"):
        init = lit(-np.inf, dt) if is_f else f"{tn}({np.iinfo(dt).min})"
    elif op == "ReduceMin":
        init = lit(np.inf, dt) if is_f else f"{tn}({np.iinfo(dt).max})"
    elif op == "ReduceProd":
        init = lit(1, dt)
    else:
        init = lit(0, dt)
    nan = " or v != v" if is_f else ""
    step = {"ReduceMax": f"v if (v > acc{nan}) else acc",
            "ReduceMin": f"v if (v < acc{nan}) else acc",
            "ReduceProd": "acc * v", "ReduceL1": "acc + abs(v)", "ReduceL2": "acc + v * v",
            "ReduceSumSquare": "acc + v * v"}.get(op, "acc + v")
    xi = [f"i{k}" for k in range(r)]
    yi = ["0" if flags[k] else f"i{k}" for k in range(r)]
    flags_s = "cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'}"
    L = [f"@njit({flags_s}{', parallel=True' if parallel else ''})", "def __KNAME__(x, y):",
         f"    {', '.join(f'n{k}' for k in range(r))}, = x.shape",
         "    yf = y.reshape(-1)",
         "    for i in range(yf.shape[0]):",
         f"        yf[i] = {init}"]
    cnt = " * ".join(f"n{k}" for k in range(r) if flags[k]) or "1"

    def nest(body_step: str, pre: str | None = None):
        ind = "    "
        out = []
        for k in range(r):
            rng = "prange" if (parallel and k == 0) else "range"
            if k == r - 1 and flags[k]:
                out.append(f"{ind}acc = y[{', '.join(yi)}]")
            out.append(f"{ind}for i{k} in {rng}(n{k}):")
            ind += "    "
        out.append(f"{ind}v = x[{', '.join(xi)}]")
        if pre:
            out.append(f"{ind}v = {pre}")
        if flags[-1]:
            out.append(f"{ind}acc = {body_step}")
            out.append(f"{ind[:-4]}y[{', '.join(yi)}] = acc")
        else:
            out.append(f"{ind}acc = y[{', '.join(yi)}]")
            out.append(f"{ind}y[{', '.join(yi)}] = {body_step}")
        return out

    if op == "ReduceLogSumExp":
        L += nest("v if v > acc else acc")
        L += ["    m = np.empty_like(y)", "    mf = m.reshape(-1)",
              "    for i in range(yf.shape[0]):",
              f"        mf[i] = yf[i] if abs(yf[i]) < {lit(np.inf, dt)} else {lit(0, dt)}",
              f"        yf[i] = {lit(0, dt)}"]
        L += nest("acc + v", pre=f"_m.fexp(v - m[{', '.join(yi)}])")
        L += ["    for i in range(yf.shape[0]):", "        yf[i] = mf[i] + np.log(yf[i])"]
        return "\n".join(L) + "\n"
    L += nest(step)
    fin = None
    if op == "ReduceMean":
        # integers: C division (truncates toward zero); an empty set gives 0: as onnxruntime
        fin = (f"yf[i] / {tn}(max({cnt}, 1))" if is_f else
               f"{tn}(abs(yf[i]) // max({tn}({cnt}), {tn}(1))) * ({tn}(-1) if yf[i] < 0 else {tn}(1))")
    elif op == "ReduceL2":
        fin = "np.sqrt(yf[i])" if is_f else f"{tn}(np.sqrt(np.float64(yf[i])))"
    elif op == "ReduceLogSum":
        fin = "np.log(yf[i])" if is_f else f"{tn}(np.log(np.float64(yf[i])))"
    if fin:
        L += ["    for i in range(yf.shape[0]):", f"        yf[i] = {fin}"]
    return "\n".join(L) + "\n"
