"""Shape functions: normalizations, Softmax / LogSoftmax and Dropout."""
from __future__ import annotations

from .core import _axis, _get, _present, _same_shape, _softmax_shape, register


@register("BatchNormalization")
def _batchnorm(node, shapes, values):
    # outputs 1..4: running mean, running var, saved mean, saved var, shaped as the mean input
    # (3) or the var input (4)
    return [shapes[0]] + [_get(shapes, 3 if i in (1, 3) else 4) or shapes[1]
                          for i in range(1, len(node.outputs))]


@register("LayerNormalization")
def _layernorm(node, shapes, values):
    x = shapes[0]
    n = len(node.outputs)
    if n == 1:
        return [x]
    r = len(x)
    a = _axis(node, node.attrs.get("axis", -1), r, shapes)
    stat = x[:a] + (1,) * (r - a)
    return [x] + [stat] * (n - 1)


@register("Softmax", "LogSoftmax")
def _softmax(node, shapes, values):
    return _softmax_shape(node, shapes)


@register("InstanceNormalization", "GroupNormalization", "LpNormalization",
          "MeanVarianceNormalization", "RMSNormalization")
def _same(node, shapes, values):
    return _same_shape(node, shapes)


def _dropout_values(node):
    # ratio and training_mode decide what the lowering emits (the identity, or nothing)
    return _present(node, 1, 2) if node.since_version >= 12 else ()


@register("Dropout", values=_dropout_values)
def _dropout(node, shapes, values):
    return _same_shape(node, shapes)
