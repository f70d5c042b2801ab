"""Shape functions: element gathers and scatters (GatherElements, GatherND, the
Scatters) and OneHot."""
from __future__ import annotations

from .core import _axis, _fail, _need, _same_shape, _scalar, register


@register("GatherElements")
def _gather_elements(node, shapes, values):
    x, idx = shapes[0], shapes[1]
    if len(x) != len(idx):
        raise _fail(node, "data and indices must have the same rank", shapes)
    a = _axis(node, node.attrs.get("axis", 0), len(x), shapes)
    if any(idx[k] > x[k] for k in range(len(x)) if k != a):
        raise _fail(node, "indices dims must not exceed data dims off the axis", shapes)
    return [idx]


@register("GatherND")
def _gather_nd(node, shapes, values):
    x, idx = shapes[0], shapes[1]
    b = node.attrs.get("batch_dims", 0)
    if len(idx) < 1 or len(x) < 1:
        raise _fail(node, "data and indices must have rank >= 1", shapes)
    k = idx[-1]
    if b >= min(len(x), len(idx)) or x[:b] != idx[:b]:
        raise _fail(node, f"batch_dims={b} do not match", shapes)
    if k > len(x) - b:
        raise _fail(node, f"indices last dim {k} > data rank {len(x)} - batch_dims {b}", shapes)
    return [tuple(idx[:-1]) + tuple(x[b + k:])]


@register("OneHot", values=(1,))
def _one_hot(node, shapes, values):
    idx = shapes[0]
    depth = _scalar(_need(node, values, 1))
    depth = int(depth)
    if depth < 0:
        raise _fail(node, f"negative depth {depth}", shapes)
    r = len(idx) + 1
    a = _axis(node, node.attrs.get("axis", -1), r, shapes)
    return [idx[:a] + (depth,) + idx[a:]]


@register("ScatterElements", "ScatterND", "Scatter")
def _scatter(node, shapes, values):
    return _same_shape(node, shapes)
