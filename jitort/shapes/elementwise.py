"""Shape functions: elementwise and broadcasting ops."""
from __future__ import annotations

from .core import (_bcast2, _fail, register)


_UNARY = (
    "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Erf", "Reciprocal", "Floor",
    "Ceil", "Round", "Sign", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh",
    "Asinh", "Acosh", "Atanh", "Not", "IsNaN", "IsInf", "Softplus", "Softsign", "Elu", "Selu",
    "LeakyRelu", "ThresholdedRelu", "HardSigmoid", "HardSwish", "Gelu", "Mish", "Celu", "Swish",
    "Cast", "CastLike", "Identity", "Clip", "Shrink", "BitwiseNot", "Dropout",
    "InstanceNormalization", "GroupNormalization", "LRN", "LpNormalization",
    "MeanVarianceNormalization", "RMSNormalization", "CumSum", "CumProd", "Trilu",
    "ScatterElements", "ScatterND", "Scatter", "TensorScatter", "ReverseSequence",
    "QuantizeLinear", "DequantizeLinear", "Bernoulli", "RandomUniformLike",
    "RandomNormalLike", "Binarizer", "RotaryEmbedding",
)


@register(*_UNARY)
def _unary(node, shapes, values):
    s = shapes[0]
    if s is None:
        raise _fail(node, "input 0 is missing", shapes)
    n = len(node.outputs)
    return [s] if n == 1 else [s] * n


@register("EyeLike")
def _eyelike(node, shapes, values):
    s = shapes[0]
    if len(s) != 2:
        raise _fail(node, "EyeLike needs a 2-D input", shapes)
    return [s]


@register("Softmax", "LogSoftmax", "Hardmax")
def _softmax(node, shapes, values):
    s = shapes[0]
    default = -1 if node.since_version >= 13 else 1
    a = node.attrs.get("axis", default)
    r = len(s)
    if r == 0 and node.since_version >= 13:
        raise _fail(node, "input must have rank >= 1", shapes)
    if r and (a < -r or a >= r):
        raise _fail(node, f"axis {a} out of range for rank {r}", shapes)
    return [s]


_LEGACY_BCAST = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal",
                           "Less", "Greater", "PRelu"})


@register("Add", "Sub", "Mul", "Div", "Pow", "Mod", "Equal", "Less", "Greater", "LessOrEqual",
          "GreaterOrEqual", "And", "Or", "Xor", "BitShift", "BitwiseAnd", "BitwiseOr",
          "BitwiseXor")
def _binary(node, shapes, values):
    a, b = shapes[0], shapes[1]
    if a == b:
        return [a]
    if node.since_version < 7 and node.op_type in _LEGACY_BCAST:
        return [_legacy_bcast(node, shapes)]
    r = _bcast2(a, b)
    if r is None:
        raise _fail(node, "shapes are not broadcastable", shapes)
    return [r]


def _legacy_bcast(node, shapes):
    a, b = shapes[0], shapes[1]
    if not node.attrs.get("broadcast", 0):
        if a != b:
            raise _fail(node, "shapes differ and broadcast=0", shapes)
        return a
    axis = node.attrs.get("axis")
    start = len(a) - len(b) if axis is None else (axis + len(a) if axis < 0 else axis)
    if start < 0 or start + len(b) > len(a):
        raise _fail(node, "legacy broadcast: B does not fit in A", shapes)
    for i, d in enumerate(b):
        if d != 1 and d != a[start + i]:
            raise _fail(node, "legacy broadcast: dims differ", shapes)
    return a


@register("Sum", "Mean", "Max", "Min", "Where")
def _variadic(node, shapes, values):
    out = shapes[0]
    for s in shapes[1:]:
        if s is None:
            continue
        r = _bcast2(out, s)
        if r is None:
            raise _fail(node, "shapes are not broadcastable", shapes)
        out = r
    if out is None:
        raise _fail(node, "no inputs", shapes)
    return [out]


@register("PRelu")
def _prelu(node, shapes, values):
    x, slope = shapes[0], shapes[1]
    if x == slope:
        return [x]
    if node.since_version < 7:
        return [x]
    r = _bcast2(x, slope)
    if r is None or r != x:
        raise _fail(node, "slope is not unidirectionally broadcastable to X", shapes)
    return [x]


