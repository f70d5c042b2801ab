"""Shape and dtype functions: onnxruntime's quantized contrib ops (domain ``com.microsoft``):
MatMulNBits, MatMulIntegerToFloat, DynamicQuantizeMatMul and the QOperator quantizer's
QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool,
QLinearConcat (their semantics: onnxruntime's docs/ContribOperators.md)."""
from __future__ import annotations

from .core import (_axis, _fail, _matmul_shape, _same_shape, broadcast_shapes, register,
                   register_dtypes)

MS = "com.microsoft"


def _dtype_of(i: int):
    """A dtype function: the output has input ``i``'s dtype."""
    return lambda dts: [dts[i] if i < len(dts) else None]


register_dtypes("MatMulNBits", "DynamicQuantizeMatMul", "QLinearAdd", "QLinearMul",
                "QLinearSigmoid", "QLinearLeakyRelu", "QLinearGlobalAveragePool",
                domain=MS)(_dtype_of(0))
register_dtypes("MatMulIntegerToFloat", domain=MS)(_dtype_of(2))  # a_scale's float type
register_dtypes("QLinearConcat", domain=MS)(_dtype_of(2))  # the first input's


@register("MatMulNBits", domain=MS)
def _matmul_nbits(node, shapes, values):
    a = shapes[0]
    k, n = int(node.attrs.get("K", 0)), int(node.attrs.get("N", 0))
    if not a or a[-1] != k:
        raise _fail(node, f"A's last dimension is not K={k}", shapes)
    return [tuple(a[:-1]) + (n,)]


@register("MatMulIntegerToFloat", "DynamicQuantizeMatMul", domain=MS)
def _matmul_to_float(node, shapes, values):
    return [_matmul_shape(node, shapes[0], shapes[1], shapes)]


@register("QLinearAdd", "QLinearMul", domain=MS)
def _qlinear_binary(node, shapes, values):
    return [broadcast_shapes(shapes[0], shapes[3])]


@register("QLinearSigmoid", "QLinearLeakyRelu", domain=MS)
def _qlinear_unary(node, shapes, values):
    return _same_shape(node, shapes)


@register("QLinearGlobalAveragePool", domain=MS)
def _qlinear_gap(node, shapes, values):
    x = shapes[0]
    if len(x) < 3:
        raise _fail(node, "input rank below 3", shapes)
    if node.attrs.get("channels_last", 0):
        return [(x[0],) + (1,) * (len(x) - 2) + (x[-1],)]
    return [tuple(x[:2]) + (1,) * (len(x) - 2)]


@register("QLinearConcat", domain=MS)
def _qlinear_concat(node, shapes, values):
    ins = shapes[2::3]
    if not ins or (len(shapes) - 2) % 3:
        raise _fail(node, "inputs are not (Y_scale, Y_zero_point) then (X, scale, zero point) "
                    "triples", shapes)
    r = len(ins[0])
    a = _axis(node, node.attrs.get("axis", 0), r, shapes)
    total = 0
    for s in ins:
        if len(s) != r or any(s[i] != ins[0][i] for i in range(r) if i != a):
            raise _fail(node, "inputs differ outside the concatenation axis", shapes)
        total += s[a]
    return [tuple(ins[0][:a]) + (total,) + tuple(ins[0][a + 1:])]
