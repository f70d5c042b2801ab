"""CPU lowerings: Attention (opsets 23-25) and RotaryEmbedding (23).

Kernels: ``jitort.kernels.cpu.attention`` (alias ``_attn`` in generated drivers). Q, K, V and Y
travel as flat arrays with (batch, head, row) strides, so the 3-D ``(B, S, H * D)`` layout is
read in place rather than transposed.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ...shapes.attention import attention_dims
from ..registry import Unlowerable, lowering
from .common import _is_float, float_literal

if TYPE_CHECKING:
    from ..cpu import Emitter


def _attention_ok(n: Node) -> bool:
    q, k, v = n.inputs[:3]
    if not _is_float(q, k, v, n.outputs[0]) or not (q.dtype == k.dtype == v.dtype):
        return False
    mask = n.input(3)
    if mask is not None and not (mask.dtype == q.dtype or np.dtype(mask.dtype) == np.bool_):
        return False
    if any(n.input(i) is not None and n.input(i).dtype != q.dtype for i in (4, 5)):
        return False
    nonpad = n.input(6)
    return nonpad is None or np.dtype(nonpad.dtype) == np.int64


def _strides(shape, rank4: bool, heads: int):
    """(batch, head, row) element strides of Q/K/V/Y: (B, H, S, D) or (B, S, H * D)."""
    if rank4:
        _, h, s, d = shape
        return (h * s * d, s * d, d)
    _, s, hd = shape
    return (s * hd, hd // heads, hd)


@lowering("Attention", supports=_attention_ok)
def lower_attention(em: Emitter, n: Node) -> None:
    from jitort.kernels.cpu.attention import attention_scratch_elems
    q, k, v = n.inputs[:3]
    shapes = [None if x is None else tuple(em.shape(x)) for x in n.inputs]
    b, hq, hkv, sq, skv, d, dv, p, rank = attention_dims(n, shapes)
    rank4 = rank == 4
    a = n.attrs
    # softmax_precision: the softmax runs in the inputs' float type (float32 or float64)
    mask, past_k, past_v, nonpad = n.input(3), n.input(4), n.input(5), n.input(6)
    if nonpad is not None and past_k is not None:
        raise Unlowerable(n, "nonpad_kv_seqlen with past_key (the spec forbids it)")
    outs = list(n.outputs) + [None] * (4 - len(n.outputs))
    y, pk_out, pv_out, qk_out = outs[:4]
    dt = np.dtype(q.dtype)
    tot = p + skv
    qs = _strides(shapes[0], rank4, hq)
    # keys and values: the given K/V, or the present caches when a past is concatenated
    kv = []
    for x, past, out, dd, s in ((k, past_k, pk_out, d, shapes[1]), (v, past_v, pv_out, dv, shapes[2])):
        xs = _strides(s, rank4, hkv)
        if past is None and out is None:
            kv.append((f"{em.arr(x)}.reshape(-1)", xs))
            continue
        cache = em.out(out) if out is not None else em.scratch(b * hkv * tot * dd, dt)
        c4 = f"{cache}.reshape({em.tuple_expr((b, hkv, tot, dd))})"
        pv = (f"{em.arr(past)}.reshape({em.tuple_expr((b, hkv, p, dd))})" if past is not None
              else f"np.zeros((1, 1, 0, 1), {_tn(dt)})")
        em.call(f"_attn.concat_cache({pv}, {em.arr(x)}.reshape(-1), {_tup(em, xs)}, {c4})")
        kv.append((f"{c4}.reshape(-1)", (hkv * tot * dd, tot * dd, dd)))
    (kf, ks), (vf, vs) = kv
    if mask is not None:
        ms = tuple(em.shape(mask))
        if len(ms) > 4 or len(ms) == 0:
            raise Unlowerable(n, f"attn_mask of rank {len(ms)}")
        m4 = (1,) * (4 - len(ms)) + ms
        for got, full, what in ((m4[0], b, "batch"), (m4[1], hq, "heads"), (m4[2], sq, "query")):
            if got != 1 and got != full:
                raise Unlowerable(n, f"attn_mask {what} dim {got} does not broadcast to {full}")
        if m4[3] > tot:
            raise Unlowerable(n, f"attn_mask has {m4[3]} keys, more than the {tot} attended")
        mv = f"{em.arr(mask)}.reshape({em.tuple_expr(m4)})"
        mask_bool = np.dtype(mask.dtype) == np.bool_
    else:
        mv, mask_bool = f"np.zeros((1, 1, 1, 1), {_tn(dt)})", False
    mode = int(a.get("qk_matmul_output_mode", 0))
    if qk_out is not None and mode not in (0, 1, 2, 3):
        raise Unlowerable(n, f"qk_matmul_output_mode {mode}")
    qf = f"{em.arr(q)}.reshape(-1)"
    scale = a.get("scale")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)  # (pins d: a model constant)
    softcap = float(a.get("softcap", 0.0))
    yv = em.out(y)
    ys = _strides(em.shape(y), rank4, hq)
    qkv = (em.out(qk_out) + f".reshape({em.tuple_expr((b, hq, sq, tot))})" if qk_out is not None
           else f"np.zeros((0, 1, 1, 1), {_tn(dt)})")
    if qk_out is not None and mode == 0:
        em.call(f"_attn.qk_scores({qf}, {kf}, {qkv}, {em.dim(hq)}, {em.dim(hkv)}, {em.dim(d)}, "
                f"{_tup(em, qs)}, {_tup(em, ks)}, {float_literal(scale)})")
    scr = em.scratch(attention_scratch_elems(sq, tot, b * hq, em.threads), dt)
    npv = em.arr(nonpad) + ".reshape(-1)" if nonpad is not None else "np.zeros(0, np.int64)"
    dims = ", ".join(em.dim(x) for x in (b, hq, hkv, sq, tot, d, dv))
    em.call(f"_attn.attention({qf}, {kf}, {vf}, {mv}, {yv}.reshape(-1), {qkv}, {scr}, {dims}, "
            f"{_tup(em, qs)}, {_tup(em, ks)}, {_tup(em, vs)}, {_tup(em, ys)}, {mask is not None}, "
            f"{mask_bool}, {float_literal(scale)}, {float_literal(softcap)}, "
            f"{bool(a.get('is_causal', 0))}, {em.dim(p)}, {int(a.get('left_window_size', -1))}, "
            f"{int(a.get('right_window_size', -1))}, {npv}, {nonpad is not None}, "
            f"{mode if qk_out is not None else -1})")


def _tn(dt: np.dtype) -> str:
    return f"np.{np.dtype(dt).name}"


def _tup(em: Emitter, xs) -> str:
    """An int64 array of sizes in generated code (three strides: one argument, not three)."""
    return f"np.array({em.tuple_expr(xs)}, np.int64)"


def _rotary_ok(n: Node) -> bool:
    x, c, s = n.inputs[:3]
    pos = n.input(3)
    return (_is_float(x, c, s, n.outputs[0]) and x.dtype == c.dtype == s.dtype
            and (pos is None or np.dtype(pos.dtype) == np.int64))


@lowering("RotaryEmbedding", supports=_rotary_ok)
def lower_rotary(em: Emitter, n: Node) -> None:
    x, cos, sin = n.inputs[:3]
    pos = n.input(3)
    xs = tuple(em.shape(x))
    y = n.outputs[0]
    if len(xs) == 4:
        b, h, s, d = xs
        view = (b, h, s, d)
    elif len(xs) == 3:
        heads = int(n.attrs.get("num_heads", 0))
        if heads <= 0 or xs[2] % heads:
            raise Unlowerable(n, "3-D RotaryEmbedding input needs num_heads dividing the hidden size")
        b, s = xs[0], xs[1]
        h, d = heads, xs[2] // heads
        view = (b, s, h, d)
    else:
        raise Unlowerable(n, f"RotaryEmbedding of a rank-{len(xs)} input")
    rot = int(n.attrs.get("rotary_embedding_dim", 0)) or d
    if rot % 2 or rot > d:
        raise Unlowerable(n, f"rotary_embedding_dim {rot} for head size {d}")
    cs = tuple(em.shape(cos))
    if cs[-1] != rot // 2 or tuple(em.shape(sin)) != cs:
        raise Unlowerable(n, f"cos/sin caches {cs} do not hold rotary_embedding_dim/2 = {rot // 2}")
    if pos is None and (len(cs) != 3 or cs[:2] != (b, s)):
        raise Unlowerable(n, "without position_ids the caches must be (B, S, rot/2)")
    if pos is not None and tuple(em.shape(pos)) != (b, s):
        raise Unlowerable(n, "position_ids must be (B, S)")
    c2 = em.tuple_expr((cs[0] * cs[1] if len(cs) == 3 else cs[0], rot // 2))
    xv = f"{em.arr(x)}.reshape({em.tuple_expr(view)})"
    yv = f"{em.out(y)}.reshape({em.tuple_expr(view)})"
    if len(xs) == 4:  # (B, H, S, D) seen as (B, S, H, D)
        xv, yv = f"{xv}.transpose((0, 2, 1, 3))", f"{yv}.transpose((0, 2, 1, 3))"
    pv = (f"{em.arr(pos)}.reshape({em.tuple_expr((b, s))})" if pos is not None
          else "np.zeros((1, 1), np.int64)")
    em.call(f"_attn.rotary({xv}, {em.arr(cos)}.reshape({c2}), {em.arr(sin)}.reshape({c2}), "
            f"{pv}, {yv}, {pos is not None}, {bool(n.attrs.get('interleaved', 0))}, {em.dim(rot)})")
