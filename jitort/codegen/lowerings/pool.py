"""CPU lowerings: pooling, RoiAlign and LRN."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ..calls import KernelModule, Scalar, View, Zeros
from ..registry import Unlowerable, lowering
from .common import (_conv_pads, _float_io, _prod)

if TYPE_CHECKING:
    from ..emitter import Emitter

_pool = KernelModule("pool")


def _pool_ok(n: Node) -> bool:
    return _float_io(n) and len([o for o in n.outputs if o is not None]) == 1


def _pool_pads(n: Node, xs, ys, k, strides, dil) -> tuple[list, list]:
    """Begin and end pads per spatial axis of a pool, resolving auto_pad (the end pads are the
    ``pads`` attribute's second half, or what makes the output size come out)."""
    sp = len(xs) - 2
    pads = _conv_pads(n, xs[2:], k, strides, dil, ys[2:])
    if n.attrs.get("auto_pad", "NOTSET") in ("NOTSET", ""):
        ends = list(n.attrs.get("pads") or [0] * (2 * sp))[sp:2 * sp]
    else:
        ends = [max(0, (ys[2 + a] - 1) * strides[a] + (k[a] - 1) * dil[a] + 1 - xs[2 + a]) - pads[a]
                for a in range(sp)]
    return pads, ends


def _pool_geometry(em: Emitter, n: Node):
    """x, y, kernel, strides, dilations, begin pads, end pads of a 2-D pool; a 1-D pool
    (N, C, W) runs as a 2-D one of height 1 (``_pool4`` gives the 4-D views)."""
    x, y = n.inputs[0], n.outputs[0]
    xs, ys = em.shape(x), em.shape(y)
    if len(xs) not in (3, 4):
        raise Unlowerable(n, f"{len(xs) - 2}-D pooling")
    sp = len(xs) - 2
    k = list(n.attrs["kernel_shape"])
    strides = list(n.attrs.get("strides", [1] * sp))
    dil = list(n.attrs.get("dilations", [1] * sp))
    pads, ends = _pool_pads(n, xs, ys, k, strides, dil)
    if sp == 1:
        k, strides, dil, pads, ends = [1] + k, [1] + strides, [1] + dil, [0] + pads, [0] + ends
    return x, y, k, strides, dil, pads, ends


def _pool4(em: Emitter, v, view: View) -> View:
    """``view`` (the array of value ``v``) as the 4-D array the 2-D pool kernels take."""
    vs = em.shape(v)
    if len(vs) == 4:
        return view
    return view.reshape(em.sizes((vs[0], vs[1], 1, vs[2])))


def _pool_nd_geometry(em: Emitter, n: Node, k):
    """Kernel, strides, begin pads, end pads, dilations of an N-D pool as 3-D lists (leading
    axes of size 1), and the 5-D views' shapes of x and y."""
    x, y = n.inputs[0], n.outputs[0]
    xs, ys = em.shape(x), em.shape(y)
    sp = len(xs) - 2
    if sp not in (1, 2, 3) or len(ys) != len(xs) or len(k) != sp:
        raise Unlowerable(n, f"{sp}-D pooling")
    strides = list(n.attrs.get("strides") or [1] * sp)
    dil = list(n.attrs.get("dilations") or [1] * sp)
    pads, ends = _pool_pads(n, xs, ys, k, strides, dil)
    one, zero = [1] * (3 - sp), [0] * (3 - sp)
    return (one + list(k), one + strides, zero + list(pads), zero + list(ends), one + dil,
            tuple(xs[:2]) + tuple(one) + tuple(xs[2:]), tuple(ys[:2]) + tuple(one) + tuple(ys[2:]))


def _lower_pool5(em: Emitter, n: Node, mode: int, k, p: int = 2, include_pad: bool = False):
    """``pool.pool5d``: any 1-D/2-D/3-D Max (with Indices), Average (with dilations) or Lp
    pool, and GlobalLpPool (one window over the whole input)."""
    x, y = n.inputs[0], n.outputs[0]
    k3, s3, p3, e3, d3, xs5, ys5 = _pool_nd_geometry(em, n, k)
    ind = n.outputs[1] if len(n.outputs) > 1 and n.outputs[1] is not None else None
    xv = em.shaped(x, xs5)
    yv = em.write(y).reshape(em.sizes(ys5))
    iv = (em.write(ind).reshape(em.sizes(ys5)) if ind is not None
          else Zeros("int64", (1, 1, 1, 1, 1)))
    col_major = int(n.attrs.get("storage_order", 0)) == 1
    em.call(_pool.pool5d, xv, yv, iv, mode, ind is not None, col_major,
            *em.sizes((*k3, *s3, *p3, *e3, *d3)), include_pad, int(p))


def _maxpool_q8(n: Node) -> bool:
    """A 2-D MaxPool of 8-bit integers without Indices (kernels/cpu/pool.py)."""
    x = n.inputs[0]
    return (x.dtype is not None and np.dtype(x.dtype) in (np.dtype(np.uint8), np.dtype(np.int8))
            and len(n.outputs) == 1 and n.outputs[0].dtype == x.dtype
            and len(n.attrs.get("kernel_shape", ())) == 2 and not n.attrs.get("storage_order", 0))


def _maxpool_ok(n: Node) -> bool:
    ind = n.outputs[1] if len(n.outputs) > 1 else None
    return _maxpool_q8(n) or (_float_io(n) and (ind is None or np.dtype(ind.dtype) == np.int64))


@lowering("MaxPool", supports=_maxpool_ok)
def lower_maxpool(em: Emitter, n: Node) -> None:
    xs = em.shape(n.inputs[0])
    if (len(xs) == 5 or (len(n.outputs) > 1 and n.outputs[1] is not None)
            or int(n.attrs.get("storage_order", 0)) == 1):
        _lower_pool5(em, n, 0, list(n.attrs["kernel_shape"]))
        return
    x, y, k, s, dil, pads, _ = _pool_geometry(em, n)
    yv = _pool4(em, y, em.write(y))
    args = em.sizes((k[0], k[1], s[0], s[1], pads[0], pads[1], dil[0], dil[1]))
    fn = _pool.maxpool2d_q if _maxpool_q8(n) else _pool.maxpool2d
    em.call(fn, _pool4(em, x, em.read(x)), yv, *args)


@lowering("AveragePool", supports=_pool_ok)
def lower_avgpool(em: Emitter, n: Node) -> None:
    xs = em.shape(n.inputs[0])
    if len(xs) == 5 or any(d != 1 for d in n.attrs.get("dilations") or [1]):
        _lower_pool5(em, n, 1, list(n.attrs["kernel_shape"]),
                     include_pad=bool(n.attrs.get("count_include_pad", 0)))
        return
    x, y, k, s, dil, pads, ends = _pool_geometry(em, n)
    yv = _pool4(em, y, em.write(y))
    args = em.sizes((k[0], k[1], s[0], s[1], pads[0], pads[1]))
    em.call(_pool.avgpool2d, _pool4(em, x, em.read(x)), yv, *args,
            bool(n.attrs.get("count_include_pad", 0)), *em.sizes((ends[0], ends[1])))


@lowering("LpPool", supports=_pool_ok)
def lower_lppool(em: Emitter, n: Node) -> None:
    _lower_pool5(em, n, 2, list(n.attrs["kernel_shape"]), p=int(n.attrs.get("p", 2)))


@lowering("GlobalLpPool", supports=_float_io)
def lower_global_lppool(em: Emitter, n: Node) -> None:
    xs = em.shape(n.inputs[0])
    _lower_pool5(em, n, 2, list(xs[2:]), p=int(n.attrs.get("p", 2)))


@lowering("GlobalAveragePool", "GlobalMaxPool", supports=_float_io)
def lower_global_pool(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    xs = em.shape(x)
    if len(xs) < 3:
        raise Unlowerable(n, "global pooling needs N, C and spatial dims")
    fn = _pool.global_avgpool if n.op_type == "GlobalAveragePool" else _pool.global_maxpool
    yv = em.write(y)
    em.call(fn, em.shaped(x, (xs[0], xs[1], _prod(xs[2:]))), yv.reshape(em.sizes((xs[0], xs[1]))))


@lowering("MaxUnpool", supports=lambda n: _float_io(n) and np.dtype(n.inputs[1].dtype) == np.int64)
def lower_max_unpool(em: Emitter, n: Node) -> None:
    """MaxUnpool: zeros, then each input value at its flat index (MaxPool's Indices) of the
    output, whose shape comes from output_shape or the pool geometry (shape pass)."""
    x, ind, y = n.inputs[0], n.inputs[1], n.outputs[0]
    xs, ins, ys = em.shape(x), em.shape(ind), em.shape(y)
    if tuple(xs) != tuple(ins):
        raise Unlowerable(n, f"X {xs} and I {ins} differ in shape")
    yv = em.write(y)
    em.call(_pool.max_unpool, em.shaped(x, (_prod(xs),)), em.shaped(ind, (_prod(ins),)),
            yv.reshape(em.sizes((_prod(ys),))))


@lowering("LRN", supports=_float_io)
def lower_lrn(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    xs = em.shape(x)
    t3 = em.sizes((xs[0], xs[1], _prod(xs[2:])))
    dt = np.dtype(y.dtype).name
    a = n.attrs
    yv = em.write(y)
    em.call(_pool.lrn, em.read(x).reshape(t3), yv.reshape(t3), int(a["size"]),
            Scalar(dt, float(a.get("alpha", 1e-4))), Scalar(dt, float(a.get("beta", 0.75))),
            Scalar(dt, float(a.get("bias", 1.0))))


def _roi_align_ok(n: Node) -> bool:
    x, rois, batch = n.inputs[:3]
    return (_float_io(n) and rois.dtype == x.dtype and batch is not None
            and np.dtype(batch.dtype) == np.int64)


@lowering("RoiAlign", supports=_roi_align_ok)
def lower_roi_align(em: Emitter, n: Node) -> None:
    x, rois, batch = n.inputs[:3]
    a = n.attrs
    mode = a.get("mode", "avg")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    ctm = a.get("coordinate_transformation_mode", "half_pixel")
    ctm = ctm.decode() if isinstance(ctm, bytes) else ctm
    if mode not in ("avg", "max") or ctm not in ("half_pixel", "output_half_pixel"):
        raise Unlowerable(n, f"RoiAlign mode {mode!r} / coordinate_transformation_mode {ctm!r}")
    # (opset 10 has no coordinate_transformation_mode: output_half_pixel, no half-pixel shift)
    half = ctm == "half_pixel" and n.since_version >= 16
    em.call(_pool.roi_align, em.read(x), em.read(rois), em.read(batch), em.write(n.outputs[0]),
            Scalar("float64", float(a.get("spatial_scale", 1.0))),
            int(a.get("sampling_ratio", 0)), mode == "max", half)
