"""CPU lowerings: normalization and softmax."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ..calls import KernelModule, Scalar
from ..registry import Unlowerable, lowering
from ..elementwise import tname
from .common import (_3d, _axis, _float_io, _is_float, _plain, _prod, host_value, input_shape,
                     softmax_dims)

if TYPE_CHECKING:
    from ..emitter import Emitter

_data = KernelModule("data")
_norm = KernelModule("norm")
_softmax = KernelModule("softmax")


def _eps(n: Node, default: float = 1e-5) -> Scalar:
    """The ``epsilon`` attribute in the output's type."""
    return Scalar(np.dtype(n.outputs[0].dtype).name, float(n.attrs.get("epsilon", default)))


@lowering("Softmax", "LogSoftmax", supports=_float_io)
def lower_softmax(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    if len(shape) == 0:
        raise Unlowerable(n, "Softmax of a scalar")
    dims = softmax_dims(n, shape)
    fn = _softmax.softmax3d if n.op_type == "Softmax" else _softmax.logsoftmax3d
    t = em.sizes(dims)
    yv = em.write(y)
    em.call(fn, em.read(x).reshape(t), yv.reshape(t))


def _ln_ok(n: Node) -> bool:
    """Float data; the optional Mean / InvStdDev outputs in the input's dtype (the stash type
    of a float32 model)."""
    return _float_io(n) and len(n.outputs) <= 3 and all(
        v is None or v.dtype == n.inputs[0].dtype for v in list(n.inputs) + list(n.outputs))


@lowering("LayerNormalization", supports=_ln_ok)
def lower_layernorm(em: Emitter, n: Node) -> None:
    x, scale, y = n.inputs[0], n.inputs[1], n.outputs[0]
    bias = n.input(2)
    shape = em.shape(x)
    axis = _axis(n.attrs.get("axis", -1), len(shape))
    outer, inner = _prod(shape[:axis]), _prod(shape[axis:])
    if _prod(em.shape(scale)) != inner or (bias is not None and _prod(em.shape(bias)) != inner):
        raise Unlowerable(n, "LayerNormalization scale/bias broadcast")
    t2 = em.sizes((outer, inner))
    t1 = em.sizes((inner,))
    sv = em.read(scale).reshape(t1)
    bv = em.read(bias).reshape(t1) if bias is not None else sv
    yv = em.write(y).reshape(t2)
    if len(n.outputs) == 1:
        em.call(_norm.layernorm2d, em.read(x).reshape(t2), sv, bv, yv, _eps(n), bias is not None)
        return
    # Mean and InvStdDev: (outer,) values, shaped like x with the normalized axes set to 1
    to = em.sizes((outer,))
    stats = [em.write(v).reshape(to) for v in n.outputs[1:]]
    if len(stats) == 1:
        stats.append(em.temp(outer, y.dtype).reshape(to))
    em.call(_norm.layernorm2d_stats, em.read(x).reshape(t2), sv, bv, yv, stats[0], stats[1],
            _eps(n), bias is not None)


@lowering("BatchNormalization", supports=lambda n: _float_io(n) and len(n.outputs) == 1
          and not n.attrs.get("training_mode", 0) and all(_is_float(v) for v in n.inputs[1:5]))
def lower_batchnorm(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    if len(shape) < 2 or any(v.dtype != x.dtype for v in n.inputs[1:5]):
        raise Unlowerable(n, "BatchNormalization layout/dtypes")
    t3 = em.sizes((shape[0], shape[1], _prod(shape[2:])))
    p = [em.read(v) for v in n.inputs[1:5]]
    yv = em.write(y)
    em.call(_norm.batchnorm3d, em.read(x).reshape(t3), *p, yv.reshape(t3), _eps(n))


def _norm_io(n: Node) -> bool:
    """Float input/output and every other present input of the same dtype."""
    return _float_io(n) and len(n.outputs) == 1 and all(
        v is None or v.dtype == n.inputs[0].dtype for v in n.inputs)


@lowering("InstanceNormalization", supports=_norm_io)
def lower_instnorm(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = input_shape(em, n, 2)
    c = shape[1]
    if any(_prod(em.shape(v)) != c for v in n.inputs[1:3]):
        raise Unlowerable(n, "InstanceNormalization scale/B are not (C,)")
    t3 = em.sizes((shape[0], c, _prod(shape[2:])))
    t1 = em.sizes((c,))
    yv = em.write(y)
    em.call(_norm.instancenorm3d, em.read(x).reshape(t3), em.read(n.inputs[1]).reshape(t1),
            em.read(n.inputs[2]).reshape(t1), yv.reshape(t3), _eps(n))


@lowering("GroupNormalization", supports=_norm_io)
def lower_groupnorm(em: Emitter, n: Node) -> None:
    x, scale, bias, y = n.inputs[0], n.inputs[1], n.inputs[2], n.outputs[0]
    shape = input_shape(em, n, 2)
    g = int(n.attrs["num_groups"])
    c = shape[1]
    if g <= 0 or c % g != 0:
        raise Unlowerable(n, f"GroupNormalization: {c} channels in {g} groups")
    per_channel = n.since_version >= 21
    want = c if per_channel else g
    if _prod(em.shape(scale)) != want or _prod(em.shape(bias)) != want:
        raise Unlowerable(n, f"GroupNormalization scale/bias are not ({want},)")
    t4 = em.sizes((shape[0], g, c // g, _prod(shape[2:])))
    t1 = em.sizes((want,))
    yv = em.write(y)
    em.call(_norm.groupnorm4d, em.read(x).reshape(t4), em.read(scale).reshape(t1),
            em.read(bias).reshape(t1), yv.reshape(t4), _eps(n), per_channel)


@lowering("RMSNormalization", supports=_norm_io)
def lower_rmsnorm(em: Emitter, n: Node) -> None:
    x, scale, y = n.inputs[0], n.inputs[1], n.outputs[0]
    shape = em.shape(x)
    axis = _axis(n.attrs.get("axis", -1), len(shape))
    outer, inner = _prod(shape[:axis]), _prod(shape[axis:])
    if _prod(em.shape(scale)) != inner:
        raise Unlowerable(n, "RMSNormalization scale broadcast")
    t2 = em.sizes((outer, inner))
    yv = em.write(y)
    em.call(_norm.rmsnorm2d, em.read(x).reshape(t2), em.shaped(scale, (inner,)), yv.reshape(t2),
            _eps(n))


@lowering("LpNormalization", supports=lambda n: _norm_io(n) and n.attrs.get("p", 2) in (1, 2))
def lower_lpnorm(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    if not shape:
        raise Unlowerable(n, "LpNormalization of a scalar")
    axis = _axis(n.attrs.get("axis", -1), len(shape))
    t3 = em.sizes(_3d(shape, axis))
    yv = em.write(y)
    em.call(_norm.lpnorm3d, em.read(x).reshape(t3), yv.reshape(t3), int(n.attrs.get("p", 2)))


@lowering("MeanVarianceNormalization", supports=_norm_io)
def lower_mvn(em: Emitter, n: Node) -> None:
    from .reduce import canonical_runs
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    axes = sorted({_axis(a, len(shape)) for a in n.attrs.get("axes", [0, 2, 3])})
    runs = canonical_runs(shape, axes)  # [(size, reduced)], alternating
    if not any(r for _, r in runs):
        runs = runs + [(1, True)]  # nothing reduced: the mean is x itself, the output 0
    if runs[-1][1]:
        runs = runs + [(1, False)]  # innermost run reduced: Q = 1 (rows of B elements)
    while len(runs) < 5:
        runs = [(1, not runs[0][1])] + runs
    if len(runs) > 5:
        raise Unlowerable(n, f"MeanVarianceNormalization over more than two axis runs {axes}")
    t5 = em.sizes([s for s, _ in runs])
    yv = em.write(y)
    em.call(_norm.mvn5d, em.read(x).reshape(t5), yv.reshape(t5))


def _dropout_ok(n: Node) -> bool:
    """Dropout whose mask is read or whose training_mode is not a constant false
    (passes/simplify.py removes the others); is_test for opsets < 7. Training mode with a
    nonzero ratio declines when lowered (its mask is random)."""
    tm = n.input(2)
    if tm is not None and tm.is_const and tm.const.any() and not _zero_ratio(n.input(1)):
        return False
    if n.since_version < 7 and not n.attrs.get("is_test", 0):
        return False
    return _plain(n)


def _zero_ratio(r) -> bool:
    """A constant ratio of 0 (an absent ratio is 0.5)."""
    return r is not None and r.is_const and not np.asarray(r.const).any()


@lowering("Dropout", supports=_dropout_ok)
def lower_dropout(em: Emitter, n: Node) -> None:
    """Dropout in inference, or in training with ratio 0 (training_mode and ratio are read when
    planning): the output is the input; the mask all True from opset 12 (the spec), all zeros
    before (onnxruntime's Dropout 7-11 writes a zero mask)."""
    tm = host_value(em, n, n.input(2), "training_mode")
    if tm is not None and tm.any():
        ratio = host_value(em, n, n.input(1), "ratio")
        if ratio is None or ratio.any():
            raise Unlowerable(n, "training-mode Dropout with a nonzero ratio draws a random mask")
    x, y = n.inputs[0], n.outputs[0]
    yv = em.write(y)
    em.call(_data.copy_flat, em.read(x).flat(), yv.flat())
    if len(n.outputs) > 1 and n.outputs[1] is not None and not n.outputs[1].name.startswith("__unused_"):
        m = n.outputs[1]
        mv = em.write(m)
        on = n.since_version >= 12
        one = str(on) if np.dtype(m.dtype) == np.bool_ else f"{tname(m.dtype)}({int(on)})"
        src = ("@njit(cache=True, error_model='numpy')\ndef __KNAME__(m):\n"
               "    mf = m.reshape(-1)\n    for i in range(mf.shape[0]):\n"
               f"        mf[i] = {one}\n")
        em.call(em.generated("k_dropout_mask", src), mv)
