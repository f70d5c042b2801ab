"""CUDA lowerings of Pad and Resize (kernels: ``jitort.kernels.cuda.resize``).

Without them a Pad or Resize in a GPU model (a decoder's reflect pads, MobileViT's upsampling)
ran on the CPU backend, with a device-to-host copy before it and one back after. The
parameters are read as the CPU lowerings read them (:mod:`..lowerings.shape_ops`,
:mod:`..lowerings.resize`), so both backends agree with each other and with onnxruntime.

Pad (opset 11+): pads (and axes) known at plan time; constant (the value read on the device:
any input, or 0), reflect, edge and wrap; negative pads crop first; rank up to 6.

Resize (opset 11+): scales or sizes known at plan time; ``nearest`` (every nearest_mode) on
any axes of rank up to 6, ``linear`` on two adjacent axes (NCHW's H and W, NHWC's too; the
others must keep scale 1); coordinate modes half_pixel, half_pixel_symmetric,
pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nn. Refused statically, so
the node stays on the CPU: cubic, antialias, exclude_outside, keep_aspect_ratio_policy other
than stretch, the axes attribute, tf_crop_and_resize, linear of integers; at plan time
(Unlowerable): linear Resize of more than two axes or of two apart, nearest of rank above 6,
an empty input axis resized to a non-empty one.
"""
from __future__ import annotations

import numpy as np

from ...ir import Node
from ..calls import KernelModule
from ..cuda_emit import CudaEmitter, _F, _plain, _strides, lowering
from ..lowerings import _prod
from ..lowerings.resize import _COORDS, _MODES, _NEAREST, _s, _value
from ..lowerings.shape_ops import _pad_params
from ..registry import Unlowerable

_resize = KernelModule("resize", package="cuda")

#: kernel rank (``jitort.kernels.cuda.resize.RANK``; not imported: that imports numba.cuda)
_RANK = 6
_PAD_MODES = {"constant": 0, "reflect": 1, "edge": 2, "wrap": 3}
#: coordinate transformations the kernels compute: the CPU's but tf_crop_and_resize
_DEVICE_COORDS = {k: v for k, v in _COORDS.items() if k != "tf_crop_and_resize"}


# --- Pad ---------------------------------------------------------------------------------------

def _pad_ok(n: Node) -> bool:
    return (_plain(n) and n.since_version >= 11
            and _s(n.attrs.get("mode"), "constant") in _PAD_MODES)


