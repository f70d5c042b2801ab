"""Shape functions: the ops lowered by ``lowerings/shape_ops.py`` (EyeLike, Trilu,
ReverseSequence, Tile, Pad, CenterCropPad, DepthToSpace, SpaceToDepth, ConstantOfShape,
Range), and the ops with no CPU lowering that are no family's: Shape, Size and Constant
(host ops)."""
from __future__ import annotations

import math

import numpy as np

from .core import _axes, _fail, _get, _ints, _need, _present, _same_shape, _scalar, register


@register("EyeLike")
def _eyelike(node, shapes, values):
    s = shapes[0]
    if len(s) != 2:
        raise _fail(node, "EyeLike needs a 2-D input", shapes)
    return [s]


@register("Trilu", "ReverseSequence")
def _same(node, shapes, values):
    return _same_shape(node, shapes)


@register("Tile", values=(1,))
def _tile(node, shapes, values):
    x = shapes[0]
    reps = _ints(_need(node, values, 1))
    if len(reps) != len(x):
        raise _fail(node, f"repeats {reps} do not match rank {len(x)}", shapes)
    out = []
    for d, r in zip(x, reps):
        if r < 0:
            raise _fail(node, f"negative repeats {reps}", shapes)
        out.append(d * r)
    return [tuple(out)]


def _pad_values(node):
    if node.since_version >= 11:
        return _present(node, 1, 3)
    return ()


@register("Pad", values=_pad_values)
def _pad(node, shapes, values):
    x = shapes[0]
    r = len(x)
    if node.since_version >= 11:
        pads = _ints(_need(node, values, 1))
        axes = _ints(_need(node, values, 3)) if _get(shapes, 3) is not None else None
    else:
        pads = node.attrs.get("pads", node.attrs.get("paddings"))
        axes = None
    if axes is None:
        axes = range(r)
    else:
        axes = _axes(node, axes, r, shapes)
    na = len(axes)
    if len(pads) != 2 * na:
        raise _fail(node, f"pads {pads} must have {2 * na} entries", shapes)
    out = list(x)
    for i, a in enumerate(axes):
        d = x[a] + pads[i] + pads[i + na]
        if d < 0:
            raise _fail(node, f"pads {pads} make dim {a} negative", shapes)
        out[a] = d
    return [tuple(out)]


@register("CenterCropPad", values=(1,))
def _center_crop_pad(node, shapes, values):
    x = shapes[0]
    sizes = _ints(_need(node, values, 1))
    axes = node.attrs.get("axes")
    axes = range(len(x)) if axes is None else _axes(node, axes, len(x), shapes)
    if len(sizes) != len(axes):
        raise _fail(node, f"shape {sizes} does not match axes", shapes)
    out = list(x)
    for a, s in zip(axes, sizes):
        out[a] = s
    return [tuple(out)]


@register("DepthToSpace", "SpaceToDepth")
def _depth_space(node, shapes, values):
    x = shapes[0]
    if len(x) != 4:
        raise _fail(node, "input must be 4-D", shapes)
    b = node.attrs.get("blocksize")
    n, c, h, w = x
    if node.op_type == "DepthToSpace":
        if c % (b * b):
            raise _fail(node, f"channels {c} not divisible by blocksize^2 = {b * b}", shapes)
        return [(n, c // (b * b), h * b, w * b)]
    if h % b or w % b:
        raise _fail(node, f"spatial dims not divisible by blocksize {b}", shapes)
    return [(n, c * b * b, h // b, w // b)]


@register("ConstantOfShape", values=(0,))
def _constant_of_shape(node, shapes, values):
    out = tuple(_ints(_need(node, values, 0))) if shapes[0] != (0,) else ()
    for d in out:
        if d < 0:
            raise _fail(node, f"negative dim in shape {out}", shapes)
    return [out]


@register("Range", values=(0, 1, 2))
def _range(node, shapes, values):
    start = _scalar(_need(node, values, 0))
    limit = _scalar(_need(node, values, 1))
    delta = _scalar(_need(node, values, 2))
    if delta == 0:
        raise _fail(node, "Range delta must not be 0", shapes)
    if isinstance(start, int) and isinstance(limit, int) and isinstance(delta, int):
        n = -((start - limit) // delta)
    else:
        n = math.ceil((limit - start) / delta)
    return [(max(int(n), 0),)]


@register("Shape")
def _shape(node, shapes, values):
    r = len(shapes[0])
    if node.since_version >= 15:
        start = node.attrs.get("start", 0)
        end = node.attrs.get("end")
        return [(len(range(*slice(start, end).indices(r))),)]
    return [(r,)]


@register("Size")
def _size(node, shapes, values):
    return [()]


@register("Constant")
def _constant(node, shapes, values):
    at = node.attrs
    for key in ("value", "sparse_value"):
        v = at.get(key)
        if v is not None:
            return [tuple(int(d) for d in np.shape(v))]
    for key in ("value_floats", "value_ints", "value_strings"):
        v = at.get(key)
        if v is not None:
            return [(len(v),)]
    return [()]
