"""Shape functions: pooling (windowed, global, MaxUnpool), RoiAlign and LRN."""
from __future__ import annotations

from .core import (_fail, _get, _ints, _need, _present, _same_shape, _spatial_attrs,
                   _window_out, register)


@register("MaxPool", "AveragePool", "LpPool")
def _pool(node, shapes, values):
    x = shapes[0]
    if len(x) < 3:
        raise _fail(node, "input must have rank >= 3", shapes)
    kernel = node.attrs.get("kernel_shape")
    if not kernel:
        raise _fail(node, "kernel_shape attribute is required", shapes)
    out = (x[0], x[1], *_window_out(node, x[2:], kernel, shapes,
                                     bool(node.attrs.get("ceil_mode", 0))))
    n = len(node.outputs)
    return [out] if n == 1 else [out] * n


@register("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def _global_pool(node, shapes, values):
    x = shapes[0]
    if len(x) < 2:
        raise _fail(node, "input must have rank >= 2", shapes)
    return [(x[0], x[1]) + (1,) * (len(x) - 2)]


@register("MaxUnpool", values=lambda n: _present(n, 2))
def _max_unpool(node, shapes, values):
    x = shapes[0]
    if _get(shapes, 2) is not None:
        out = tuple(_ints(_need(node, values, 2)))
        if len(out) != len(x):
            raise _fail(node, f"output_shape {out} has the wrong rank", shapes)
        return [out]
    nd = len(x) - 2
    kernel = node.attrs.get("kernel_shape")
    strides, _, pads = _spatial_attrs(node, nd, shapes)
    sp = [(x[2 + i] - 1) * strides[i] + kernel[i] - pads[i] - pads[i + nd] for i in range(nd)]
    return [(x[0], x[1], *sp)]


@register("LRN")
def _lrn(node, shapes, values):
    return _same_shape(node, shapes)


@register("RoiAlign")
def _roi_align(node, shapes, values):
    x, rois, batch = shapes[0], shapes[1], shapes[2]
    if len(x) != 4 or len(rois) != 2 or rois[1] != 4 or len(batch) != 1 or batch[0] != rois[0]:
        raise _fail(node, "RoiAlign needs X (N, C, H, W), rois (R, 4) and batch_indices (R,)",
                    shapes)
    at = node.attrs
    return [(rois[0], x[1], at.get("output_height", 1), at.get("output_width", 1))]
