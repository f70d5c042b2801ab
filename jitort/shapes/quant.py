"""Shape functions: quantization and the quantized convolutions and matrix products."""
from __future__ import annotations

from .core import _conv_core, _matmul_shape, _same_shape, register


@register("ConvInteger")
def _conv_integer(node, shapes, values):
    return _conv_core(node, shapes, shapes[0], shapes[1])


@register("QLinearConv")
def _qlinear_conv(node, shapes, values):
    return _conv_core(node, shapes, shapes[0], shapes[3])


@register("MatMulInteger")
def _matmul_integer(node, shapes, values):
    return [_matmul_shape(node, shapes[0], shapes[1], shapes)]


@register("QLinearMatMul")
def _qlinear_matmul(node, shapes, values):
    return [_matmul_shape(node, shapes[0], shapes[3], shapes)]


@register("QuantizeLinear", "DequantizeLinear")
def _quantize(node, shapes, values):
    return _same_shape(node, shapes)


@register("DynamicQuantizeLinear")
def _dql(node, shapes, values):
    return [shapes[0], (), ()]
