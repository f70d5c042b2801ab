"""Concrete shape inference: output shapes of one node from concrete input shapes.

At run time jitort plans every compiled node for each new set of input shapes, so this module is
pure Python on small tuples and lists and is written for speed (a few microseconds per node).

API
---
* :func:`infer` ``(node, shapes, values) -> list[tuple[int, ...]]``: one concrete shape per
  node output. ``shapes[i]`` is the shape of input ``i`` (``None`` for an omitted optional
  input); ``values[i]`` is the host-known value of input ``i`` or ``None``. Raises
  :class:`ShapeError` when the shapes contradict each other and ``NotImplementedError`` when the
  op has no shape function, is data-dependent, or needs a value that is ``None``.
* :func:`value_inputs` ``(node) -> tuple[int, ...]``: indices of the inputs whose *values* the
  shape function reads (per op and opset; only inputs that are present on the node).
* :func:`has_shape_fn` ``(node) -> bool``.
* :func:`broadcast_shapes` ``(*shapes) -> tuple[int, ...]``: numpy multidirectional broadcasting.

Data-dependent ops (``Compress``, ``NonZero``, ``Unique``, ``NonMaxSuppression``, ...) have no
shape function: their output shapes depend on the *contents* of their data inputs, so they
are not plannable ahead of execution. :func:`infer` raises ``NotImplementedError`` for them and
:func:`has_shape_fn` is ``False``.

The default ONNX domain (``""`` / ``"ai.onnx"``) is covered, and the ops jitort's own passes
create (domain ``"jitort"``: ``MatMulBias``, ``FusedConv``; see :mod:`jitort.passes.patterns`).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from . import ir
from .errors import InvalidInput

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


# ------------------------------------------------------------------------------------------
# elementwise
# ------------------------------------------------------------------------------------------
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


# ------------------------------------------------------------------------------------------
# matrix products
# ------------------------------------------------------------------------------------------
def _matmul_shape(node, a, b, shapes):
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


@register("MatMul", "MatMulInteger")
def _matmul(node, shapes, values):
    return [_matmul_shape(node, shapes[0], shapes[1], shapes)]


def _matmul_bias(node, shapes, values):
    """jitort.MatMulBias: the MatMul's shape (the bias is one row of its last dim)."""
    return [_matmul_shape(node, shapes[0], shapes[1], shapes)]


_JITORT_REGISTRY["MatMulBias"] = _matmul_bias


@register("QLinearMatMul")
def _qlinear_matmul(node, shapes, values):
    return [_matmul_shape(node, shapes[0], shapes[3], shapes)]


@register("Gemm")
def _gemm(node, shapes, values):
    a, b = shapes[0], shapes[1]
    if len(a) != 2 or len(b) != 2:
        raise _fail(node, "Gemm operands must be 2-D", shapes)
    at = node.attrs
    m, k = (a[1], a[0]) if at.get("transA", 0) else (a[0], a[1])
    k2, n = (b[1], b[0]) if at.get("transB", 0) else (b[0], b[1])
    if k != k2:
        raise _fail(node, f"inner dimensions differ ({k} vs {k2})", shapes)
    out = (m, n)
    c = _get(shapes, 2)
    if c is not None and c != out:
        if _bcast2(out, c) != out:
            raise _fail(node, f"C is not broadcastable to {out}", shapes)
    return [out]


