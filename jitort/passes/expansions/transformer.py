"""Expansions of onnxruntime's transformer contrib ops (domain ``com.microsoft``, semantics of
onnxruntime's docs/ContribOperators.md and CPU kernels) into default-domain ONNX subgraphs: the
norms become LayerNormalization / RMSNormalization after the residual Adds, the Gelus Add + Gelu
(the MatMul+bias and epilogue passes then fuse them into the GEMM), FusedMatMul a MatMul.
The attention ops are in :mod:`.transformer_attention`."""
from __future__ import annotations

import numpy as np

from ...ir import Node
from ..expand import Builder, Decline, expansion

MS = "com.microsoft"


def _float_attr(n: Node, name: str, default: float) -> float:
    return float(n.attrs.get(name, default))


def _plus(b: Builder, x, *terms):
    """x + each present term (Add nodes)."""
    for t in terms:
        if t is not None:
            x = b.op("Add", [x, t])
    return x


def _only_outputs(n: Node, allowed: tuple[int, ...], b: Builder) -> None:
    """Decline when an output outside ``allowed`` is read."""
    from ..expand import used
    consumers = b.g.consumers()
    for i, o in enumerate(n.outputs):
        if i not in allowed and used(b.g, o, consumers):
            raise Decline(f"output {i} ({o.name}) is not supported")


@expansion(MS, "SkipLayerNormalization", "SkipSimplifiedLayerNormalization")
def _skip_layernorm(b: Builder, n: Node):
    """LayerNorm(input + skip [+ bias]) with gamma [, beta]; outputs (output, mean, inv_std,
    input_skip_bias_sum); the simplified form is the RMS norm and has no beta."""
    simplified = n.op_type.startswith("SkipSimplified")
    x, skip, gamma = n.inputs[0], n.inputs[1], n.inputs[2]
    beta = None if simplified else n.input(3)
    bias = n.input(3 if simplified else 4)
    _only_outputs(n, (0, 3), b)
    s = _plus(b, x, skip, bias)
    eps = _float_attr(n, "epsilon", 1e-12)
    if simplified:
        y = b.op("RMSNormalization", [s, gamma], {"axis": -1, "epsilon": eps})
    else:
        y = b.op("LayerNormalization", [s, gamma] + ([beta] if beta is not None else []),
                 {"axis": -1, "epsilon": eps})
    return [y, None, None, s]


@expansion("", "SimplifiedLayerNormalization")
@expansion(MS, "SimplifiedLayerNormalization")
def _simplified_layernorm(b: Builder, n: Node):
    """RMS norm over the axes from ``axis`` on (output 1 inv_std_var); onnxruntime registers it
    in the default domain (its own ONNX domain extension), others write com.microsoft."""
    _only_outputs(n, (0,), b)
    return [b.op("RMSNormalization", [n.inputs[0], n.inputs[1]],
                 {"axis": int(n.attrs.get("axis", -1)),
                  "epsilon": _float_attr(n, "epsilon", 1e-5)})]


@expansion(MS, "BiasGelu")
def _bias_gelu(b: Builder, n: Node):
    return [b.op("Gelu", [_plus(b, n.inputs[0], n.inputs[1])])]


@expansion(MS, "Gelu")
def _gelu(b: Builder, n: Node):
    return [b.op("Gelu", [n.inputs[0]])]


@expansion(MS, "FastGelu")
def _fast_gelu(b: Builder, n: Node):
    """The tanh approximation of Gelu, after an optional bias."""
    return [b.op("Gelu", [_plus(b, n.inputs[0], n.input(1))], {"approximate": "tanh"})]


@expansion(MS, "QuickGelu")
def _quick_gelu(b: Builder, n: Node):
    """x * sigmoid(alpha * x), alpha 1.702 by default."""
    x = n.inputs[0]
    alpha = b.const(np.array(_float_attr(n, "alpha", 1.702), dtype=x.dtype))
    return [b.op("Mul", [x, b.op("Sigmoid", [b.op("Mul", [x, alpha])])])]


