"""CPU lowerings: normalization and softmax."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...ir import Node
from ..registry import Unlowerable, lowering
from ..elementwise import tname
from .common import (_3d, _axis, _float_io, _is_float, _prod)

if TYPE_CHECKING:
    from ..cpu import Emitter


@lowering("Softmax", "LogSoftmax", supports=_float_io)
def lower_softmax(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    rank = len(shape)
    if rank == 0:
        raise Unlowerable(n, "Softmax of a scalar")
    if n.since_version >= 13:
        axis = _axis(n.attrs.get("axis", -1), rank)
        dims = _3d(shape, axis)
    else:
        axis = _axis(n.attrs.get("axis", 1), rank)
        dims = (_prod(shape[:axis]), _prod(shape[axis:]), 1)
    fn = "softmax3d" if n.op_type == "Softmax" else "logsoftmax3d"
    t = em.tuple_expr(dims)
    yv = em.out(y)
    em.call(f"_softmax.{fn}({em.arr(x)}.reshape({t}), {yv}.reshape({t}))")


def _ln_ok(n: Node) -> bool:
    return _float_io(n) and len(n.outputs) == 1 and all(
        v is None or v.dtype == n.inputs[0].dtype for v in n.inputs)


@lowering("LayerNormalization", supports=_ln_ok)
def lower_layernorm(em: Emitter, n: Node) -> None:
    x, scale, y = n.inputs[0], n.inputs[1], n.outputs[0]
    bias = n.input(2)
    shape = em.shape(x)
    axis = _axis(n.attrs.get("axis", -1), len(shape))
    outer, inner = _prod(shape[:axis]), _prod(shape[axis:])
    if _prod(em.shape(scale)) != inner or (bias is not None and _prod(em.shape(bias)) != inner):
        raise Unlowerable(n, "LayerNormalization scale/bias broadcast")
    dt = tname(y.dtype)
    t2 = em.tuple_expr((outer, inner))
    t1 = em.tuple_expr((inner,))
    sv = f"{em.arr(scale)}.reshape({t1})"
    bv = f"{em.arr(bias)}.reshape({t1})" if bias is not None else sv
    yv = em.out(y)
    em.call(f"_norm.layernorm2d({em.arr(x)}.reshape({t2}), {sv}, {bv}, {yv}.reshape({t2}), "
            f"{dt}({float(n.attrs.get('epsilon', 1e-5))!r}), {bias is not None})")


@lowering("BatchNormalization", supports=lambda n: _float_io(n) and len(n.outputs) == 1
          and not n.attrs.get("training_mode", 0) and all(_is_float(v) for v in n.inputs[1:5]))
def lower_batchnorm(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    if len(shape) < 2 or any(v.dtype != x.dtype for v in n.inputs[1:5]):
        raise Unlowerable(n, "BatchNormalization layout/dtypes")
    t3 = em.tuple_expr((shape[0], shape[1], _prod(shape[2:])))
    p = [em.arr(v) for v in n.inputs[1:5]]
    dt = tname(y.dtype)
    yv = em.out(y)
    em.call(f"_norm.batchnorm3d({em.arr(x)}.reshape({t3}), {', '.join(p)}, {yv}.reshape({t3}), "
            f"{dt}({float(n.attrs.get('epsilon', 1e-5))!r}))")


@lowering("InstanceNormalization", supports=_float_io)
def lower_instnorm(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    if len(shape) < 3 or any(v.dtype != x.dtype for v in n.inputs[1:3]):
        raise Unlowerable(n, "InstanceNormalization layout")
    t3 = em.tuple_expr((shape[0], shape[1], _prod(shape[2:])))
    dt = tname(y.dtype)
    yv = em.out(y)
    em.call(f"_norm.instancenorm3d({em.arr(x)}.reshape({t3}), {em.arr(n.inputs[1])}, "
            f"{em.arr(n.inputs[2])}, {yv}.reshape({t3}), {dt}({float(n.attrs.get('epsilon', 1e-5))!r}))")