@register("Einsum")
def _einsum(node, shapes, values):
    eq = _str(node.attrs.get("equation"), "").replace(" ", "")
    if "->" in eq:
        lhs, rhs = eq.split("->")
    else:
        lhs, rhs = eq, None
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise _fail(node, f"equation {eq!r} has {len(terms)} operands, got {len(shapes)}", shapes)
    dims: dict[str, int] = {}
    counts: dict[str, int] = {}
    ell = ()
    for term, s in zip(terms, shapes):
        if "..." in term:
            pre, post = term.split("...")
            ne = len(s) - len(pre) - len(post)
            if ne < 0:
                raise _fail(node, f"operand rank {len(s)} too small for {term!r}", shapes)
            e = tuple(s[len(pre):len(pre) + ne])
            r = _bcast2(ell, e)
            if r is None:
                raise _fail(node, "ellipsis dimensions are not broadcastable", shapes)
            ell = r
            letters = list(pre) + list(post)
            ldims = list(s[:len(pre)]) + list(s[len(pre) + ne:])
        else:
            if len(term) != len(s):
                raise _fail(node, f"operand rank {len(s)} does not match {term!r}", shapes)
            letters, ldims = list(term), list(s)
        for c, d in zip(letters, ldims):
            counts[c] = counts.get(c, 0) + 1
            old = dims.get(c)
            if old is None or old == 1:
                dims[c] = d
            elif d != old and d != 1:
                raise _fail(node, f"dimension {c!r} is {old} and {d}", shapes)
    if rhs is None:
        out_letters = "".join(sorted(c for c, n in counts.items() if n == 1))
        return [ell + tuple(dims[c] for c in out_letters)]
    if "..." in rhs:
        pre, post = rhs.split("...")
        return [tuple(dims[c] for c in pre) + ell + tuple(dims[c] for c in post)]
    return [tuple(dims[c] for c in rhs)]


# ------------------------------------------------------------------------------------------
# convolution and pooling
# ------------------------------------------------------------------------------------------
def _spatial_attrs(node, nd, shapes):
    at = node.attrs
    strides = at.get("strides") or [1] * nd
    dil = at.get("dilations") or [1] * nd
    pads = at.get("pads") or [0] * (2 * nd)
    if len(strides) != nd or len(dil) != nd or len(pads) != 2 * nd:
        raise _fail(node, f"strides/dilations/pads do not match {nd} spatial dims", shapes)
    return strides, dil, pads


def _window_out(node, ins, kernel, shapes, ceil_mode=False):
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
    if len(x) < 3 or len(w) != len(x):
        raise _fail(node, "X and W must have the same rank >= 3", shapes)
    group = node.attrs.get("group", 1)
    if x[1] != w[1] * group:
        raise _fail(node, f"input channels {x[1]} != W channels {w[1]} * group {group}", shapes)
    if w[0] % group:
        raise _fail(node, f"output channels {w[0]} not divisible by group {group}", shapes)
    kernel = node.attrs.get("kernel_shape") or w[2:]
    return [(x[0], w[0], *_window_out(node, x[2:], kernel, shapes))]


@register("Conv", "ConvInteger", "DeformConv")
def _conv(node, shapes, values):
    return _conv_core(node, shapes, shapes[0], shapes[1])


def _fused_conv(node, shapes, values):
    """jitort.FusedConv: the Conv's output; the optional residual (input 3) must match it."""
    out = _conv_core(node, shapes, shapes[0], shapes[1])
    res = _get(shapes, 3)
    if res is not None and tuple(res) != tuple(out[0]):
        raise _fail(node, f"residual shape {tuple(res)} differs from the conv output "
                          f"{tuple(out[0])}", shapes)
    return out


_JITORT_REGISTRY["FusedConv"] = _fused_conv


@register("QLinearConv")
def _qlinear_conv(node, shapes, values):
    return _conv_core(node, shapes, shapes[0], shapes[3])


@register("ConvTranspose")
def _conv_transpose(node, shapes, values):
    x, w = shapes[0], shapes[1]
    if len(x) < 3 or len(w) != len(x):
        raise _fail(node, "X and W must have the same rank >= 3", shapes)
    at = node.attrs
    group = at.get("group", 1)
    if x[1] != w[0]:
        raise _fail(node, f"input channels {x[1]} != W dim 0 {w[0]}", shapes)
    nd = len(x) - 2
    c_out = w[1] * group
    kernel = at.get("kernel_shape") or w[2:]
    out_shape = at.get("output_shape")
    if out_shape:
        sp = list(out_shape[-nd:])
        if len(sp) != nd:
            raise _fail(node, f"output_shape {out_shape} does not match {nd} spatial dims", shapes)
        return [(x[0], c_out, *sp)]
    strides, dil, pads = _spatial_attrs(node, nd, shapes)
    opad = at.get("output_padding") or [0] * nd
    auto = _str(at.get("auto_pad"), "NOTSET")
    sp = []
    for i in range(nd):
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = x[2 + i] * strides[i]
        else:
            p = 0 if auto == "VALID" else pads[i] + pads[i + nd]
            o = strides[i] * (x[2 + i] - 1) + opad[i] + (kernel[i] - 1) * dil[i] + 1 - p
        if o < 0:
            raise _fail(node, f"negative output dim {o}", shapes)
        sp.append(o)
    return [(x[0], c_out, *sp)]


