"""CPU lowerings: Pad (constant, reflect, edge, wrap), Tile, DepthToSpace, SpaceToDepth, Trilu, EyeLike, Range, ConstantOfShape, CenterCropPad, ReverseSequence.

Kernels: ``jitort.kernels.cpu.shape_ops`` (alias ``_shape_ops`` in generated drivers).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ..elementwise import lit
from ..registry import Unlowerable, lowering
from ..symbolic import concrete
from .common import _axis, _plain, _prod

if TYPE_CHECKING:
    from ..cpu import Emitter

#: output elements from which a Pad copy runs in parallel (a prange launch costs ~3 us; a
#: plane copy of 128K floats ~30-60 us)
_PAR_PAD = 1 << 17


def _str(v, default: str) -> str:
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else str(v)


def _host(em: Emitter, n: Node, v):
    """The contents of value input ``v`` (a constant or a host-known value), or Unlowerable."""
    if v is None:
        return None
    got = v.const if v.is_const else em.hostvals.get(id(v))
    if got is None:
        raise Unlowerable(n, f"{v.name} is not known ahead")
    return np.asarray(got)


# --- Pad -------------------------------------------------------------------------------------

def _pad_params(em: Emitter, n: Node, rank: int) -> tuple[list[int], list[int]]:
    """Begin and end pads per axis (negative = crop) of a Pad node of any opset."""
    if n.since_version >= 11:
        pads = _host(em, n, n.inputs[1]).astype(np.int64).reshape(-1).tolist()
        axes_v = _host(em, n, n.input(3)) if n.since_version >= 18 else None
        axes = (list(range(rank)) if axes_v is None
                else [_axis(int(a), rank) for a in axes_v.reshape(-1).tolist()])
    else:
        pads = list(n.attrs.get("pads", n.attrs.get("paddings", [])))
        axes = list(range(rank))
    na = len(axes)
    if len(pads) != 2 * na or any(not 0 <= a < rank for a in axes) or len(set(axes)) != na:
        raise Unlowerable(n, f"pads {pads} / axes {axes} do not match rank {rank}")
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = int(pads[i]), int(pads[i + na])
    return begin, end


def _pad_kernel(rank: int, padded: list[bool], mode: str, par: bool) -> str:
    """Source of a Pad kernel over canonical views: ``y`` (Y0, ..., Y[L-1], YL * I) and ``x``
    (X0, ..., X[L-1], XL * I), where the last axis joins the last padded axis L with the
    unpadded inner block of I elements. Per padded axis k: ``b{k}`` (>= 0, the begin pad),
    ``c{k}`` (>= 0, elements cropped at the start) and ``n{k}`` (the input extent left after
    cropping, which the pad modes refer to, as onnxruntime crops first); then ``yl`` (YL),
    ``inner`` (I) and ``val`` (the constant). Rows of the last axis are copied as one contiguous slice for the
    interior and block by block for the borders; ``par`` runs the two outermost axes (or the
    only one) in a prange."""
    L = rank - 1
    args = "".join(f"b{k}, c{k}, n{k}, " for k in range(rank) if padded[k])
    lines = ["from jitort.kernels.cpu.shape_ops import pad_row as _pad_row, pad_src as _pad_src",
             "", "",
             f"@njit(cache=True, error_model='numpy'{', parallel=True' if par else ''})",
             f"def __KNAME__(y, x, {args}yl, inner, val):"]

    def src(k: int, ind: str, depth: int | None = None) -> list[str]:
        """Lines mapping output index o{k} to input index i{k}; in constant mode an index out
        of range fills y[o0, ..., o{depth}] (default: depth k) and continues."""
        if not padded[k]:
            return [f"{ind}i{k} = o{k}"]
        if mode == "constant":
            sub = ", ".join(f"o{j}" for j in range((k if depth is None else depth) + 1))
            return [f"{ind}i{k} = o{k} - b{k}",
                    f"{ind}if i{k} < 0 or i{k} >= n{k}:",
                    f"{ind}    f = y[{sub}].reshape(-1)",
                    f"{ind}    for t in range(f.shape[0]):",
                    f"{ind}        f[t] = val",
                    f"{ind}    continue",
                    f"{ind}i{k} += c{k}"]
        return [f"{ind}i{k} = _pad_src(o{k} - b{k}, n{k}, {_MODES[mode]}) + c{k}"]

    ind = "    "
    lines.append(f"{ind}if y.size == 0:")
    lines.append(f"{ind}    return")
    if par and L >= 2:
        lines += [f"{ind}y1 = y.shape[1]", f"{ind}for t01 in prange(y.shape[0] * y1):",
                  f"{ind}    o0 = t01 // y1", f"{ind}    o1 = t01 - o0 * y1"]
        ind += "    "
        lines += src(0, ind, 1) + src(1, ind)
        start = 2
    else:
        start = 0
    for k in range(start, L):
        rng = "prange" if par and k == 0 else "range"
        lines.append(f"{ind}for o{k} in {rng}(y.shape[{k}]):")
        ind += "    "
        lines += src(k, ind)
    pre = "".join(f"o{k}, " for k in range(L))
    prei = "".join(f"i{k}, " for k in range(L))
    yr, xr = (f"y[{pre[:-2]}]", f"x[{prei[:-2]}]") if L else ("y", "x")
    lines += [f"{ind}_pad_row({yr}, {xr}, c{L}, b{L}, n{L}, yl, inner, val, {_MODES[mode]})"]
    return "\n".join(lines) + "\n"


_MODES = {"constant": 0, "reflect": 1, "edge": 2, "wrap": 3}


def _pad_supported(n: Node) -> bool:
    if not _plain(n):
        return False
    return _str(n.attrs.get("mode"), "constant") in _MODES


@lowering("Pad", supports=_pad_supported)
def lower_pad(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    xs = em.shape(x)
    rank = len(xs)
    mode = _str(n.attrs.get("mode"), "constant")
    begin, end = _pad_params(em, n, rank)
    if rank == 0 or not any(begin) and not any(end):
        em.alias(y, x)
        return
    ys = em.shape(y)
    crop = [max(-begin[k], 0) + max(-end[k], 0) for k in range(rank)]
    for k in range(rank):
        if crop[k] and concrete(xs[k] - crop[k]) < 0:
            raise Unlowerable(n, f"pads crop more than the {xs[k]} elements of axis {k}")
    if mode != "constant":
        for k in range(rank):
            if (begin[k] > 0 or end[k] > 0) and concrete(xs[k] - crop[k]) <= 0 \
                    and concrete(ys[k]) > 0:
                raise Unlowerable(n, f"{mode} padding of an empty axis {k}")
    # constant value: input 2 (opset >= 11) or the ``value`` attribute
    dt = np.dtype(y.dtype)
    cv = n.input(2) if n.since_version >= 11 else None
    if cv is not None and _prod(em.shape(cv)) != 1:
        cv = None if concrete(_prod(em.shape(cv))) == 0 else cv
        if cv is not None:
            raise Unlowerable(n, "constant_value is not a scalar")
    if cv is not None:
        val = f"{em.arr(cv)}.reshape({em.tuple_expr((1,))})[0]"
    else:
        v = float(n.attrs.get("value", 0.0)) if n.since_version < 11 else 0
        val = lit(bool(v) if dt == np.bool_ else v, dt)
    # canonical form: runs of unpadded axes merged; the unpadded tail is the inner block
    padded = [bool(begin[k] or end[k]) for k in range(rank)]
    last = max(k for k in range(rank) if padded[k])
    inner = _prod(xs[last + 1:])
    cx, cy, cp, cargs = [], [], [], []  # canonical sizes, padded flags, (b, c, n) per padded

    def axis(k, size_x, size_y):
        cx.append(size_x), cy.append(size_y), cp.append(True)
        cargs.append((max(begin[k], 0), max(-begin[k], 0), xs[k] - crop[k]))

    k = 0
    while k < last:
        if padded[k]:
            axis(k, xs[k], ys[k])
            k += 1
            continue
        j = k
        while j < last and not padded[j]:
            j += 1
        size = _prod(xs[k:j])
        cx.append(size), cy.append(size), cp.append(False)
        k = j
    axis(last, xs[last] * inner, ys[last] * inner)
    r = len(cx)
    key = ("pad_par", id(n))
    if key not in em.memo:
        em.memo[key] = concrete(_prod(ys)) >= _PAR_PAD and r >= 2
    kname = em.kernel(f"k_pad{r}_{mode}", _pad_kernel(r, cp, mode, em.memo[key]))
    yv = em.out(y)
    bargs = "".join(f"{em.dim(b)}, {em.dim(c)}, {em.dim(m)}, " for b, c, m in cargs)
    em.call(f"{kname}({yv}.reshape({em.tuple_expr(cy)}), {em.arr(x)}.reshape({em.tuple_expr(cx)}), "
            f"{bargs}{em.dim(ys[last])}, {em.dim(inner)}, {val})")
