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
#: Shape functions of other domains' ops (onnxruntime's "com.microsoft"), by (domain, op_type).
_DOMAIN_REGISTRY: dict[tuple[str, str], ShapeFn] = {}
#: Output dtype functions ``fn(node) -> list[dtype | None]`` of other domains' ops, whose
#: outputs onnx's shape inference leaves untyped (it knows no schema of theirs).
_DOMAIN_DTYPES: dict[tuple[str, str], Callable] = {}
# op_type -> tuple of value-input indices, or a function node -> tuple
_VALUE_INPUTS: dict[str, tuple | Callable[[ir.Node], tuple]] = {}

DATA_DEPENDENT = frozenset({
    "Compress", "NonZero", "Unique", "NonMaxSuppression", "StringSplit", "TfIdfVectorizer",
    "SequenceLength", "SplitToSequence", "Loop", "If", "Scan", "RegexFullMatch",
})


def register(*op_types: str, values: tuple | Callable[[ir.Node], tuple] = (), domain: str = ""):
    """Decorator registering a shape function ``fn(node, shapes, values) -> list[shape]``.

    ``values``: the indices of the inputs whose values ``fn`` reads (or a function of the node
    giving them). ``domain="jitort"`` registers one of jitort's own ops, which read no values.
    Another domain (``"com.microsoft"``) registers by ``(domain, op_type)`` and reads no
    values either. An op registers once: the family modules are imported in any order."""
    if values and domain:
        raise ValueError(f"register: domain {domain!r} with values {values!r}")
    if domain in ("", "jitort"):
        registry: dict = _JITORT_REGISTRY if domain == "jitort" else _REGISTRY
        keys = {op: op for op in op_types}
    else:
        registry, keys = _DOMAIN_REGISTRY, {op: (domain, op) for op in op_types}

    def deco(fn: ShapeFn) -> ShapeFn:
        for op, key in keys.items():
            if key in registry:
                raise ValueError(f"{domain + '::' if domain else ''}{op} has a shape function "
                                 f"already ({registry[key].__module__})")
            registry[key] = fn
            if values:
                _VALUE_INPUTS[op] = values
        return fn
    return deco


def register_dtypes(*op_types: str, domain: str, attrs: bool = False):
    """Decorator registering ``fn(in_dtypes) -> list[dtype | None]`` (``in_dtypes``: one numpy
    dtype or None per input): the output dtypes of an op of another domain, which onnx's
    inference leaves untyped (and every value computed from them); applied by the importer.
    ``attrs=True``: ``fn(in_dtypes, attrs)`` also reads the node's attributes (a dict)."""
    def deco(fn):
        for op in op_types:
            _DOMAIN_DTYPES[(domain, op)] = fn if attrs else (lambda dts, _attrs, fn=fn: fn(dts))
        return fn
    return deco


def output_dtypes(domain: str, op_type: str, in_dtypes: list, attrs: dict | None = None
                  ) -> list | None:
    """The registered output dtypes of an op of ``domain`` given its inputs' and its
    attributes (None when the op has no dtype function)."""
    fn = _DOMAIN_DTYPES.get((domain, op_type))
    return None if fn is None else fn(in_dtypes, attrs or {})


# ------------------------------------------------------------------------------------------
# public entry points
# ------------------------------------------------------------------------------------------
def _lookup(node: ir.Node) -> ShapeFn | None:
    d = node.domain
    if d == "jitort":
        return _JITORT_REGISTRY.get(node.op_type)
    if d and d != "ai.onnx":
        return _DOMAIN_REGISTRY.get((d, node.op_type))
    return _REGISTRY.get(node.op_type)


def has_shape_fn(node: ir.Node) -> bool:
    return _lookup(node) is not None


def value_inputs(node: ir.Node) -> tuple[int, ...]:
    if _lookup(node) is None or node.domain not in ("", "ai.onnx"):  # only ONNX ops read values
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


def _moved_input(version: int, optional: bool = False):
    """``values=`` of an op whose attribute became input 1 at opset ``version`` (an optional
    input: read when present)."""
    def indices(node: ir.Node) -> tuple:
        if node.since_version < version:
            return ()
        return _present(node, 1) if optional else (1,)
    return indices


def _moved_ints(node: ir.Node, shapes, values, version: int, attr: str, default=None,
                optional: bool = False):
    """The ints of attribute ``attr`` (``default`` when absent) before opset ``version``, of
    input 1's value from then on (None when that ``optional`` input is absent)."""
    if node.since_version < version:
        return node.attrs.get(attr, default)
    if optional and _get(shapes, 1) is None:
        return None
    return _ints(_need(node, values, 1))


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




