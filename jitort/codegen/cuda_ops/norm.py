"""CUDA lowerings of row-wise ops: Softmax, LogSoftmax, LayerNormalization,
BatchNormalization (inference) and the reductions."""
from __future__ import annotations

import numpy as np

from ...ir import Node
from ..cuda_emit import CudaEmitter, _norm, _reduce, _is_float, _same_float, _softmax, lowering
from ..lowerings import REDUCE_KIND, _axes_from_input, _axis, _prod
from ..lowerings.common import softmax_dims
from ..registry import Unlowerable


@lowering("Softmax", "LogSoftmax", supports=_same_float)
def lower_softmax(em: CudaEmitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    if not shape:
        raise Unlowerable(n, "Softmax of a scalar")
    dims = softmax_dims(n, shape)
    kernel = _softmax.softmax3d if n.op_type == "Softmax" else _softmax.logsoftmax3d
    xv = em.read(x)
    em.call(kernel, xv, em.write(y), *em.sizes(dims))


@lowering("LayerNormalization", supports=lambda n: _same_float(n) and len(n.outputs) == 1)
def lower_layernorm(em: CudaEmitter, n: Node) -> None:
    x, scale, bias, y = n.inputs[0], n.inputs[1], n.input(2), n.outputs[0]
    shape = em.shape(x)
    axis = _axis(n.attrs.get("axis", -1), len(shape))
    outer, inner = _prod(shape[:axis]), _prod(shape[axis:])
    if _prod(em.shape(scale)) != inner or (bias is not None and _prod(em.shape(bias)) != inner):
        raise Unlowerable(n, "LayerNormalization scale/bias broadcast")
    xv, sv = em.read(x), em.read(scale)
    bv = em.read(bias) if bias is not None else sv
    em.call(_norm.layernorm2d, xv, sv, bv, em.write(y), em.size(outer), em.size(inner),
            float(n.attrs.get("epsilon", 1e-5)), bias is not None)


@lowering("BatchNormalization", supports=lambda n: _same_float(n) and len(n.outputs) == 1
          and not n.attrs.get("training_mode", 0))
def lower_batchnorm(em: CudaEmitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    if len(shape) < 2:
        raise Unlowerable(n, "BatchNormalization of rank < 2")
    params = [em.read(v) for v in [x] + n.inputs[1:5]]
    em.call(_norm.batchnorm3d, *params, em.write(y),
            *em.sizes((shape[0], shape[1], _prod(shape[2:]))), float(n.attrs.get("epsilon", 1e-5)))


@lowering(*REDUCE_KIND, supports=lambda n: _is_float(n.inputs[0], n.outputs[0])
          and n.inputs[0].dtype == n.outputs[0].dtype)
def lower_reduce(em: CudaEmitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    rank = len(shape)
    if _axes_from_input(n):
        av = n.input(1)
        val = None if av is None else (av.const if av.is_const else em.hostvals.get(id(av)))
        if av is not None and val is None:
            raise Unlowerable(n, "reduction axes not known ahead")
        axes = [] if val is None else val.astype(np.int64).reshape(-1).tolist()
    else:
        axes = list(n.attrs.get("axes", []))
    if not axes:
        if n.attrs.get("noop_with_empty_axes", 0):
            raise Unlowerable(n, "no-op reduction")
        axes = list(range(rank))
    axes = sorted({_axis(a, rank) for a in axes})
    if not axes or axes != list(range(axes[0], axes[-1] + 1)):
        raise Unlowerable(n, f"non-contiguous reduction axes {axes}")
    o, r, i = _prod(shape[:axes[0]]), _prod(shape[axes[0]:axes[-1] + 1]), _prod(shape[axes[-1] + 1:])
    if r == 0:
        raise Unlowerable(n, "reduction over an empty axis")
    xv = em.read(x)
    em.call(_reduce.reduce3d, xv, em.write(y), *em.sizes((o, r, i)), REDUCE_KIND[n.op_type])
