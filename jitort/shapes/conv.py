"""Shape functions: convolution (Conv and jitort's fused forms of it).

The quantized convolutions are in :mod:`.quant`, DeformConv in :mod:`.misc`, ConvTranspose in
:mod:`.conv_transpose`, pools in :mod:`.pool`: each op's shape function lives in the module
named like its lowering's family (``jitort/codegen/lowerings/``)."""
from __future__ import annotations

from .core import _conv_core, _fail, _get, register


@register("Conv")
def _conv(node, shapes, values):
    return _conv_core(node, shapes, shapes[0], shapes[1])


@register("FusedConv", domain="jitort")
def _fused_conv(node, shapes, values):
    """jitort.FusedConv: the Conv's output; the optional residual (input 3) must match it."""
    out = _conv_core(node, shapes, shapes[0], shapes[1])
    res = _get(shapes, 3)
    if res is not None and tuple(res) != tuple(out[0]):
        raise _fail(node, f"residual shape {tuple(res)} differs from the conv output "
                          f"{tuple(out[0])}", shapes)
    return out


@register("FusedConvNHWC", domain="jitort")
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
