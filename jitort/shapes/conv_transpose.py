"""Shape functions: transposed convolution (ConvTranspose) and Col2Im."""
from __future__ import annotations

from .core import _fail, _ints, _need, _prod, _spatial_attrs, _str, register


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


@register("Col2Im", values=(1, 2))
def _col2im(node, shapes, values):
    x = shapes[0]
    image = _ints(_need(node, values, 1))
    block = _ints(_need(node, values, 2))
    if len(x) != 3 or len(image) != len(block):
        raise _fail(node, "input must be 3-D and image_shape/block_shape of equal length",
                    shapes)
    bp = _prod(block)
    if bp == 0 or x[1] % bp:
        raise _fail(node, f"dim 1 ({x[1]}) not divisible by prod(block_shape)={bp}", shapes)
    return [(x[0], x[1] // bp, *image)]
