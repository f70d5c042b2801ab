"""Shape functions: the ops lowered by ``lowerings/misc.py`` (DeformConv, Det, the losses,
TensorScatter, BitCast, CausalConvWithState, LinearAttention)."""
from __future__ import annotations

from .core import _conv_core, _fail, _rank_at_least, _same_shape, _str, register


@register("DeformConv")
def _deform_conv(node, shapes, values):
    return _conv_core(node, shapes, shapes[0], shapes[1])


@register("Det")
def _det(node, shapes, values):
    x = _rank_at_least(node, shapes, 0, 2)
    if x[-1] != x[-2]:
        raise _fail(node, "Det needs square matrices", shapes)
    return [x[:-2]]


@register("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")
def _loss(node, shapes, values):
    red = _str(node.attrs.get("reduction"), "mean")
    loss = shapes[1] if red == "none" else ()
    out = [loss]
    if len(node.outputs) > 1:
        out.append(shapes[0])
    return out


@register("TensorScatter")
def _tensor_scatter(node, shapes, values):
    return _same_shape(node, shapes)


@register("BitCast")
def _bitcast(node, shapes, values):
    if shapes[0] is None:
        raise _fail(node, "input 0 is missing", shapes)
    return [shapes[0]]


@register("CausalConvWithState")
def _causal_conv(node, shapes, values):
    x, w = shapes[0], shapes[1]
    if x is None or w is None or len(x) != 3 or len(w) != 3:
        raise _fail(node, "input and weight must be rank 3", shapes)
    if w[0] != x[1] or w[1] != 1 or w[2] < 1:
        raise _fail(node, f"weight must have shape ({x[1]}, 1, k)", shapes)
    state = (x[0], x[1], w[2] - 1)
    if len(shapes) > 2 and shapes[2] is not None and tuple(shapes[2]) != (x[1],):
        raise _fail(node, f"bias must have shape ({x[1]},)", shapes)
    if len(shapes) > 3 and shapes[3] is not None and tuple(shapes[3]) != state:
        raise _fail(node, f"past_state must have shape {state}", shapes)
    return [tuple(x), state][:len(node.outputs)]


@register("LinearAttention")
def _linear_attention(node, shapes, values):
    q, k, v = shapes[0], shapes[1], shapes[2]
    at = node.attrs
    hq, hkv = at.get("q_num_heads"), at.get("kv_num_heads")
    if any(s is None or len(s) != 3 for s in (q, k, v)):
        raise _fail(node, "query, key and value must be rank 3 (B, T, H*D)", shapes)
    if not hq or not hkv or hq <= 0 or hkv <= 0 or hq % hkv:
        raise _fail(node, "q_num_heads must be a positive multiple of kv_num_heads", shapes)
    if q[2] % hq or k[2] % hkv or v[2] % hkv:
        raise _fail(node, "hidden sizes not divisible by the head counts", shapes)
    dk, dv = q[2] // hq, v[2] // hkv
    if k[:2] != q[:2] or v[:2] != q[:2] or k[2] != hkv * dk:
        raise _fail(node, "query/key/value batch, length or key size differ", shapes)
    state = (q[0], hkv, dk, dv)
    p = shapes[3] if len(shapes) > 3 else None
    if p is not None and tuple(p) != state:
        raise _fail(node, f"past_state must have shape {state}", shapes)
    g = shapes[4] if len(shapes) > 4 else None
    if g is not None and (len(g) != 3 or g[:2] != q[:2] or g[2] not in (hkv, hkv * dk)):
        raise _fail(node, "decay must be (B, T, kv_num_heads [* d_k])", shapes)
    be = shapes[5] if len(shapes) > 5 else None
    if be is not None and (len(be) != 3 or be[:2] != q[:2] or be[2] not in (hkv, 1)):
        raise _fail(node, "beta must be (B, T, kv_num_heads or 1)", shapes)
    return [(q[0], q[1], hq * dv), state][:len(node.outputs)]
