"""Helpers the op-family lowerings share: dtype predicates, axis arithmetic, fused activation
codes and literals."""
from __future__ import annotations

import math

import numpy as np

from ...ir import Node
from ..elementwise import BOOL, FLOATS, HALF, NUMERIC
from ..lowprec import is_lowp
from ..registry import Unlowerable

_F = tuple(FLOATS)
#: dtypes Numba can take as array arguments (float16, bfloat16, float8, int4, strings... cannot)
_PLAIN = tuple(NUMERIC) + (BOOL,)


def _prod(xs) -> int:
    return math.prod(xs)  # keeps symbolic sizes symbolic (see codegen/symbolic.py)


def _is_float(*vals) -> bool:
    return all(v is not None and v.dtype is not None and np.dtype(v.dtype) in _F for v in vals)


def _plain(n: Node) -> bool:
    """Every present input and output has a dtype the generated code can handle."""
    return all(v.dtype is not None and np.dtype(v.dtype) in _PLAIN
               for v in list(n.all_inputs()) + list(n.outputs) if v is not None)


def _words(n: Node) -> bool:
    """Like :func:`_plain`, also taking float16 / bfloat16 and the low-precision types: for
    ops that only move elements (the generated code sees their uint16 words / their bytes)."""
    return all(v.dtype is not None and (np.dtype(v.dtype) in _PLAIN + HALF or is_lowp(v.dtype))
               for v in list(n.all_inputs()) + list(n.outputs) if v is not None)


def _float_io(n: Node) -> bool:
    return _is_float(n.inputs[0], *n.outputs[:1])


def host_value(em, n: Node, v, what: str | None = None):
    """The contents of value input ``v`` (a constant or a host-known value) as a numpy array;
    None when ``v`` is None; Unlowerable (naming ``what``, else ``v``) when not known ahead."""
    if v is None:
        return None
    got = v.const if v.is_const else em.hostvals.get(id(v))
    if got is None:
        raise Unlowerable(n, f"{what or v.name} is not known ahead")
    return np.asarray(got)


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _3d(shape, axis) -> tuple[int, int, int]:
    return _prod(shape[:axis]), shape[axis], _prod(shape[axis + 1:])


def input_shape(em, n: Node, min_rank: int):
    """The shape of ``n``'s first input; Unlowerable when its rank is below ``min_rank``."""
    shape = em.shape(n.inputs[0])
    if len(shape) < min_rank:
        raise Unlowerable(n, f"{n.op_type} of a rank-{len(shape)} input (needs rank >= "
                             f"{min_rank})")
    return shape


def axis_dims(em, n: Node, v, default: int = 0) -> tuple[int, tuple]:
    """``n``'s ``axis`` attribute (default ``default``) over ``v``'s shape, and the
    (outer, extent, inner) sizes around it: the 3-D view of Concat, Split and Gather."""
    shape = em.shape(v)
    axis = _axis(n.attrs.get("axis", default), len(shape))
    return axis, _3d(shape, axis)


def int_indices(n: Node) -> bool:
    """Input 1 (a Gather's indices) is int32 or int64."""
    return np.dtype(n.inputs[1].dtype) in (np.dtype(np.int32), np.dtype(np.int64))


def gather_dims(em, n: Node) -> tuple:
    """(outer, axis extent, index count, inner) sizes of a Gather; Unlowerable on a scalar."""
    data, idx = n.inputs[0], n.inputs[1]
    if not em.shape(data):
        raise Unlowerable(n, "Gather on a scalar")
    _, (o, a, i) = axis_dims(em, n, data)
    return o, a, _prod(em.shape(idx)), i


