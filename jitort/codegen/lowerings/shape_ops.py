"""CPU lowerings: Pad (constant, reflect, edge, wrap), Tile, DepthToSpace, SpaceToDepth, Trilu, EyeLike, Range, ConstantOfShape, CenterCropPad, ReverseSequence.

Kernels: ``jitort.kernels.cpu.shape_ops`` (alias ``_shape_ops`` in generated drivers).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ..calls import KernelModule, Scalar, View
from ..registry import Unlowerable, lowering
from ..symbolic import concrete
from .common import _axis, _plain, _prod, _words, host_value, input_shape

if TYPE_CHECKING:
    from ..emitter import Emitter

_shape_ops = KernelModule("shape_ops")

#: output elements from which a Pad copy runs in parallel (a prange launch costs ~3 us; a
#: plane copy of 128K floats ~30-60 us)
_PAR_PAD = 1 << 17


def _str(v, default: str) -> str:
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else str(v)


def _lit(value, dt) -> Scalar | bool:
    """A typed constant of ``dt`` (a bool as it is)."""
    dt = np.dtype(dt)
    if dt == np.bool_:
        return bool(value)
    return Scalar(dt.name, float(value) if dt.kind == "f" else int(value))


# --- Pad -------------------------------------------------------------------------------------

def _pad_params(em: Emitter, n: Node, rank: int) -> tuple[list[int], list[int]]:
    """Begin and end pads per axis (negative = crop) of a Pad node of any opset."""
    if n.since_version >= 11:
        pads = host_value(em, n, n.inputs[1]).astype(np.int64).reshape(-1).tolist()
        axes_v = host_value(em, n, n.input(3)) if n.since_version >= 18 else None
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


def _pad_kernel(rank: int, padded: list[bool], par: bool) -> str:
    """Source of a Pad kernel over canonical views: ``y`` (Y0, ..., Y[L-1], YL * I) and ``x``
    (X0, ..., X[L-1], XL * I), where the last axis joins the last padded axis L with the
    unpadded inner block of I elements. Per padded axis k: ``b{k}`` (>= 0, the begin pad),
    ``c{k}`` (>= 0, elements cropped at the start) and ``n{k}`` (the input extent left after
    cropping, which the pad modes refer to, as onnxruntime crops first); then ``yl`` (YL),
    ``inner`` (I), ``val`` (the constant) and ``mode`` (0 constant, 1 reflect, 2 edge, 3 wrap:
    an argument, so that one compiled kernel serves every mode). Rows of the last axis are
    copied as one contiguous slice for the interior and block by block for the borders; ``par``
    runs the two outermost axes (or the only one) in a prange."""
    L = rank - 1
    args = "".join(f"b{k}, c{k}, n{k}, " for k in range(rank) if padded[k])
    lines = ["from jitort.kernels.cpu.shape_ops import pad_row as _pad_row, pad_src as _pad_src",
             "", "",
             f"@njit(cache=True, error_model='numpy'{', parallel=True' if par else ''})",
             f"def __KNAME__(y, x, {args}yl, inner, val, mode):"]

    def src(k: int, ind: str, depth: int | None = None) -> list[str]:
        """Lines mapping output index o{k} to input index i{k}; in constant mode an index out
        of range fills y[o0, ..., o{depth}] (default: depth k) and continues."""
        if not padded[k]:
            return [f"{ind}i{k} = o{k}"]
        sub = ", ".join(f"o{j}" for j in range((k if depth is None else depth) + 1))
        return [f"{ind}i{k} = o{k} - b{k}",
                f"{ind}if mode == 0:",
                f"{ind}    if i{k} < 0 or i{k} >= n{k}:",
                f"{ind}        f = y[{sub}].reshape(-1)",
                f"{ind}        for t in range(f.shape[0]):",
                f"{ind}            f[t] = val",
                f"{ind}        continue",
                f"{ind}    i{k} += c{k}",
                f"{ind}else:",
                f"{ind}    i{k} = _pad_src(i{k}, n{k}, mode) + c{k}"]

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
    lines += [f"{ind}_pad_row({yr}, {xr}, c{L}, b{L}, n{L}, yl, inner, val, mode)"]
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
        val = _scalar(em, cv)
    else:
        v = float(n.attrs.get("value", 0.0)) if n.since_version < 11 else 0
        val = _lit(bool(v) if dt == np.bool_ else v, dt)
    _emit_pad(em, n, x, y, begin, end, mode, val)


def _emit_pad(em: Emitter, n: Node, x, y, begin, end, mode: str, val: View | Scalar | bool) -> None:
    """The Pad kernel call for begin/end pads per axis (negative: crop, first) and ``val``, the
    constant (a typed constant or the element of a view). Shared by Pad and CenterCropPad."""
    xs, ys = em.shape(x), em.shape(y)
    rank = len(xs)
    crop = [max(-begin[k], 0) + max(-end[k], 0) for k in range(rank)]
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
    par = em.split("pad_par", n, _prod(ys), _PAR_PAD, r)
    kern = em.generated(f"k_pad{r}", _pad_kernel(r, cp, par))
    yv = em.write(y).reshape(em.sizes(cy))
    xv = em.shaped(x, cx)
    bargs = [em.size(s) for bcm in cargs for s in bcm]
    em.call(kern, yv, xv, *bargs, em.size(ys[last]), em.size(inner), val, _MODES[mode])


def _scalar(em: Emitter, v) -> View:
    """The one element of a (scalar or 1-element) input, read at run time."""
    return em.shaped(v, (1,)).item()


def _once(em: Emitter, n: Node, tag: str, cond) -> bool:
    """A per-node decision on sizes taken once (memo), not a guard on every shape."""
    key = (tag, id(n))
    if key not in em.memo:
        em.memo[key] = bool(cond())
    return em.memo[key]


# --- CenterCropPad -------------------------------------------------------------------------------

@lowering("CenterCropPad", supports=_plain)
def lower_center_crop_pad(em: Emitter, n: Node) -> None:
    """Crop or zero-pad each listed axis around its center: a Pad with value 0 whose negative
    pads crop (the larger half of an odd difference at the end, as onnx's definition says)."""
    x, y = n.inputs[0], n.outputs[0]
    xs = em.shape(x)
    rank = len(xs)
    sizes = host_value(em, n, n.inputs[1]).astype(np.int64).reshape(-1).tolist()
    axes = n.attrs.get("axes")
    axes = list(range(rank)) if axes is None else [_axis(int(a), rank) for a in axes]
    if len(sizes) != len(axes) or any(not 0 <= a < rank for a in axes):
        raise Unlowerable(n, f"shape {sizes} does not match axes {axes} of rank {rank}")
    begin, end = [0] * rank, [0] * rank
    for a, s in zip(axes, sizes):
        d = concrete(xs[a])
        if s < d:
            begin[a] = -((d - s) // 2)
            end[a] = -(d - s) + (d - s) // 2
        elif s > d:
            begin[a] = (s - d) // 2
            end[a] = (s - d) - (s - d) // 2
    if not any(begin) and not any(end):
        em.alias(y, x)
        return
    _emit_pad(em, n, x, y, begin, end, "constant", _lit(0, y.dtype))


# --- Tile --------------------------------------------------------------------------------------

def _broadcast_kernel(kinds: list[str], par: bool) -> str:
    """Copy kernel ``y[...] = x[...]``: ``kinds[k]`` is "x" where y's axis k indexes x (in
    order) and "r" where it repeats; the last axis is a contiguous row of both. A repeat axis
    just before the row replicates the row chunk by chunk (16 KB of x stays in L1 for all its
    copies: 8 copies of a 384 KB row took 46 us row by row, 31 us by chunks)."""
    r = len(kinds)
    tail_rep = r >= 2 and kinds[-2] == "r"
    nloop = r - 2 if tail_rep else r - 1  # loops over whole rows
    lines = [f"@njit(cache=True, error_model='numpy'{', parallel=True' if par else ''})",
             "def __KNAME__(y, x):"]
    ind = "    "
    for k in range(nloop):
        rng = "prange" if par and k == 0 else "range"
        lines.append(f"{ind}for a{k} in {rng}(y.shape[{k}]):")
        ind += "    "
    xi = ", ".join(f"a{k}" for k in range(nloop) if kinds[k] == "x")
    lines.append(f"{ind}xr = x[{xi}]" if xi else f"{ind}xr = x")
    if not tail_rep:
        yi = ", ".join(f"a{k}" for k in range(r - 1))
        lines += [f"{ind}yr = y[{yi}]" if r > 1 else f"{ind}yr = y",
                  f"{ind}for t in range(np.uint64(xr.shape[0])):",
                  f"{ind}    yr[t] = xr[t]"]
        return "\n".join(lines) + "\n"
    rng = "prange" if par and nloop == 0 else "range"
    yi = "".join(f"a{k}, " for k in range(nloop))
    lines += [f"{ind}n = xr.shape[0]",
              f"{ind}for c in {rng}((n + 4095) // 4096):",
              f"{ind}    s = np.uint64(c * 4096)",
              f"{ind}    e = np.uint64(min(c * 4096 + 4096, n))",
              f"{ind}    for a{r - 2} in range(y.shape[{r - 2}]):",
              f"{ind}        yr = y[{yi}a{r - 2}]",
              f"{ind}        for t in range(s, e):",
              f"{ind}            yr[t] = xr[t]"]
    return "\n".join(lines) + "\n"


@lowering("Tile", supports=lambda n: _words(n) and n.since_version >= 6)
def lower_tile(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    xs, ys = em.shape(x), em.shape(y)
    rank = len(xs)
    reps = host_value(em, n, n.inputs[1]).astype(np.int64).reshape(-1).tolist()
    if len(reps) != rank or any(r < 0 for r in reps):
        raise Unlowerable(n, f"repeats {reps} for rank {rank}")
    if rank == 0 or all(r == 1 for r in reps):
        em.alias(y, x)
        return
    yv = em.write(y)
    if 0 in reps or concrete(_prod(xs)) == 0:
        return  # an empty output: nothing to write
    # y viewed as (R0, X0, R1, X1, ...): a repeat axis before each repeated input axis, runs of
    # unrepeated axes merged, the unrepeated tail joined to the last input axis as the row
    last = max(k for k in range(rank) if reps[k] != 1)
    inner = _prod(xs[last + 1:])
    kinds, ydims, xdims = [], [], []
    k = 0
    while k <= last:
        if reps[k] != 1:
            kinds += ["r", "x"]
            ydims += [reps[k], xs[k] * (inner if k == last else 1)]
            xdims.append(xs[k] * (inner if k == last else 1))
            k += 1
            continue
        j = k
        while j <= last and reps[j] == 1:
            j += 1
        kinds.append("x")
        ydims.append(_prod(xs[k:j]))
        xdims.append(_prod(xs[k:j]))
        k = j
    par = _once(em, n, "tile_par", lambda: concrete(_prod(ys)) >= _PAR_PAD
                and concrete(ydims[0]) >= 2)
    kern = em.generated(f"k_tile{len(kinds)}", _broadcast_kernel(kinds, par))
    y2 = yv.reshape(em.sizes(ydims))
    em.call(kern, y2, em.shaped(x, xdims))


# --- DepthToSpace / SpaceToDepth -----------------------------------------------------------------

def _blocksize(n: Node, xs) -> int:
    if len(xs) != 4:
        raise Unlowerable(n, f"{n.op_type} of a rank-{len(xs)} input")
    b = int(n.attrs.get("blocksize", 0))
    if b < 1:
        raise Unlowerable(n, f"blocksize {b}")
    return b


@lowering("DepthToSpace", supports=_plain)
def lower_depth_to_space(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    xs = em.shape(x)
    b = _blocksize(n, xs)
    crd = n.since_version >= 11 and _str(n.attrs.get("mode"), "DCR") == "CRD"
    nn, c, h, w = xs
    co = c // (b * b)
    xd = (nn, co, b, b, h, w) if crd else (nn, b, b, co, h, w)
    yv = em.write(y)
    par = _once(em, n, "d2s_par", lambda: concrete(_prod(xs)) >= _PAR_PAD
                and concrete(nn * co) >= 2)
    xv = em.shaped(x, xd)
    em.call(_shape_ops.space6_par if par else _shape_ops.space6,
            yv.reshape(em.sizes((nn, co, h, b, w, b))), xv, crd, False)


@lowering("SpaceToDepth", supports=_plain)
def lower_space_to_depth(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    xs = em.shape(x)
    b = _blocksize(n, xs)
    nn, c, h, w = xs
    ho, wo = h // b, w // b
    crd = n.since_version >= 28 and _str(n.attrs.get("mode"), "DCR") == "CRD"
    yd = (nn, c, b, b, ho, wo) if crd else (nn, b, b, c, ho, wo)
    yv = em.write(y)
    par = _once(em, n, "s2d_par", lambda: concrete(_prod(xs)) >= _PAR_PAD
                and concrete(nn * c) >= 2)
    xv = em.shaped(x, (nn, c, ho, b, wo, b))
    em.call(_shape_ops.space6_par if par else _shape_ops.space6, xv,
            yv.reshape(em.sizes(yd)), crd, True)


# --- Trilu, ReverseSequence ----------------------------------------------------------------------

@lowering("Trilu", supports=_plain)
def lower_trilu(em: Emitter, n: Node) -> None:
    """k is read at run time (a constant, host value or computed scalar all work)."""
    x, y = n.inputs[0], n.outputs[0]
    xs = input_shape(em, n, 2)
    kv = n.input(1)
    k = _scalar(em, kv) if kv is not None else 0
    upper = bool(n.attrs.get("upper", 1))
    d3 = em.sizes((_prod(xs[:-2]), xs[-2], xs[-1]))
    yv = em.write(y)
    par = _once(em, n, "trilu_par", lambda: concrete(_prod(xs)) >= _PAR_PAD)
    em.call(_shape_ops.trilu_par if par else _shape_ops.trilu, em.read(x).reshape(d3),
            yv.reshape(d3), k, upper)


@lowering("ReverseSequence", supports=lambda n: _plain(n)
          and np.dtype(n.inputs[1].dtype) in (np.dtype(np.int64), np.dtype(np.int32)))
def lower_reverse_sequence(em: Emitter, n: Node) -> None:
    x, lens, y = n.inputs[0], n.inputs[1], n.outputs[0]
    xs = em.shape(x)
    ta, ba = int(n.attrs.get("time_axis", 0)), int(n.attrs.get("batch_axis", 1))
    if len(xs) < 2 or {ta, ba} != {0, 1}:
        raise Unlowerable(n, f"time_axis {ta} / batch_axis {ba} of a rank-{len(xs)} input")
    if concrete(_prod(em.shape(lens))) != concrete(xs[ba]):
        raise Unlowerable(n, f"sequence_lens of {em.shape(lens)} for batch {xs[ba]}")
    d3 = em.sizes((xs[0], xs[1], _prod(xs[2:])))
    yv = em.write(y)
    xv = em.read(x).reshape(d3)
    em.call(_shape_ops.reverse_sequence, xv, em.shaped(lens, (xs[ba],)), yv.reshape(d3), ta == 0)


# --- EyeLike, Range, ConstantOfShape -------------------------------------------------------------

@lowering("EyeLike", supports=_plain)
def lower_eye_like(em: Emitter, n: Node) -> None:
    y = n.outputs[0]
    ys = em.shape(y)
    if len(ys) != 2:
        raise Unlowerable(n, f"EyeLike of a rank-{len(ys)} input")
    yv = em.write(y)
    em.call(_shape_ops.eye, yv, int(n.attrs.get("k", 0)))


@lowering("Range", supports=lambda n: _plain(n) and n.since_version >= 11)
def lower_range(em: Emitter, n: Node) -> None:
    """start and delta read at run time; the length comes from the shape pass."""
    y = n.outputs[0]
    yv = em.write(y)
    start = _scalar(em, n.inputs[0])
    em.call(_shape_ops.arange, yv, start, _scalar(em, n.inputs[2]))


def _cos_value(n: Node):
    value = n.attrs.get("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value)
    return value if value.size == 1 else None


@lowering("ConstantOfShape", supports=lambda n: _plain(n) and _cos_value(n) is not None)
def lower_constant_of_shape(em: Emitter, n: Node) -> None:
    y = n.outputs[0]
    ys = em.shape(y)
    v = _cos_value(n).reshape(-1)[0]
    dt = np.dtype(y.dtype)
    val = _lit(v, dt)
    yv = em.write(y)
    em.call(_shape_ops.fill, yv.reshape(em.sizes((_prod(ys),))), val)
