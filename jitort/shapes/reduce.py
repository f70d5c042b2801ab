"""Shape functions: reductions (ArgMax/ArgMin and TopK are in :mod:`.scan`)."""
from __future__ import annotations

from .core import _axes, _get, _ints, _need, _present, register


def _reduce_axes_input_version(op: str) -> int:
    return 13 if op == "ReduceSum" else 18


def _reduce_values(node):
    if node.since_version >= _reduce_axes_input_version(node.op_type):
        return _present(node, 1)
    return ()


_REDUCE_OPS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
               "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


@register(*_REDUCE_OPS, values=_reduce_values)
def _reduce(node, shapes, values):
    x = shapes[0]
    at = node.attrs
    keep = at.get("keepdims", 1)
    if node.since_version >= _reduce_axes_input_version(node.op_type):
        if _get(shapes, 1) is not None:
            axes = _ints(_need(node, values, 1))
        else:
            axes = None
        if not axes:
            if at.get("noop_with_empty_axes", 0):
                return [x]
            axes = None
    else:
        axes = at.get("axes")
    r = len(x)
    if axes is None or len(axes) == 0:
        return [(1,) * r if keep else ()]
    ax = _axes(node, axes, r, shapes)
    if keep:
        return [tuple(1 if i in ax else d for i, d in enumerate(x))]
    return [tuple(d for i, d in enumerate(x) if i not in ax)]