# ------------------------------------------------------------------------------------------
# shape rules several families share
# ------------------------------------------------------------------------------------------
def _same_shape(node: ir.Node, shapes) -> list:
    """Every output has input 0's shape (elementwise ops, normalizations, scatters, ...)."""
    s = shapes[0]
    if s is None:
        raise _fail(node, "input 0 is missing", shapes)
    n = len(node.outputs)
    return [s] if n == 1 else [s] * n


def _softmax_shape(node: ir.Node, shapes) -> list:
    """Softmax, LogSoftmax (norm) and Hardmax (scan): input 0's shape, the axis checked."""
    s = shapes[0]
    default = -1 if node.since_version >= 13 else 1
    a = node.attrs.get("axis", default)
    r = len(s)
    if r == 0 and node.since_version >= 13:
        raise _fail(node, "input must have rank >= 1", shapes)
    if r and (a < -r or a >= r):
        raise _fail(node, f"axis {a} out of range for rank {r}", shapes)
    return [s]


def _spatial_attrs(node, nd, shapes):
    at = node.attrs
    strides = at.get("strides") or [1] * nd
    dil = at.get("dilations") or [1] * nd
    pads = at.get("pads") or [0] * (2 * nd)
    if len(strides) != nd or len(dil) != nd or len(pads) != 2 * nd:
        raise _fail(node, f"strides/dilations/pads do not match {nd} spatial dims", shapes)
    return strides, dil, pads


def _window_out(node, ins, kernel, shapes, ceil_mode=False):
    """The spatial output dims of a sliding window (convolutions and pools)."""
    nd = len(ins)
    if len(kernel) != nd:
        raise _fail(node, f"kernel_shape {list(kernel)} does not match {nd} spatial dims", shapes)
    strides, dil, pads = _spatial_attrs(node, nd, shapes)
    auto = _str(node.attrs.get("auto_pad"), "NOTSET")
    out = []
    for i in range(nd):
        x, s = ins[i], strides[i]
        if s <= 0:
            raise _fail(node, f"stride {s} must be positive", shapes)
        dk = (kernel[i] - 1) * dil[i] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            out.append(-(-x // s))
            continue
        if auto == "VALID":
            p0 = p1 = 0
        else:
            p0, p1 = pads[i], pads[i + nd]
        num = x + p0 + p1 - dk
        if num < 0:
            raise _fail(node, f"window {dk} is larger than padded input {x + p0 + p1} "
                              f"along spatial dim {i}", shapes)
        if ceil_mode:
            o = -(-num // s) + 1
            if (o - 1) * s >= x + p0:
                o -= 1
        else:
            o = num // s + 1
        out.append(o)
    return out


def _conv_core(node, shapes, x, w):
    """The output shape of a convolution of ``x`` by weights ``w`` (Conv, its quantized and
    deformable forms, jitort's fused convolutions)."""
    if len(x) < 3 or len(w) != len(x):
        raise _fail(node, "X and W must have the same rank >= 3", shapes)
    group = node.attrs.get("group", 1)
    if x[1] != w[1] * group:
        raise _fail(node, f"input channels {x[1]} != W channels {w[1]} * group {group}", shapes)
    if w[0] % group:
        raise _fail(node, f"output channels {w[0]} not divisible by group {group}", shapes)
    kernel = node.attrs.get("kernel_shape") or w[2:]
    return [(x[0], w[0], *_window_out(node, x[2:], kernel, shapes))]


def _matmul_shape(node, a, b, shapes):
    """The shape of ``a @ b`` with numpy's matmul rules (MatMul and its quantized forms)."""
    la, lb = len(a), len(b)
    if la == 0 or lb == 0:
        raise _fail(node, "MatMul operands must have rank >= 1", shapes)
    if la >= 2 and lb >= 2:
        if a[-1] != b[-2]:
            raise _fail(node, f"inner dimensions differ ({a[-1]} vs {b[-2]})", shapes)
        if la == 2 and lb == 2:
            return (a[0], b[1])
        ba, bb = a[:-2], b[:-2]
        batch = ba if ba == bb else _bcast2(ba, bb)
        if batch is None:
            raise _fail(node, "batch dimensions are not broadcastable", shapes)
        return batch + (a[-2], b[-1])
    if la == 1 and lb == 1:
        if a[0] != b[0]:
            raise _fail(node, f"inner dimensions differ ({a[0]} vs {b[0]})", shapes)
        return ()
    if la == 1:  # (k) @ (..., k, n) -> (..., n)
        if a[0] != b[-2]:
            raise _fail(node, f"inner dimensions differ ({a[0]} vs {b[-2]})", shapes)
        return b[:-2] + (b[-1],)
    # (..., m, k) @ (k) -> (..., m)
    if a[-1] != b[0]:
        raise _fail(node, f"inner dimensions differ ({a[-1]} vs {b[0]})", shapes)
    return a[:-1]