@expansion(MS, "BiasAdd")
def _bias_add(b: Builder, n: Node):
    """X (N, S, C) + bias (C) + skip (N, S, C)."""
    return [_plus(b, n.inputs[0], n.inputs[1], n.inputs[2])]


def _swap_last(b: Builder, x, rank: int):
    perm = list(range(rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return b.op("Transpose", [x], {"perm": perm})


@expansion(MS, "FusedMatMul")
def _fused_matmul(b: Builder, n: Node):
    """alpha * (A' @ B') with A' / B' transposed on their last two axes when transA / transB
    (transBatchA / transBatchB not covered)."""
    if n.attrs.get("transBatchA", 0) or n.attrs.get("transBatchB", 0):
        raise Decline("transBatchA / transBatchB")
    a, w = n.inputs[0], n.inputs[1]
    for flag, v in (("transA", a), ("transB", w)):
        if n.attrs.get(flag, 0) and (v.shape is None or len(v.shape) < 2):
            raise Decline(f"{flag} on an input of unknown rank or rank < 2")
    if n.attrs.get("transA", 0):
        a = _swap_last(b, a, len(a.shape))
    if n.attrs.get("transB", 0):
        w = (b.const(np.swapaxes(w.const, -1, -2).copy()) if w.is_const
             else _swap_last(b, w, len(w.shape)))
    y = b.op("MatMul", [a, w])
    alpha = _float_attr(n, "alpha", 1.0)
    if alpha != 1.0:
        y = b.op("Mul", [y, b.const(np.array(alpha, dtype=y.dtype))])
    return [y]


@expansion(MS, "EmbedLayerNormalization")
def _embed_layernorm(b: Builder, n: Node):
    """LayerNorm(word[ids] + position[pos] (+ segment[segment_ids])); mask_index (B,) int32 is
    the count of ones in each mask row (zeros without a mask); output 2 the sum before the
    norm. Positions are 0..S-1 unless position_ids (input 8) is given."""
    ids, seg_ids, word, pos_emb, seg_emb, gamma, beta = (n.input(i) for i in range(7))
    mask, pos_ids = n.input(7), n.input(8)
    if (seg_ids is None) != (seg_emb is None):
        raise Decline("segment_ids without segment_embedding (or the reverse)")
    e = b.op("Gather", [word, ids], {"axis": 0})
    if pos_ids is None:
        shape = b.op("Shape", [ids], {"start": 1, "end": 2}, dtype=np.int64)
        length = b.op("Squeeze", [shape, b.ints(0)], dtype=np.int64)
        pos_ids = b.op("Range", [b.const(np.array(0, np.int64)), length,
                                 b.const(np.array(1, np.int64))], dtype=np.int64)
    p = b.op("Gather", [pos_emb, pos_ids], {"axis": 0})
    s = _plus(b, e, p)
    if seg_ids is not None:
        s = _plus(b, s, b.op("Gather", [seg_emb, seg_ids], {"axis": 0}))
    batch = None if ids.shape is None else ids.shape[0]
    y = b.op("LayerNormalization", [s, gamma, beta],
             {"axis": -1, "epsilon": _float_attr(n, "epsilon", 1e-12)},
             shape=None if ids.shape is None else tuple(ids.shape) + tuple(word.shape[1:]))
    if mask is not None:
        ones = b.op("Cast", [b.op("Equal", [mask, b.const(np.array(1, dtype=mask.dtype))],
                                  dtype=np.bool_)], {"to": 6}, dtype=np.int32)
        mask_index = b.op("ReduceSum", [ones, b.ints(1)], {"keepdims": 0}, dtype=np.int32,
                          shape=(batch,))
    else:
        zero = b.op("Mul", [ids, b.const(np.array(0, dtype=ids.dtype))])
        mask_index = b.op("ReduceMax", [b.op("Cast", [zero], {"to": 6}, dtype=np.int32),
                                        b.ints(1)], {"keepdims": 0}, dtype=np.int32,
                          shape=(batch,))
    return [y, mask_index, s]
