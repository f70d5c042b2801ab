"""Shape functions: the attention family (Attention, opsets 23-25; RotaryEmbedding)."""
from __future__ import annotations

from .core import _fail, _get, _nout, _same_shape, register


def attention_dims(node, shapes):
    """(B, Hq, Hkv, Sq, Skv, D, Dv, P, rank) of an Attention node's inputs; P is the past
    length (0 without past_key)."""
    q, k, v = shapes[0], shapes[1], shapes[2]
    if not (len(q) == len(k) == len(v)) or len(q) not in (3, 4):
        raise _fail(node, "Q, K and V must all be 3-D or all 4-D", shapes)
    past = _get(shapes, 4)
    if len(q) == 4:
        b, hq, sq, d = q
        hkv, skv, dv = k[1], k[2], v[3]
        if k[3] != d or v[1] != hkv or v[2] != skv:
            raise _fail(node, "K must be (B, Hkv, S, D) and V (B, Hkv, S, Dv) for Q (B, Hq, S, D)",
                        shapes)
    else:
        hq, hkv = node.attrs.get("q_num_heads"), node.attrs.get("kv_num_heads")
        if not hq or not hkv:
            raise _fail(node, "3-D Attention inputs need q_num_heads and kv_num_heads", shapes)
        b, sq = q[0], q[1]
        skv = k[1]
        if q[2] % hq or k[2] % hkv or v[2] % hkv or v[1] != skv:
            raise _fail(node, "hidden sizes must divide by the head counts", shapes)
        d, dv = q[2] // hq, v[2] // hkv
        if k[2] // hkv != d:
            raise _fail(node, "Q and K head sizes differ", shapes)
    if k[0] != b or v[0] != b:
        raise _fail(node, "Q, K and V batch sizes differ", shapes)
    if hkv == 0 or hq % hkv:
        raise _fail(node, f"q heads ({hq}) must be a multiple of kv heads ({hkv})", shapes)
    p = 0
    if past is not None:
        pv = _get(shapes, 5)
        if len(past) != 4 or pv is None or len(pv) != 4 or past[:2] != (b, hkv) \
                or past[3] != d or pv[:3] != past[:3] or pv[3] != dv:
            raise _fail(node, "past_key/past_value must be (B, Hkv, P, D) and (B, Hkv, P, Dv)",
                        shapes)
        p = past[2]
    return b, hq, hkv, sq, skv, d, dv, p, len(q)


@register("Attention")
def _attention(node, shapes, values):
    b, hq, hkv, sq, skv, d, dv, p, rank = attention_dims(node, shapes)
    t = p + skv
    y = (b, hq, sq, dv) if rank == 4 else (b, sq, hq * dv)
    outs = [y, (b, hkv, t, d), (b, hkv, t, dv), (b, hq, sq, t)]
    return outs[:_nout(node)]


@register("RotaryEmbedding")
def _rotary_embedding(node, shapes, values):
    return _same_shape(node, shapes)
