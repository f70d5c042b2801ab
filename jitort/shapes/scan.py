"""Shape functions: ops that scan along an axis (ArgMax/ArgMin, TopK, CumSum/CumProd,
Hardmax)."""
from __future__ import annotations

from .core import _axis, _fail, _moved_input, _moved_ints, _same_shape, _softmax_shape, register


@register("ArgMax", "ArgMin")
def _argmax(node, shapes, values):
    x = shapes[0]
    a = _axis(node, node.attrs.get("axis", 0), len(x), shapes)
    if node.attrs.get("keepdims", 1):
        return [x[:a] + (1,) + x[a + 1:]]
    return [x[:a] + x[a + 1:]]


@register("TopK", values=_moved_input(10))
def _topk(node, shapes, values):
    x = shapes[0]
    k = _moved_ints(node, shapes, values, 10, "k")
    if node.since_version >= 10:
        if len(k) != 1:
            raise _fail(node, f"K must hold one value, got {k}", shapes)
        k = k[0]
    a = _axis(node, node.attrs.get("axis", -1), len(x), shapes)
    if k < 0 or k > x[a]:
        raise _fail(node, f"k={k} is out of range for axis {a} of size {x[a]}", shapes)
    out = x[:a] + (k,) + x[a + 1:]
    return [out] * len(node.outputs)


@register("CumSum", "CumProd", values=(1,))
def _cumulative(node, shapes, values):
    """The axis input is read on the host."""
    return _same_shape(node, shapes)


@register("Hardmax")
def _hardmax(node, shapes, values):
    return _softmax_shape(node, shapes)