@lowering("Pad", supports=_pad_ok)
def lower_pad(em: CudaEmitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    xs, ys = tuple(em.shape(x)), tuple(em.shape(y))
    rank = len(xs)
    mode = _s(n.attrs.get("mode"), "constant")
    begin, end = _pad_params(em, n, rank)
    if rank == 0 or not any(begin) and not any(end):
        em.alias(y, x)
        return
    if rank > _RANK:
        raise Unlowerable(n, f"Pad of rank {rank} (the kernel takes up to {_RANK})")
    crop = [max(-begin[k], 0) + max(-end[k], 0) for k in range(rank)]
    extent = [xs[k] - crop[k] for k in range(rank)]
    if any(e < 0 for e in extent):
        raise Unlowerable(n, f"pads {begin + end} crop more than the input {xs}")
    if mode != "constant" and _prod(ys) and any(
            (begin[k] > 0 or end[k] > 0) and extent[k] == 0 for k in range(rank)):
        raise Unlowerable(n, f"{mode} padding of an empty axis")
    cv = n.input(2) if mode == "constant" else None
    if cv is not None and _prod(em.shape(cv)) != 1:
        if _prod(em.shape(cv)):
            raise Unlowerable(n, "constant_value is not a scalar")
        cv = None
    xv = em.read(x)
    cvv = em.read(cv) if cv is not None else xv  # not read without ``hasv``
    yv = em.write(y)
    if not _prod(ys):
        return
    em.call(_resize.pad_nd, xv, em.sizes(_strides(xs)), yv, em.sizes(ys),
            em.sizes([max(b, 0) for b in begin]), em.sizes([max(-b, 0) for b in begin]),
            em.sizes(extent), cvv, cv is not None, _PAD_MODES[mode])


# --- Resize ------------------------------------------------------------------------------------

def _resize_ok(n: Node) -> bool:
    x, y = n.inputs[0], n.outputs[0]
    if n.since_version < 11 or x is None or y is None or x.dtype is None or y.dtype is None:
        return False
    if not _plain(n) or np.dtype(x.dtype) != np.dtype(y.dtype):
        return False
    at = n.attrs
    mode = _MODES.get(_s(at.get("mode"), "nearest"))
    if mode not in (0, 1) or (mode == 1 and np.dtype(x.dtype) not in _F):
        return False
    if _s(at.get("coordinate_transformation_mode"), "half_pixel") not in _DEVICE_COORDS:
        return False
    if _s(at.get("nearest_mode"), "round_prefer_floor") not in _NEAREST:
        return False
    if at.get("exclude_outside", 0):
        return False
    return n.since_version < 18 or (
        not at.get("antialias", 0) and at.get("axes") is None
        and _s(at.get("keep_aspect_ratio_policy"), "stretch") == "stretch")


def _scales(em: CudaEmitter, n: Node, rank: int) -> list[float]:
    """One float32 scale per axis, or -1.0 each (out/in) for a Resize by sizes (read as the
    CPU lowering reads them: sizes first)."""
    sizes = _value(em, n, 3)
    scales = None if sizes is not None else _value(em, n, 2)
    if sizes is None and scales is None:
        raise Unlowerable(n, "Resize needs scales or sizes")
    if (scales if sizes is None else sizes).size != rank:
        raise Unlowerable(n, "scales/sizes do not match the input rank")
    if sizes is not None:
        return [-1.0] * rank
    got = [float(np.float32(v)) for v in scales]
    if any(v <= 0 for v in got):
        raise Unlowerable(n, "non-positive scale")
    return got


def _identity(xs, ys, s: float) -> bool:
    """An axis that maps i to i: scale 1, given or out/in (onnxruntime skips the coordinate
    transformation there, in every mode)."""
    return xs == ys and s in (1.0, -1.0)


def _linear_axes(n: Node, ident: list[bool]) -> tuple[int, int]:
    """The two adjacent axes a bilinear kernel resizes, as positions in the shape with a
    leading 1 (so that one resized axis pairs with the axis before it)."""
    active = [a + 1 for a, i in enumerate(ident) if not i]
    if len(active) > 2 or active[-1] - active[0] > 1:
        raise Unlowerable(n, f"linear Resize of axes {[a - 1 for a in active]} (the kernel "
                             "takes two adjacent ones)")
    return active[-1] - 1, active[-1]


@lowering("Resize", supports=_resize_ok)
def lower_resize(em: CudaEmitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    xs, ys = tuple(em.shape(x)), tuple(em.shape(y))
    r = len(xs)
    if len(ys) != r:
        raise Unlowerable(n, "output rank differs")
    at = n.attrs
    mode = _MODES[_s(at.get("mode"), "nearest")]
    coord = _DEVICE_COORDS[_s(at.get("coordinate_transformation_mode"), "half_pixel")]
    nearest = _NEAREST[_s(at.get("nearest_mode"), "round_prefer_floor")]
    scales = _scales(em, n, r)
    for a in range(r):
        if xs[a] == 0 and ys[a] != 0:
            raise Unlowerable(n, f"axis {a}: resizing an empty axis to {ys[a]}")
    ident = [_identity(xs[a], ys[a], scales[a]) for a in range(r)]
    if all(ident):
        em.alias(y, x)
        return
    if mode == 0 and r > _RANK:
        raise Unlowerable(n, f"nearest Resize of rank {r} (the kernel takes up to {_RANK})")
    hw = _linear_axes(n, ident) if mode == 1 else None
    xv = em.read(x)
    yv = em.write(y)
    if not _prod(ys):
        return
    if mode == 0:
        em.call(_resize.resize_nearest, xv, yv, em.sizes(xs), em.sizes(ys), coord, nearest,
                *[0.0 if i else s for s, i in zip(scales, ident)])
        return
    h, w = hw
    lx, ly, ls, li = (1,) + xs, (1,) + ys, [1.0] + scales, [True] + ident
    em.call(_resize.resize_linear2d, xv, yv,
            *em.sizes((_prod(lx[:h]), lx[h], lx[w], _prod(lx[w + 1:]), ly[h], ly[w])),
            ls[h], ls[w], coord, li[h], li[w])
