"""CPU lowerings: Resize and Upsample (nearest, linear, cubic; every coordinate transformation), GridSample, AffineGrid.

Kernels: ``jitort.kernels.cpu.resize`` (alias ``_resize`` in generated drivers).

Resize is separable. Axes whose mapping is the identity (scale 1, same size, a transformation
that maps i to i) are dropped; the rest are the *active* axes. Nearest or linear over two active
axes that are innermost (NCHW's H and W) runs as one 2-D kernel on a (P, H, W) view; everything
else (one axis, three axes, cubic, antialias, axes in the middle) runs one pass per active axis
on (O, L, I) views, downscaling axes first, through workspace scratch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ..calls import KernelModule, Scalar
from ..registry import Unlowerable, lowering
from ..symbolic import concrete
from .common import _F, _PLAIN, _is_float, _prod, host_value

if TYPE_CHECKING:
    from ..emitter import Emitter

_data = KernelModule("data")
_resize = KernelModule("resize")

_MODES = {"nearest": 0, "linear": 1, "bilinear": 1, "trilinear": 1, "cubic": 2, "bicubic": 2}
_COORDS = {"half_pixel": 0, "half_pixel_symmetric": 1, "pytorch_half_pixel": 2,
           "align_corners": 3, "asymmetric": 4, "tf_half_pixel_for_nn": 5,
           "tf_crop_and_resize": 6}
_NEAREST = {"round_prefer_floor": 0, "round_prefer_ceil": 1, "floor": 2, "ceil": 3}
#: output elements from which the prange variants run, and the same for nearest (both 4x
#: below their values under Numba's TBB layer, as a region's cost fell: kernels/cpu/workers.py)
_PAR_MIN = 1 << 14
_PAR_MIN_COPY = 1 << 20


def _s(v, default: str) -> str:
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else str(v)


def _resize_ok(n: Node) -> bool:
    x, y = n.inputs[0], n.outputs[0]
    if x is None or y is None or x.dtype is None or y.dtype is None:
        return False
    dt = np.dtype(x.dtype)
    if dt not in _PLAIN or np.dtype(y.dtype) != dt:
        return False
    mode = _MODES.get(_s(n.attrs.get("mode"), "nearest"))
    return mode is not None and (mode == 0 or dt in _F)


def _value(em: Emitter, n: Node, i: int):
    """Input ``i`` as a numpy array; None when omitted or empty; Unlowerable when unknown."""
    val = host_value(em, n, n.input(i), f"input {i} of Resize")
    if val is None:
        return None
    val = val.reshape(-1)
    return val if val.size else None


def _params(em: Emitter, n: Node, xs):
    """Per-axis (resized, scale (<= 0: out/in), roi start, roi end) and the node's codes."""
    at = n.attrs
    rank = len(xs)
    mode = _MODES[_s(at.get("mode"), "nearest")]
    old = n.op_type == "Upsample" or n.since_version < 11
    if old:
        coord, nearest = 4, 4
        if n.op_type == "Upsample" and n.since_version < 9:
            scales = np.asarray(at["scales"], np.float32)
        else:
            scales = _value(em, n, 1)
        if scales is None or scales.size != rank:
            raise Unlowerable(n, "Resize/Upsample needs one scale per axis")
        return ([(True, float(s), 0.0, 1.0) for s in scales.astype(np.float32)],
                mode, coord, nearest, -0.75, False, 0.0, False)
    coord = _COORDS.get(_s(at.get("coordinate_transformation_mode"), "half_pixel"))
    nearest = _NEAREST.get(_s(at.get("nearest_mode"), "round_prefer_floor"))
    if coord is None or nearest is None:
        raise Unlowerable(n, "unknown coordinate_transformation_mode / nearest_mode")
    axes = at.get("axes") if n.since_version >= 18 else None
    axes = list(range(rank)) if axes is None else [a + rank if a < 0 else a for a in axes]
    if sorted(set(axes)) != sorted(axes) or any(a < 0 or a >= rank for a in axes):
        raise Unlowerable(n, f"bad axes {axes}")
    sizes = _value(em, n, 3)
    scales = None if sizes is not None else _value(em, n, 2)
    if sizes is None and scales is None:
        raise Unlowerable(n, "Resize needs scales or sizes")
    k = len(axes)
    if (scales if sizes is None else sizes).size != k:
        raise Unlowerable(n, "scales/sizes do not match the resized axes")
    roi = _value(em, n, 1) if coord == 6 else None
    if roi is not None and roi.size != 2 * k:
        raise Unlowerable(n, f"roi has {roi.size} values for {k} axes")
    per = [(False, 1.0, 0.0, 1.0)] * rank
    policy = _s(at.get("keep_aspect_ratio_policy"), "stretch") if n.since_version >= 18 else "stretch"
    if sizes is not None and policy != "stretch":  # one scale for all axes, as onnxruntime
        ratios = [np.float32(sizes[j]) / np.float32(max(concrete(xs[a]), 1)) for j, a in enumerate(axes)]
        keep = float(min(ratios) if policy == "not_larger" else max(ratios))
        scales, sizes = np.full(k, keep, np.float32), None
    for j, a in enumerate(axes):
        s = -1.0 if scales is None else float(np.float32(scales[j]))
        if scales is not None and s <= 0:
            raise Unlowerable(n, "non-positive scale")
        rs, re = (0.0, 1.0) if roi is None else (float(np.float32(roi[j])), float(np.float32(roi[k + j])))
        per[a] = (True, s, rs, re)
    cubic_a = float(np.float32(at.get("cubic_coeff_a", -0.75)))
    exclude = bool(at.get("exclude_outside", 0))
    extrap = float(np.float32(at.get("extrapolation_value", 0.0)))
    antialias = bool(at.get("antialias", 0)) and n.since_version >= 18 and mode != 0
    return per, mode, coord, nearest, cubic_a, exclude, extrap, antialias


