"""Shape functions: elementwise and broadcasting ops.

None of these ops has a lowering in ``jitort/codegen/lowerings/``: the arithmetic ones (and
Expand) are expressions of the fused-loop generator, ``jitort/codegen/elementwise.py``;
Bernoulli, RandomUniformLike, RandomNormalLike and Binarizer run on the interpreter."""
from __future__ import annotations

from .core import _bcast2, _fail, _ints, _need, _same_shape, register


_UNARY = (
    "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Erf", "Reciprocal", "Floor",
    "Ceil", "Round", "Sign", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh",
    "Asinh", "Acosh", "Atanh", "Not", "IsNaN", "IsInf", "Softplus", "Softsign", "Elu", "Selu",
    "LeakyRelu", "ThresholdedRelu", "HardSigmoid", "HardSwish", "Gelu", "Mish", "Celu", "Swish",
    "Cast", "CastLike", "Clip", "Shrink", "BitwiseNot",
    "Bernoulli", "RandomUniformLike", "RandomNormalLike", "Binarizer",
)


@register(*_UNARY)
def _unary(node, shapes, values):
    return _same_shape(node, shapes)


@register("SwiGLU")
def _swiglu(node, shapes, values):
    """A gate and a value of one shape (the op does not broadcast)."""
    if shapes[0] != shapes[1]:
        raise _fail(node, "SwiGLU's A and B must have the same shape", shapes)
    return [shapes[0]]


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


@register("Expand", values=(1,))
def _expand(node, shapes, values):
    target = tuple(_ints(_need(node, values, 1)))
    for d in target:
        if d < 0:
            raise _fail(node, f"negative dim in target shape {target}", shapes)
    r = _bcast2(shapes[0], target)
    if r is None:
        raise _fail(node, f"cannot expand to {target}", shapes)
    return [r]
