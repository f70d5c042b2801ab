"""Expansion of BatchNormalization in training mode (opset 14+, ``training_mode=1``) into the
batch statistics and the normalization, as onnx.reference computes them: per channel (dim 1)
the mean and the population variance over every other dim, Y from those, and the running
statistics moved by ``momentum``. Inference-mode BatchNormalization is left as it is (its
lowering and the Conv+BN fold take it)."""
from __future__ import annotations

import numpy as np

from ...ir import Node
from ..expand import Builder, Decline, expansion


@expansion("", "BatchNormalization")
def _batchnorm_training(b: Builder, n: Node):
    """Y = scale * (X - mean) / sqrt(var + epsilon) + B with the batch's mean and variance;
    running_mean = input_mean * momentum + mean * (1 - momentum), running_var likewise."""
    if n.since_version < 14 or not n.attrs.get("training_mode", 0):
        raise Decline("not training mode (opset 14+)")
    x, scale, bias, in_mean, in_var = n.inputs[:5]
    if x.shape is None or len(x.shape) < 2 or x.dtype is None:
        raise Decline("X's rank is not known")
    if np.dtype(x.dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise Decline(f"X of {np.dtype(x.dtype).name}")
    if any(v.dtype != x.dtype for v in (scale, bias, in_mean, in_var)):
        raise Decline("statistics of another type than X (opset 15's T1/T2)")
    dt = x.dtype
    rank = len(x.shape)
    axes = b.ints(0, *range(2, rank))
    trailing = list(range(1, rank - 1))

    def per_channel(v):  # (C,) -> (C, 1, ..., 1), to broadcast along X's dim 1
        return b.op("Unsqueeze", [v, b.ints(*trailing)]) if trailing else v

    mean = b.op("ReduceMean", [x, axes], {"keepdims": 0})
    centered = b.op("Sub", [x, per_channel(mean)])
    var = b.op("ReduceMean", [b.op("Mul", [centered, centered]), axes], {"keepdims": 0})
    eps = b.const(n.attrs.get("epsilon", 1e-5), dt)
    std = b.op("Sqrt", [b.op("Add", [per_channel(var), eps])])
    y = b.op("Add", [b.op("Div", [b.op("Mul", [per_channel(scale), centered]), std]),
                     per_channel(bias)])
    momentum = float(n.attrs.get("momentum", 0.9))
    keep, take = b.const(momentum, dt), b.const(1.0 - momentum, dt)

    def running(old, batch):
        return b.op("Add", [b.op("Mul", [old, keep]), b.op("Mul", [batch, take])])

    return [y, running(in_mean, mean), running(in_var, var)]