@lowering("Resize", "Upsample", supports=_resize_ok)
def lower_resize(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    xs, ys = tuple(em.shape(x)), tuple(em.shape(y))
    r = len(xs)
    if len(ys) != r:
        raise Unlowerable(n, "output rank differs")
    per, mode, coord, nearest, cubic_a, exclude, extrap, antialias = _params(em, n, xs)
    if mode != 0 and np.dtype(x.dtype) not in _F:
        raise Unlowerable(n, "linear/cubic Resize of an integer tensor")
    active = []
    for a in range(r):
        resized, s, rs, re = per[a]
        if not resized:
            if xs[a] != ys[a]:
                raise Unlowerable(n, f"axis {a} is not resized but changes size")
            continue
        if xs[a] == 0 and ys[a] != 0:
            raise Unlowerable(n, f"axis {a}: resizing an empty axis to {ys[a]}")
        # an axis of scale 1 keeps its positions in every mode but tf_crop_and_resize (as
        # onnxruntime: under tf_half_pixel_for_nn with a ceil rounding the formula would shift)
        ident = xs[a] == ys[a] and s in (1.0, -1.0) and coord != 6
        if not ident:
            active.append(a)
    if not active or _prod(ys) == 0:
        yv = em.write(y)
        if _prod(ys):
            em.call(_data.copy_flat, em.read(x).flat(), yv.flat())
        else:
            em.read(x)
        return
    # nearest is a copy: memory bound, a second thread pays only on big outputs
    par = em.split("resize_par", n, _prod(ys), _PAR_MIN if mode else _PAR_MIN_COPY)
    ev = Scalar("float64", extrap)
    if (len(active) == 2 and active[1] == active[0] + 1 and mode in (0, 1) and not antialias
            and all(xs[k] == 1 for k in range(active[1] + 1, r))):
        h, w = active
        P = _prod(xs[:h])
        _, sh, rsh, reh = per[h]
        _, sw, rsw, rew = per[w]
        xv = em.shaped(x, (P, xs[h], xs[w]))
        yv = em.write(y).reshape(em.sizes((P, ys[h], ys[w])))
        em.call(_resize.resize2d_par if par else _resize.resize2d, xv, yv, sh, sw, rsh, reh,
                rsw, rew, mode, coord, nearest, ev)
        return
    okey = ("resize_order", id(n))
    if okey not in em.memo:  # shrinking axes first: later passes move fewer elements
        em.memo[okey] = sorted(active, key=lambda a: concrete(ys[a]) / max(concrete(xs[a]), 1))
    order = em.memo[okey]
    cur = list(xs)
    src = em.read(x)
    fn = _resize.resize_pass_par if par else _resize.resize_pass
    for j, a in enumerate(order):
        nxt = list(cur)
        nxt[a] = ys[a]
        O, I = _prod(cur[:a]), _prod(cur[a + 1:])
        xv = src.reshape(em.sizes((O, cur[a], I)))
        dst = em.write(y) if j == len(order) - 1 else em.temp(_prod(nxt), x.dtype)
        yv = dst.reshape(em.sizes((O, ys[a], I)))
        _, s, rs, re = per[a]
        em.call(fn, xv, yv, s, rs, re, mode, coord, nearest, cubic_a, exclude, antialias, ev)
        cur, src = nxt, dst


_GS_MODES = {"nearest": 0, "linear": 1, "bilinear": 1, "cubic": 2, "bicubic": 2}
_GS_PADS = {"zeros": 0, "border": 1, "reflection": 2}


def _gridsample_ok(n: Node) -> bool:
    x, g, y = n.inputs[0], n.inputs[1], n.outputs[0]
    return (all(v is not None and v.dtype is not None and np.dtype(v.dtype) in _F for v in (x, g, y))
            and _s(n.attrs.get("mode"), "bilinear") in _GS_MODES
            and _s(n.attrs.get("padding_mode"), "zeros") in _GS_PADS)


@lowering("GridSample", supports=_gridsample_ok)
def lower_gridsample(em: Emitter, n: Node) -> None:
    x, g, y = n.inputs[0], n.inputs[1], n.outputs[0]
    xs, gs, ys = tuple(em.shape(x)), tuple(em.shape(g)), tuple(em.shape(y))
    D = len(xs) - 2
    if D < 1 or len(gs) != D + 2 or gs[-1] != D or gs[0] != xs[0]:
        raise Unlowerable(n, f"grid {gs} does not match input {xs}")
    mode = _GS_MODES[_s(n.attrs.get("mode"), "bilinear")]
    pad = _GS_PADS[_s(n.attrs.get("padding_mode"), "zeros")]
    align = bool(n.attrs.get("align_corners", 0))
    S, P = _prod(xs[2:]), _prod(gs[1:-1])
    if D > 3:
        raise Unlowerable(n, f"{D}-D GridSample (onnxruntime runs 2-D and 3-D)")
    if mode == 2 and D == 3:
        raise Unlowerable(n, "3-D cubic GridSample (onnxruntime rejects it; no reference to match)")
    if S == 0 and _prod(ys) != 0:
        raise Unlowerable(n, "GridSample of an empty image")
    yv = em.write(y)
    if _prod(ys) == 0:
        em.read(x), em.read(g)
        return
    par = em.split("gs_par", n, _prod(ys) * (1 << D if mode == 1 else 1), _PAR_MIN)
    xv = em.shaped(x, (xs[0], xs[1], S))
    gv = em.shaped(g, (gs[0], P, D))
    em.call(_resize.gridsample_par if par else _resize.gridsample, xv, gv,
            yv.reshape(em.sizes((xs[0], xs[1], P))), em.sizes((1,) * (3 - D) + xs[2:]),
            mode, pad, align)


@lowering("AffineGrid", supports=lambda n: _is_float(n.inputs[0], n.outputs[0]))
def lower_affine_grid(em: Emitter, n: Node) -> None:
    th, y = n.inputs[0], n.outputs[0]
    ts, ys = tuple(em.shape(th)), tuple(em.shape(y))
    D = len(ys) - 2
    if D not in (2, 3) or ts != (ys[0], D, D + 1) or ys[-1] != D:
        raise Unlowerable(n, f"theta {ts} does not match grid {ys}")
    yv = em.write(y)
    if _prod(ys) == 0:
        em.read(th)
        return
    P = _prod(ys[1:-1])
    em.call(_resize.affine_grid, em.read(th), yv.reshape(em.sizes((ys[0], P, D))),
            em.sizes((1,) * (3 - D) + ys[1:-1]), bool(n.attrs.get("align_corners", 0)))
