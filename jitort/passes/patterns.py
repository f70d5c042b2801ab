"""Pattern rewrites: Conv+BatchNormalization folding, MatMul+Add -> Gemm-like.

Each rewrite follows ORT's safety rule: the intermediate being removed must have exactly one
consumer and must not be a graph output.
"""
from __future__ import annotations

import logging

import numpy as np

from ..ir import Graph, Node, Value, const_value

log = logging.getLogger("jitort.passes")

#: Custom ops created by rewrites live in this domain; the CPU backend always claims them.
JITORT_DOMAIN = "jitort"


def _single_use(g: Graph, v: Value, consumers) -> Node | None:
    users = consumers.get(id(v), [])
    if len(users) != 1 or id(v) in g.output_ids():
        return None
    return users[0]


def fold_conv_batchnorm(g: Graph) -> int:
    """Conv(x, W, b) -> BatchNormalization(scale, B, mean, var) becomes Conv(x, W', b')."""
    consumers = g.consumers()
    drop: set[int] = set()
    count = 0
    for conv in g.nodes:
        if conv.op_type != "Conv" or conv.domain or len(conv.outputs) != 1:
            continue
        w, b = conv.input(1), conv.input(2)
        if w is None or not w.is_const or (b is not None and not b.is_const):
            continue
        if w.const.dtype not in (np.float32, np.float64):
            continue
        bn = _single_use(g, conv.outputs[0], consumers)
        if (bn is None or bn.op_type != "BatchNormalization" or bn.domain or len(bn.outputs) != 1
                or bn.inputs[0] is not conv.outputs[0] or bn.attrs.get("training_mode", 0)):
            continue
        params = bn.inputs[1:5]
        if len(params) != 4 or not all(p is not None and p.is_const for p in params):
            continue
        scale, bias, mean, var = (p.const.astype(np.float64) for p in params)
        eps = float(bn.attrs.get("epsilon", 1e-5))
        m = w.const.shape[0]
        if any(a.shape != (m,) for a in (scale, bias, mean, var)):
            continue
        factor = scale / np.sqrt(var + eps)
        new_w = (w.const.astype(np.float64) * factor.reshape((-1,) + (1,) * (w.const.ndim - 1)))
        old_b = b.const.astype(np.float64) if b is not None else np.zeros(m)
        new_b = (old_b - mean) * factor + bias
        dt = w.const.dtype
        w2 = const_value(g.fresh_name(w.name), new_w.astype(dt))
        b2 = const_value(g.fresh_name(f"{conv.name or 'conv'}_bias"), new_b.astype(dt))
        conv.inputs = [conv.inputs[0], w2, b2]
        conv.proto = None
        g.replace_uses(bn.outputs[0], conv.outputs[0])
        drop.add(id(bn))
        count += 1
    if count:
        g.nodes = [n for n in g.nodes if id(n) not in drop]
        log.info("fused Conv+BN: %d", count)
    return count


def fuse_matmul_add(g: Graph) -> int:
    """MatMul(x, W) + bias (bias broadcast over the last axis only) -> jitort.MatMulBias.

    ``W`` is a 2-D weight and ``bias`` a constant of shape (N,) (or (1, .., N)); the result has
    the MatMul's shape, so the rewrite is shape-safe for any batch dims of ``x``.
    """
    consumers = g.consumers()
    drop: set[int] = set()
    count = 0
    for mm in g.nodes:
        if mm.op_type != "MatMul" or mm.domain or id(mm) in drop:
            continue
        w = mm.input(1)
        if w is None or w.shape is None or len(w.shape) != 2 or w.dtype not in (np.float32, np.float64):
            continue
        add = _single_use(g, mm.outputs[0], consumers)
        if add is None or add.op_type != "Add" or add.domain or len(add.inputs) != 2:
            continue
        other = add.inputs[1] if add.inputs[0] is mm.outputs[0] else add.inputs[0]
        if other is mm.outputs[0] or not other.is_const or other.const.dtype != w.dtype:
            continue
        n_cols = w.shape[1]
        bias = other.const
        if bias.size != n_cols or (bias.ndim and bias.shape[-1] != n_cols) or bias.ndim > 2:
            continue
        b = const_value(g.fresh_name(other.name), bias.reshape(n_cols))
        fused = Node("MatMulBias", [mm.inputs[0], w, b], [add.outputs[0]], {"activation": ""},
                     JITORT_DOMAIN, mm.name or add.name, 1)
        idx = g.nodes.index(add)
        g.nodes[idx] = fused
        drop.add(id(mm))
        count += 1
    if count:
        g.nodes = [n for n in g.nodes if id(n) not in drop]
        g.relink()
        log.info("fused MatMul+Add: %d", count)
    return count
