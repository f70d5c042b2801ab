"""Shape-function registry and the helpers every op family's shape functions share."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .. import ir
from ..errors import InvalidInput

ShapeFn = Callable[[ir.Node, list, list], list]


class ShapeError(InvalidInput):
    """Input shapes (or shape-carrying values) of a node contradict each other."""


_REGISTRY: dict[str, ShapeFn] = {}
#: Shape functions of jitort's own ops (domain "jitort"), by op_type.
_JITORT_REGISTRY: dict[str, ShapeFn] = {}
# op_type -> tuple of value-input indices, or a function node -> tuple
_VALUE_INPUTS: dict[str, tuple | Callable[[ir.Node], tuple]] = {}

DATA_DEPENDENT = frozenset({
    "Compress", "NonZero", "Unique", "NonMaxSuppression", "StringSplit", "TfIdfVectorizer",
    "SequenceLength", "SplitToSequence", "Loop", "If", "Scan", "RegexFullMatch",
})


def register(*op_types: str, values: tuple | Callable[[ir.Node], tuple] = ()):
    """Decorator registering a shape function ``fn(node, shapes, values) -> list[shape]``."""
    def deco(fn: ShapeFn) -> ShapeFn:
        for op in op_types:
            _REGISTRY[op] = fn
            if values:
                _VALUE_INPUTS[op] = values
        return fn
    return deco


# ------------------------------------------------------------------------------------------
# public entry points
# ------------------------------------------------------------------------------------------
def _lookup(node: ir.Node) -> ShapeFn | None:
    d = node.domain
    if d == "jitort":
        return _JITORT_REGISTRY.get(node.op_type)
    if d and d != "ai.onnx":
        return None
    return _REGISTRY.get(node.op_type)


def has_shape_fn(node: ir.Node) -> bool:
    return _lookup(node) is not None


def value_inputs(node: ir.Node) -> tuple[int, ...]:
    if _lookup(node) is None or node.domain == "jitort":  # jitort's ops read no values
        return ()
    v = _VALUE_INPUTS.get(node.op_type, ())
    return v(node) if callable(v) else v


def infer(node: ir.Node, shapes: list, values: list) -> list[tuple[int, ...]]:
    fn = _lookup(node)
    if fn is None:
        if node.op_type in DATA_DEPENDENT and node.domain in ("", "ai.onnx"):
            raise NotImplementedError(
                f"{node.label}: output shape of {node.op_type} is data-dependent")
        raise NotImplementedError(f"{node.label}: no shape function for "
                                  f"{node.domain + '::' if node.domain else ''}{node.op_type}")
    return fn(node, shapes, values)


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    if not shapes:
        return ()
    out = tuple(shapes[0])
    for s in shapes[1:]:
        r = _bcast2(out, tuple(s))
        if r is None:
            raise ShapeError(f"shapes {', '.join(map(str, shapes))} are not broadcastable")
        out = r
    return out


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------
def _bcast2(a: tuple, b: tuple):
    """Broadcast two shape tuples; ``None`` when incompatible."""
    if a == b:
        return a
    la, lb = len(a), len(b)
    if la < lb:
        a = (1,) * (lb - la) + a
    elif lb < la:
        b = (1,) * (la - lb) + b
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(out)


def _fail(node: ir.Node, msg: str, shapes=None) -> ShapeError:
    if shapes is not None:
        msg = f"{msg}; input shapes {[None if s is None else tuple(s) for s in shapes]}"
    return ShapeError(f"node {node.label}: {msg}")


def _get(seq: list, i: int):
    return seq[i] if i < len(seq) else None


def _need(node: ir.Node, values: list, i: int):
    v = values[i] if i < len(values) else None
    if v is None:
        raise NotImplementedError(
            f"{node.label}: shape of {node.op_type} needs the value of input {i}, "
            "which is not known on the host")
    return v


def _ints(v) -> list:
    """A host value (array, list or scalar) as a flat list of Python ints."""
    if isinstance(v, np.ndarray):
        r = v.tolist()
        if not isinstance(r, list):
            return [int(r)]
        if v.ndim > 1:
            r = v.reshape(-1).tolist()
        if v.dtype.kind != "i":
            return [int(x) for x in r]
        return r
    if isinstance(v, (list, tuple)):
        return [int(x) for x in v]
    return [int(v)]


def _scalar(v):
    if isinstance(v, np.ndarray):
        return v.reshape(-1)[0].item() if v.size else None
    if isinstance(v, (list, tuple)):
        return v[0]
    return v


def _axis(node: ir.Node, axis: int, rank: int, shapes) -> int:
    if axis < -rank or axis >= rank:
        raise _fail(node, f"axis {axis} out of range for rank {rank}", shapes)
    return axis + rank if axis < 0 else axis


def _axes(node: ir.Node, axes, rank: int, shapes) -> list:
    out = []
    for a in axes:
        if a < -rank or a >= rank:
            raise _fail(node, f"axis {a} out of range for rank {rank}", shapes)
        out.append(a + rank if a < 0 else a)
    if len(set(out)) != len(out):
        raise _fail(node, f"duplicate axes {list(axes)}", shapes)
    return out


def _str(v, default: str) -> str:
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else v


def _prod(dims) -> int:
    p = 1
    for d in dims:
        p *= d
    return p


def _nout(node: ir.Node) -> int:
    return len(node.outputs)


def _rank_at_least(node, shapes, i, r):
    s = shapes[i]
    if s is None or len(s) < r:
        raise _fail(node, f"input {i} must have rank >= {r}", shapes)
    return s


def _present(node: ir.Node, *idx: int) -> tuple:
    ins = node.inputs
    return tuple(i for i in idx if i < len(ins) and ins[i] is not None)


