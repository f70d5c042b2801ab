"""Shape functions: Resize and Upsample, GridSample and AffineGrid."""
from __future__ import annotations

import math

import numpy as np

from .core import (_axes, _fail, _get, _ints, _need, _present, _prod, _str, register)


def _resize_values(node):
    if node.op_type == "Upsample":
        return (1,) if node.since_version >= 9 else ()
    if node.since_version < 11:
        return (1,)
    if _str(node.attrs.get("coordinate_transformation_mode"), "half_pixel") == "tf_crop_and_resize":
        return _present(node, 1, 2, 3)  # the lowering reads roi's values (the crop box)
    return _present(node, 2, 3)


def _resize_scales(node, x, scales, axes, shapes):
    if len(scales) != len(axes):
        raise _fail(node, f"scales {scales} do not match the {len(axes)} resized axes", shapes)
    out = list(x)
    prod = np.asarray([x[a] for a in axes], np.float32) * np.asarray(scales, np.float32)
    for a, p, s in zip(axes, prod.tolist(), scales):
        if s <= 0:
            raise _fail(node, f"scales must be positive, got {list(scales)}", shapes)
        out[a] = int(math.floor(p))  # float32 product, as onnxruntime computes it
    return tuple(out)


@register("Resize", "Upsample", values=_resize_values)
def _resize(node, shapes, values):
    x = shapes[0]
    r = len(x)
    if node.op_type == "Upsample" and node.since_version < 9:
        return [_resize_scales(node, x, node.attrs.get("scales"), range(r), shapes)]
    if node.op_type == "Upsample" or node.since_version < 11:
        scales = np.asarray(_need(node, values, 1), np.float32).reshape(-1).tolist()
        return [_resize_scales(node, x, scales, range(r), shapes)]
    at = node.attrs
    axes = at.get("axes") if node.since_version >= 18 else None
    axes = list(range(r)) if axes is None else _axes(node, axes, r, shapes)
    sizes = None
    if _get(shapes, 3) is not None and _prod(shapes[3]) > 0:
        sizes = _ints(_need(node, values, 3))
    if sizes is None:
        if _get(shapes, 2) is None or _prod(shapes[2]) == 0:
            raise _fail(node, "Resize needs scales or sizes", shapes)
        scales = np.asarray(_need(node, values, 2), np.float32).reshape(-1).tolist()
        return [_resize_scales(node, x, scales, axes, shapes)]
    if len(sizes) != len(axes):
        raise _fail(node, f"sizes {sizes} do not match the {len(axes)} resized axes", shapes)
    out = list(x)
    policy = _str(at.get("keep_aspect_ratio_policy"), "stretch")
    if policy == "stretch" or node.since_version < 18:
        for a, s in zip(axes, sizes):
            if s < 0:
                raise _fail(node, f"negative size in {sizes}", shapes)
            out[a] = s
        return [tuple(out)]
    ratios = [s / x[a] for a, s in zip(axes, sizes)]
    if policy == "not_larger":
        scale = min(ratios)
    elif policy == "not_smaller":
        scale = max(ratios)
    else:
        raise _fail(node, f"unknown keep_aspect_ratio_policy {policy!r}", shapes)
    for a in axes:
        out[a] = int(scale * x[a] + 0.5)
    return [tuple(out)]


@register("GridSample")
def _grid_sample(node, shapes, values):
    x, g = shapes[0], shapes[1]
    return [(x[0], x[1], *g[1:-1])]


@register("AffineGrid", values=(1,))
def _affine_grid(node, shapes, values):
    size = _ints(_need(node, values, 1))
    if len(size) == 4:
        return [(size[0], size[2], size[3], 2)]
    if len(size) == 5:
        return [(size[0], size[2], size[3], size[4], 3)]
    raise _fail(node, f"size {size} must have 4 or 5 entries", shapes)
