"""Shape functions: convolution and pooling."""
from __future__ import annotations

from .core import (_fail, _get, _ints, _JITORT_REGISTRY, _need, _present, _str, register)


def _spatial_attrs(node, nd, shapes):
    at = node.attrs
    strides = at.get("strides") or [1] * nd
    dil = at.get("dilations") or [1] * nd
    pads = at.get("pads") or [0] * (2 * nd)
    if len(strides) != nd or len(dil) != nd or len(pads) != 2 * nd:
        raise _fail(node, f"strides/dilations/pads do not match {nd} spatial dims", shapes)
    return strides, dil, pads


def _window_out(node, ins, kernel, shapes, ceil_mode=False):
    nd = len(ins)
    if len(kernel) != nd:
        raise _fail(node, f"kernel_shape {list(kernel)} does not match {nd} spatial dims", shapes)
    strides, dil, pads = _spatial_attrs(node, nd, shapes)
    auto = _str(node.attrs.get("auto_pad"), "NOTSET")
    out = []
    for i in range(nd):
        x, s = ins[i], strides[i]
        if s <= 0:
            raise _fail(node, f"stride {s} must be positive", shapes)
        dk = (kernel[i] - 1) * dil[i] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            out.append(-(-x // s))
            continue
        if auto == "VALID":
            p0 = p1 = 0
        else:
            p0, p1 = pads[i], pads[i + nd]
        num = x + p0 + p1 - dk
        if num < 0:
            raise _fail(node, f"window {dk} is larger than padded input {x + p0 + p1} "
                              f"along spatial dim {i}", shapes)
        if ceil_mode:
            o = -(-num // s) + 1
            if (o - 1) * s >= x + p0:
                o -= 1
        else:
            o = num // s + 1
        out.append(o)
    return out


def _conv_core(node, shapes, x, w):
    if len(x) < 3 or len(w) != len(x):
        raise _fail(node, "X and W must have the same rank >= 3", shapes)
    group = node.attrs.get("group", 1)
    if x[1] != w[1] * group:
        raise _fail(node, f"input channels {x[1]} != W channels {w[1]} * group {group}", shapes)
    if w[0] % group:
        raise _fail(node, f"output channels {w[0]} not divisible by group {group}", shapes)
    kernel = node.attrs.get("kernel_shape") or w[2:]
    return [(x[0], w[0], *_window_out(node, x[2:], kernel, shapes))]


@register("Conv", "ConvInteger", "DeformConv")
def _conv(node, shapes, values):
    return _conv_core(node, shapes, shapes[0], shapes[1])


def _fused_conv(node, shapes, values):
    """jitort.FusedConv: the Conv's output; the optional residual (input 3) must match it."""
    out = _conv_core(node, shapes, shapes[0], shapes[1])
    res = _get(shapes, 3)
    if res is not None and tuple(res) != tuple(out[0]):
        raise _fail(node, f"residual shape {tuple(res)} differs from the conv output "
                          f"{tuple(out[0])}", shapes)
    return out


_JITORT_REGISTRY["FusedConv"] = _fused_conv


def _fused_conv_nhwc(node, shapes, values):
    """jitort.FusedConvNHWC (``passes.layout``): FusedConv on an NHWC input with HWIO weights."""
    x, w = shapes[0], shapes[1]
    if len(x) != 4 or len(w) != 4:
        raise _fail(node, "FusedConvNHWC takes a 4-D input and 4-D HWIO weights", shapes)
    n, c, h, wd = _conv_core(node, shapes, (x[0], x[3], x[1], x[2]), (w[3], w[2], w[0], w[1]))[0]
    out = (n, h, wd, c)
    res = _get(shapes, 3)
    if res is not None and tuple(res) != out:
        raise _fail(node, f"residual shape {tuple(res)} differs from the conv output {out}",
                    shapes)
    return [out]


_JITORT_REGISTRY["FusedConvNHWC"] = _fused_conv_nhwc


@register("QLinearConv")
def _qlinear_conv(node, shapes, values):
    return _conv_core(node, shapes, shapes[0], shapes[3])


@register("ConvTranspose")
def _conv_transpose(node, shapes, values):
    x, w = shapes[0], shapes[1]
    if len(x) < 3 or len(w) != len(x):
        raise _fail(node, "X and W must have the same rank >= 3", shapes)
    at = node.attrs
    group = at.get("group", 1)
    if x[1] != w[0]:
        raise _fail(node, f"input channels {x[1]} != W dim 0 {w[0]}", shapes)
    nd = len(x) - 2
    c_out = w[1] * group
    kernel = at.get("kernel_shape") or w[2:]
    out_shape = at.get("output_shape")
    if out_shape:
        sp = list(out_shape[-nd:])
        if len(sp) != nd:
            raise _fail(node, f"output_shape {out_shape} does not match {nd} spatial dims", shapes)
        return [(x[0], c_out, *sp)]
    strides, dil, pads = _spatial_attrs(node, nd, shapes)
    opad = at.get("output_padding") or [0] * nd
    auto = _str(at.get("auto_pad"), "NOTSET")
    sp = []
    for i in range(nd):
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = x[2 + i] * strides[i]
        else:
            p = 0 if auto == "VALID" else pads[i] + pads[i + nd]
            o = strides[i] * (x[2 + i] - 1) + opad[i] + (kernel[i] - 1) * dil[i] + 1 - p
        if o < 0:
            raise _fail(node, f"negative output dim {o}", shapes)
        sp.append(o)
    return [(x[0], c_out, *sp)]


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


@register("RoiAlign")
def _roi_align(node, shapes, values):
    x, rois = shapes[0], shapes[1]
    at = node.attrs
    return [(rois[0], x[1], at.get("output_height", 1), at.get("output_width", 1))]


@register("GridSample")
def _grid_sample(node, shapes, values):
    x, g = shapes[0], shapes[1]
    return [(x[0], x[1], *g[1:-1])]