def softmax_dims(n: Node, shape) -> tuple[int, int, int]:
    """(outer, axis, inner) sizes of a Softmax-like op (Softmax, LogSoftmax, Hardmax) over
    ``shape`` (rank >= 1): from opset 13 its one ``axis`` (default -1); before, the 2-D
    coercion, rows of prod(shape[axis:]) (default axis 1)."""
    rank = len(shape)
    if n.since_version >= 13:
        return _3d(shape, _axis(n.attrs.get("axis", -1), rank))
    axis = _axis(n.attrs.get("axis", 1), rank)
    return _prod(shape[:axis]), _prod(shape[axis:]), 1


def loop_copy_kernel(em, name: str, r: int, idx_in: list[str], tail: str = ""):
    """A generated njit kernel ``(y, x)`` that loops over the ``r`` axes of ``y`` (index
    ``i<k>`` for axis k) and copies ``x[idx_in]`` into it: a transpose / axis permutation, or a
    diagonal when an index repeats. ``tail`` ends both subscripts (einsum's diagonals: ",")."""
    lines = ["@njit(cache=True, error_model='numpy')", "def __KNAME__(y, x):"]
    ind = "    "
    for k in range(r):
        lines.append(f"{ind}for i{k} in range(y.shape[{k}]):")
        ind += "    "
    yi = ", ".join(f"i{k}" for k in range(r))
    lines.append(f"{ind}y[{yi}{tail}] = x[{', '.join(idx_in)}{tail}]")
    return em.generated(name, "\n".join(lines) + "\n")


#: Fused activations (``activation`` attribute of MatMulBias / FusedConv) -> the kernels' codes
#: (``kernels/cpu/epilogue.py``; Gelu is the erf form).
ACT_CODES = {"": 0, "Relu": 1, "Gelu": 2, "Sigmoid": 3, "Tanh": 4, "LeakyRelu": 5, "Clip": 6,
             "Swish": 7, "HardSigmoid": 8, "HardSwish": 9, "GeluTanh": 10}


def _conv_pads(n: Node, in_sp, k_sp, strides, dil, out_sp) -> list[int]:
    """Begin pads per spatial axis, resolving auto_pad."""
    auto = n.attrs.get("auto_pad", "NOTSET")
    r = len(in_sp)
    if auto in ("NOTSET", ""):
        pads = list(n.attrs.get("pads", [0] * (2 * r)))
        return pads[:r]
    if auto == "VALID":
        return [0] * r
    begins = []
    for ax in range(r):
        total = max(0, (out_sp[ax] - 1) * strides[ax] + (k_sp[ax] - 1) * dil[ax] + 1 - in_sp[ax])
        begins.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
    return begins


def _conv_geometry(em, n: Node):
    """Shapes as the 2-D kernels take them (a 1-D conv gets height 1), strides, dilations, begin
    pads and group of a Conv or FusedConv. Shared by the Conv, FusedConv and DeformConv lowerings (CPU and CUDA)."""
    x, w, y = n.inputs[0], n.inputs[1], n.outputs[0]
    xs, ws, ys = em.shape(x), em.shape(w), em.shape(y)
    if len(xs) not in (3, 4):
        raise Unlowerable(n, f"{len(xs) - 2}-D convolution")
    sp = len(xs) - 2
    strides = list(n.attrs.get("strides", [1] * sp))
    dil = list(n.attrs.get("dilations", [1] * sp))
    pads = _conv_pads(n, xs[2:], ws[2:], strides, dil, ys[2:])
    if sp == 1:  # 1-D as 2-D with height 1
        xs, ws, ys = xs[:2] + (1,) + xs[2:], ws[:2] + (1,) + ws[2:], ys[:2] + (1,) + ys[2:]
        strides, dil, pads = [1] + strides, [1] + dil, [0] + pads
    return tuple(xs), tuple(ws), tuple(ys), strides, dil, pads, int(n.attrs.get("group", 1))


def act_args(n: Node) -> tuple[int, float, float]:
    """(code, alpha, beta) of the fused activation of a MatMulBias or FusedConv node."""
    from ...interpreter.jitort_ops import fused_activation
    name, params = fused_activation(n)
    return ACT_CODES[name], params[0], params[1]