@register("MaxPool", "AveragePool", "LpPool")
def _pool(node, shapes, values):
    x = shapes[0]
    if len(x) < 3:
        raise _fail(node, "input must have rank >= 3", shapes)
    kernel = node.attrs.get("kernel_shape")
    if not kernel:
        raise _fail(node, "kernel_shape attribute is required", shapes)
    out = (x[0], x[1], *_window_out(node, x[2:], kernel, shapes,
                                     bool(node.attrs.get("ceil_mode", 0))))
    n = len(node.outputs)
    return [out] if n == 1 else [out] * n


@register("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def _global_pool(node, shapes, values):
    x = shapes[0]
    if len(x) < 2:
        raise _fail(node, "input must have rank >= 2", shapes)
    return [(x[0], x[1]) + (1,) * (len(x) - 2)]


@register("MaxUnpool", values=lambda n: _present(n, 2))
def _max_unpool(node, shapes, values):
    x = shapes[0]
    if _get(shapes, 2) is not None:
        out = tuple(_ints(_need(node, values, 2)))
        if len(out) != len(x):
            raise _fail(node, f"output_shape {out} has the wrong rank", shapes)
        return [out]
    nd = len(x) - 2
    kernel = node.attrs.get("kernel_shape")
    strides, _, pads = _spatial_attrs(node, nd, shapes)
    sp = [(x[2 + i] - 1) * strides[i] + kernel[i] - pads[i] - pads[i + nd] for i in range(nd)]
    return [(x[0], x[1], *sp)]


@register("RoiAlign")
def _roi_align(node, shapes, values):
    x, rois = shapes[0], shapes[1]
    at = node.attrs
    return [(rois[0], x[1], at.get("output_height", 1), at.get("output_width", 1))]


@register("GridSample")
def _grid_sample(node, shapes, values):
    x, g = shapes[0], shapes[1]
    return [(x[0], x[1], *g[1:-1])]


# ------------------------------------------------------------------------------------------
# normalization
# ------------------------------------------------------------------------------------------
@register("BatchNormalization")
def _batchnorm(node, shapes, values):
    x = shapes[0]
    n = len(node.outputs)
    if n == 1:
        return [x]
    out = [x]
    for i in range(1, n):
        src = 3 if i in (1, 3) else 4  # running/saved mean from mean, var from var
        s = _get(shapes, src) or shapes[1]
        out.append(s)
    return out


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


# ------------------------------------------------------------------------------------------
# reductions
# ------------------------------------------------------------------------------------------
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


@register("ArgMax", "ArgMin")
def _argmax(node, shapes, values):
    x = shapes[0]
    a = _axis(node, node.attrs.get("axis", 0), len(x), shapes)
    if node.attrs.get("keepdims", 1):
        return [x[:a] + (1,) + x[a + 1:]]
    return [x[:a] + x[a + 1:]]


@register("TopK", values=lambda n: (1,) if n.since_version >= 10 else ())
def _topk(node, shapes, values):
    x = shapes[0]
    if node.since_version >= 10:
        k = _ints(_need(node, values, 1))
        if len(k) != 1:
            raise _fail(node, f"K must hold one value, got {k}", shapes)
        k = k[0]
    else:
        k = node.attrs.get("k")
    a = _axis(node, node.attrs.get("axis", -1), len(x), shapes)
    if k < 0 or k > x[a]:
        raise _fail(node, f"k={k} is out of range for axis {a} of size {x[a]}", shapes)
    out = x[:a] + (k,) + x[a + 1:]
    return [out] * len(node.outputs)


# ------------------------------------------------------------------------------------------
# shape manipulation
# ------------------------------------------------------------------------------------------
@register("Reshape", values=lambda n: (1,) if n.since_version >= 5 else ())
def _reshape(node, shapes, values):
    x = shapes[0]
    if node.since_version >= 5:
        target = _ints(_need(node, values, 1))
    else:
        target = list(node.attrs.get("shape", ()))
    allowzero = node.attrs.get("allowzero", 0) if node.since_version >= 14 else 0
    out = []
    neg = -1
    known = 1
    for i, d in enumerate(target):
        if d == -1:
            if neg >= 0:
                raise _fail(node, f"target shape {target} has more than one -1", shapes)
            neg = i
            out.append(-1)
            continue
        if d == 0 and not allowzero:
            if i >= len(x):
                raise _fail(node, f"target shape {target}: 0 at index {i} has no input dim",
                            shapes)
            d = x[i]
        elif d < 0:
            raise _fail(node, f"target shape {target} has a negative dim", shapes)
        known *= d
        out.append(d)
    total = _prod(x)
    if neg >= 0:
        if known == 0:
            if total != 0 or allowzero:
                raise _fail(node, f"cannot infer -1 in target shape {target}", shapes)
            raise _fail(node, f"-1 in target shape {target} is ambiguous for an empty input",
                        shapes)
        if total % known:
            raise _fail(node, f"cannot reshape {total} elements into {target}", shapes)
        out[neg] = total // known
    elif known != total:
        raise _fail(node, f"cannot reshape {total} elements into {target}", shapes)
    return [tuple(out)]


@register("Flatten")
def _flatten(node, shapes, values):
    x = shapes[0]
    r = len(x)
    a = node.attrs.get("axis", 1)
    if a < -r or a > r:
        raise _fail(node, f"axis {a} out of range for rank {r}", shapes)
    if a < 0:
        a += r
    return [(_prod(x[:a]), _prod(x[a:]))]


@register("Squeeze", values=lambda n: _present(n, 1) if n.since_version >= 13 else ())
def _squeeze(node, shapes, values):
    x = shapes[0]
    if node.since_version >= 13:
        axes = _ints(_need(node, values, 1)) if _get(shapes, 1) is not None else None
    else:
        axes = node.attrs.get("axes")
    if not axes:  # no axes (or an empty axes tensor, as onnxruntime reads it): all 1-dims
        return [tuple(d for d in x if d != 1)]
    ax = _axes(node, axes, len(x), shapes)
    for a in ax:
        if x[a] != 1:
            raise _fail(node, f"cannot squeeze axis {a} of size {x[a]}", shapes)
    return [tuple(d for i, d in enumerate(x) if i not in ax)]


@register("Unsqueeze", values=lambda n: (1,) if n.since_version >= 13 else ())
def _unsqueeze(node, shapes, values):
    x = shapes[0]
    if node.since_version >= 13:
        axes = _ints(_need(node, values, 1))
    else:
        axes = node.attrs.get("axes") or []
    r = len(x) + len(axes)
    ax = _axes(node, axes, r, shapes)
    out = []
    it = iter(x)
    for i in range(r):
        out.append(1 if i in ax else next(it))
    return [tuple(out)]


@register("Transpose")
def _transpose(node, shapes, values):
    x = shapes[0]
    perm = node.attrs.get("perm")
    r = len(x)
    if perm is None:
        return [x[::-1]]
    if len(perm) != r or sorted(perm) != list(range(r)):
        raise _fail(node, f"perm {list(perm)} is not a permutation of rank {r}", shapes)
    return [tuple(x[p] for p in perm)]


@register("Concat")
def _concat(node, shapes, values):
    ins = [s for s in shapes if s is not None]
    if not ins:
        raise _fail(node, "no inputs", shapes)
    first = ins[0]
    r = len(first)
    a = _axis(node, node.attrs.get("axis", 1), r, shapes)
    total = 0
    for s in ins:
        if len(s) != r:
            raise _fail(node, "inputs have different ranks", shapes)
        for i in range(r):
            if i != a and s[i] != first[i]:
                raise _fail(node, f"inputs differ along axis {i}", shapes)
        total += s[a]
    return [first[:a] + (total,) + first[a + 1:]]


def _split_values(node):
    if node.since_version >= 13:
        return _present(node, 1)
    if node.since_version < 2 and not node.attrs.get("split"):
        return _present(node, 1)  # Split-1 could take the sizes as a second input
    return ()


@register("Split", values=_split_values)
def _split(node, shapes, values):
    x = shapes[0]
    a = _axis(node, node.attrs.get("axis", 0), len(x), shapes)
    n = len(node.outputs)
    dim = x[a]
    if node.since_version >= 13:
        split = _ints(_need(node, values, 1)) if _get(shapes, 1) is not None else None
    elif node.since_version >= 2:
        split = node.attrs.get("split")
    else:  # opset 1: split attr or second input
        split = node.attrs.get("split")
        if not split and _get(shapes, 1) is not None:
            split = _ints(_need(node, values, 1))
    if split:
        if len(split) != n:
            raise _fail(node, f"split {split} has {len(split)} entries for {n} outputs", shapes)
        if sum(split) != dim or min(split) < 0:
            raise _fail(node, f"split {split} does not add up to dim {dim}", shapes)
    else:
        num = node.attrs.get("num_outputs") if node.since_version >= 18 else None
        if num is not None:
            if num != n:
                raise _fail(node, f"num_outputs={num} but the node has {n} outputs", shapes)
            chunk = -(-dim // n)
            split = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
            if split[-1] < 0:
                raise _fail(node, f"cannot split dim {dim} into {n} outputs", shapes)
        else:
            if dim % n:
                raise _fail(node, f"dim {dim} is not divisible into {n} equal parts", shapes)
            split = [dim // n] * n
    return [x[:a] + (s,) + x[a + 1:] for s in split]


def _slice_values(node):
    if node.since_version >= 10:
        return _present(node, 1, 2, 3, 4)
    return ()


@register("Slice", values=_slice_values)
def _slice(node, shapes, values):
    x = shapes[0]
    if node.since_version >= 10:
        starts = _ints(_need(node, values, 1))
        ends = _ints(_need(node, values, 2))
        axes = _ints(_need(node, values, 3)) if _get(shapes, 3) is not None else None
        steps = _ints(_need(node, values, 4)) if _get(shapes, 4) is not None else None
    else:
        at = node.attrs
        starts, ends, axes, steps = at.get("starts"), at.get("ends"), at.get("axes"), None
    n = len(starts)
    if len(ends) != n or (axes is not None and len(axes) != n) or \
            (steps is not None and len(steps) != n):
        raise _fail(node, "starts/ends/axes/steps have different lengths", shapes)
    r = len(x)
    if axes is None:
        axes = range(n)
        if n > r:
            raise _fail(node, f"{n} slice entries for rank {r}", shapes)
    else:
        axes = _axes(node, axes, r, shapes)
    out = list(x)
    for i, a in enumerate(axes):
        st = 1 if steps is None else steps[i]
        if st == 0:
            raise _fail(node, "slice step must not be 0", shapes)
        out[a] = len(range(*slice(starts[i], ends[i], st).indices(x[a])))
    return [tuple(out)]


@register("Gather")
def _gather(node, shapes, values):
    x, idx = shapes[0], shapes[1]
    a = _axis(node, node.attrs.get("axis", 0), len(x), shapes)
    return [x[:a] + tuple(idx) + x[a + 1:]]


@register("GatherElements")
def _gather_elements(node, shapes, values):
    x, idx = shapes[0], shapes[1]
    if len(x) != len(idx):
        raise _fail(node, "data and indices must have the same rank", shapes)
    _axis(node, node.attrs.get("axis", 0), len(x), shapes)
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


@register("Tile", values=(1,))
def _tile(node, shapes, values):
    x = shapes[0]
    reps = _ints(_need(node, values, 1))
    if len(reps) != len(x):
        raise _fail(node, f"repeats {reps} do not match rank {len(x)}", shapes)
    out = []
    for d, r in zip(x, reps):
        if r < 0:
            raise _fail(node, f"negative repeats {reps}", shapes)
        out.append(d * r)
    return [tuple(out)]


def _pad_values(node):
    if node.since_version >= 11:
        return _present(node, 1, 3)
    return ()


@register("Pad", values=_pad_values)
def _pad(node, shapes, values):
    x = shapes[0]
    r = len(x)
    if node.since_version >= 11:
        pads = _ints(_need(node, values, 1))
        axes = _ints(_need(node, values, 3)) if _get(shapes, 3) is not None else None
    else:
        pads = node.attrs.get("pads", node.attrs.get("paddings"))
        axes = None
    if axes is None:
        axes = range(r)
    else:
        axes = _axes(node, axes, r, shapes)
    na = len(axes)
    if len(pads) != 2 * na:
        raise _fail(node, f"pads {pads} must have {2 * na} entries", shapes)
    out = list(x)
    for i, a in enumerate(axes):
        d = x[a] + pads[i] + pads[i + na]
        if d < 0:
            raise _fail(node, f"pads {pads} make dim {a} negative", shapes)
        out[a] = d
    return [tuple(out)]


@register("CenterCropPad", values=(1,))
def _center_crop_pad(node, shapes, values):
    x = shapes[0]
    sizes = _ints(_need(node, values, 1))
    axes = node.attrs.get("axes")
    axes = range(len(x)) if axes is None else _axes(node, axes, len(x), shapes)
    if len(sizes) != len(axes):
        raise _fail(node, f"shape {sizes} does not match axes", shapes)
    out = list(x)
    for a, s in zip(axes, sizes):
        out[a] = s
    return [tuple(out)]


@register("Shape")
def _shape(node, shapes, values):
    r = len(shapes[0])
    if node.since_version >= 15:
        start = node.attrs.get("start", 0)
        end = node.attrs.get("end")
        return [(len(range(*slice(start, end).indices(r))),)]
    return [(r,)]


@register("Size")
def _size(node, shapes, values):
    return [()]


@register("ConstantOfShape", values=(0,))
def _constant_of_shape(node, shapes, values):
    out = tuple(_ints(_need(node, values, 0))) if shapes[0] != (0,) else ()
    for d in out:
        if d < 0:
            raise _fail(node, f"negative dim in shape {out}", shapes)
    return [out]


@register("Constant")
def _constant(node, shapes, values):
    at = node.attrs
    for key in ("value", "sparse_value"):
        v = at.get(key)
        if v is not None:
            return [tuple(int(d) for d in np.shape(v))]
    for key in ("value_floats", "value_ints", "value_strings"):
        v = at.get(key)
        if v is not None:
            return [(len(v),)]
    return [()]


@register("Range", values=(0, 1, 2))
def _range(node, shapes, values):
    start = _scalar(_need(node, values, 0))
    limit = _scalar(_need(node, values, 1))
    delta = _scalar(_need(node, values, 2))
    if delta == 0:
        raise _fail(node, "Range delta must not be 0", shapes)
    if isinstance(start, int) and isinstance(limit, int) and isinstance(delta, int):
        n = -((start - limit) // delta)
    else:
        n = math.ceil((limit - start) / delta)
    return [(max(int(n), 0),)]


@register("HannWindow", "HammingWindow", "BlackmanWindow", values=(0,))
def _window(node, shapes, values):
    n = _ints(_need(node, values, 0))[0]
    if n < 0:
        raise _fail(node, f"negative window size {n}", shapes)
    return [(n,)]


def _resize_values(node):
    if node.op_type == "Upsample":
        return (1,) if node.since_version >= 9 else ()
    if node.since_version < 11:
        return (1,)
    return _present(node, 2, 3)


def _resize_scales(node, x, scales, axes, shapes):
    if len(scales) != len(axes):
        raise _fail(node, f"scales {scales} do not match the {len(axes)} resized axes", shapes)
    out = list(x)
    prod = np.asarray([x[a] for a in axes], np.float32) * np.asarray(scales, np.float32)
    for a, p, s in zip(axes, prod.tolist(), scales):
        if s <= 0:
            raise _fail(node, f"scales must be positive, got {list(scales)}", shapes)
        out[a] = int(math.floor(p))  # float32 product, as onnxruntime computes it
    return tuple(out)


@register("Resize", "Upsample", values=_resize_values)
def _resize(node, shapes, values):
    x = shapes[0]
    r = len(x)
    if node.op_type == "Upsample" and node.since_version < 9:
        return [_resize_scales(node, x, node.attrs.get("scales"), range(r), shapes)]
    if node.op_type == "Upsample" or node.since_version < 11:
        scales = np.asarray(_need(node, values, 1), np.float32).reshape(-1).tolist()
        return [_resize_scales(node, x, scales, range(r), shapes)]
    at = node.attrs
    axes = at.get("axes") if node.since_version >= 18 else None
    axes = list(range(r)) if axes is None else _axes(node, axes, r, shapes)
    sizes = None
    if _get(shapes, 3) is not None and _prod(shapes[3]) > 0:
        sizes = _ints(_need(node, values, 3))
    if sizes is None:
        if _get(shapes, 2) is None or _prod(shapes[2]) == 0:
            raise _fail(node, "Resize needs scales or sizes", shapes)
        scales = np.asarray(_need(node, values, 2), np.float32).reshape(-1).tolist()
        return [_resize_scales(node, x, scales, axes, shapes)]
    if len(sizes) != len(axes):
        raise _fail(node, f"sizes {sizes} do not match the {len(axes)} resized axes", shapes)
    out = list(x)
    policy = _str(at.get("keep_aspect_ratio_policy"), "stretch")
    if policy == "stretch" or node.since_version < 18:
        for a, s in zip(axes, sizes):
            if s < 0:
                raise _fail(node, f"negative size in {sizes}", shapes)
            out[a] = s
        return [tuple(out)]
    ratios = [s / x[a] for a, s in zip(axes, sizes)]
    if policy == "not_larger":
        scale = min(ratios)
    elif policy == "not_smaller":
        scale = max(ratios)
    else:
        raise _fail(node, f"unknown keep_aspect_ratio_policy {policy!r}", shapes)
    for a in axes:
        out[a] = int(scale * x[a] + 0.5)
    return [tuple(out)]


@register("DepthToSpace")
def _depth_to_space(node, shapes, values):
    x = shapes[0]
    if len(x) != 4:
        raise _fail(node, "input must be 4-D", shapes)
    b = node.attrs.get("blocksize")
    if x[1] % (b * b):
        raise _fail(node, f"channels {x[1]} not divisible by blocksize^2 = {b * b}", shapes)
    return [(x[0], x[1] // (b * b), x[2] * b, x[3] * b)]


@register("SpaceToDepth")
def _space_to_depth(node, shapes, values):
    x = shapes[0]
    if len(x) != 4:
        raise _fail(node, "input must be 4-D", shapes)
    b = node.attrs.get("blocksize")
    if x[2] % b or x[3] % b:
        raise _fail(node, f"spatial dims not divisible by blocksize {b}", shapes)
    return [(x[0], x[1] * b * b, x[2] // b, x[3] // b)]


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


@register("Det")
def _det(node, shapes, values):
    x = _rank_at_least(node, shapes, 0, 2)
    if x[-1] != x[-2]:
        raise _fail(node, "Det needs square matrices", shapes)
    return [x[:-2]]


@register("DynamicQuantizeLinear")
def _dql(node, shapes, values):
    return [shapes[0], (), ()]


@register("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")
def _loss(node, shapes, values):
    red = _str(node.attrs.get("reduction"), "mean")
    loss = shapes[1] if red == "none" else ()
    out = [loss]
    if len(node.outputs) > 1:
        out.append(shapes[0])
    return out


# ------------------------------------------------------------------------------------------
# recurrent and signal ops
# ------------------------------------------------------------------------------------------
@register("RNN", "GRU", "LSTM")
def _rnn(node, shapes, values):
    x, r = shapes[0], shapes[2]
    if len(x) != 3 or len(r) != 3:
        raise _fail(node, "X and R must be 3-D", shapes)
    at = node.attrs
    hidden = at.get("hidden_size") or r[-1]
    nd = 2 if _str(at.get("direction"), "forward") == "bidirectional" else 1
    if r[0] != nd:
        raise _fail(node, f"R has {r[0]} directions, expected {nd}", shapes)
    if at.get("layout", 0):
        batch, seq = x[0], x[1]
        y, yh = (batch, seq, nd, hidden), (batch, nd, hidden)
    else:
        seq, batch = x[0], x[1]
        y, yh = (seq, nd, batch, hidden), (nd, batch, hidden)
    return [y] + [yh] * (len(node.outputs) - 1)


@register("Col2Im", values=(1, 2))
def _col2im(node, shapes, values):
    x = shapes[0]
    image = _ints(_need(node, values, 1))
    block = _ints(_need(node, values, 2))
    if len(x) != 3 or len(image) != len(block):
        raise _fail(node, "input must be 3-D and image_shape/block_shape of equal length",
                    shapes)
    bp = _prod(block)
    if bp == 0 or x[1] % bp:
        raise _fail(node, f"dim 1 ({x[1]}) not divisible by prod(block_shape)={bp}", shapes)
    return [(x[0], x[1] // bp, *image)]


@register("AffineGrid", values=(1,))
def _affine_grid(node, shapes, values):
    size = _ints(_need(node, values, 1))
    if len(size) == 4:
        return [(size[0], size[2], size[3], 2)]
    if len(size) == 5:
        return [(size[0], size[2], size[3], size[4], 3)]
    raise _fail(node, f"size {size} must have 4 or 5 entries", shapes)


def _dft_values(node):
    return _present(node, 1, 2) if node.since_version >= 20 else _present(node, 1)


@register("DFT", values=_dft_values)
def _dft(node, shapes, values):
    x = shapes[0]
    r = len(x)
    if r < 2 or x[-1] not in (1, 2):
        raise _fail(node, "input must end with a dim of 1 (real) or 2 (complex)", shapes)
    at = node.attrs
    if node.since_version >= 20:
        axis = _ints(_need(node, values, 2))[0] if _get(shapes, 2) is not None else -2
        if axis < -r or axis >= r - 1 or axis == -1:
            raise _fail(node, f"axis {axis} out of range", shapes)
        axis = axis + r if axis < 0 else axis
    else:
        axis = _axis(node, at.get("axis", 1), r - 1, shapes)
    onesided, inverse = at.get("onesided", 0), at.get("inverse", 0)
    if _get(shapes, 1) is not None:
        n = _ints(_need(node, values, 1))[0]
        if n < 0:
            raise _fail(node, f"negative dft_length {n}", shapes)
    else:
        n = 2 * (x[axis] - 1) if onesided and inverse else x[axis]
    out = list(x)
    if onesided and not inverse:
        n = n // 2 + 1
    out[axis] = n
    out[-1] = 1 if onesided and inverse else 2  # inverse one-sided (irfft) gives real output
    return [tuple(out)]


@register("STFT", values=lambda n: (1,) + _present(n, 3))
def _stft(node, shapes, values):
    x = shapes[0]
    if len(x) != 3:
        raise _fail(node, "signal must be 3-D", shapes)
    step = _ints(_need(node, values, 1))[0]
    if _get(shapes, 3) is not None:
        flen = _ints(_need(node, values, 3))[0]
    elif _get(shapes, 2) is not None:
        flen = shapes[2][0]
    else:
        raise _fail(node, "STFT needs a window or frame_length", shapes)
    if step <= 0 or flen <= 0 or flen > x[1]:
        raise _fail(node, f"bad frame_step {step} / frame_length {flen}", shapes)
    frames = (x[1] - flen) // step + 1
    bins = flen // 2 + 1 if node.attrs.get("onesided", 1) else flen
    return [(x[0], frames, bins, 2)]
