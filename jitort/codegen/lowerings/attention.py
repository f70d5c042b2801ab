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
from ..calls import KernelModule, Scalar, Zeros
from ..registry import Unlowerable, lowering
from .common import _is_float

if TYPE_CHECKING:
    from ..emitter import Emitter

_attn = KernelModule("attention")


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
    # an omitted output ('' between named ones) is the importer's untyped __unused_ placeholder
    outs = [None if o.name.startswith("__unused_") else o for o in n.outputs]
    outs += [None] * (4 - len(outs))
    y, pk_out, pv_out, qk_out = outs[:4]
    dt = np.dtype(q.dtype)
    tot = p + skv
    qs = _strides(shapes[0], rank4, hq)
    # keys and values: the given K/V, or the present caches when a past is concatenated
    kv = []
    for x, past, out, dd, s in ((k, past_k, pk_out, d, shapes[1]), (v, past_v, pv_out, dv, shapes[2])):
        xs = _strides(s, rank4, hkv)
        if past is None and out is None:
            kv.append((em.read(x).flat(), xs))
            continue
        cache = em.write(out) if out is not None else em.temp(b * hkv * tot * dd, dt)
        c4 = cache.reshape(em.sizes((b, hkv, tot, dd)))
        pv = em.shaped(past, (b, hkv, p, dd)) if past is not None else Zeros(dt.name, (1, 1, 0, 1))
        em.call(_attn.concat_cache, pv, em.read(x).flat(), em.sizes(xs), c4)
        kv.append((c4.flat(), (hkv * tot * dd, tot * dd, dd)))
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
        mv = em.shaped(mask, m4)
        mask_bool = np.dtype(mask.dtype) == np.bool_
    else:
        mv, mask_bool = Zeros(dt.name, (1, 1, 1, 1)), False
    mode = int(a.get("qk_matmul_output_mode", 0))
    if qk_out is not None and mode not in (0, 1, 2, 3):
        raise Unlowerable(n, f"qk_matmul_output_mode {mode}")
    qf = em.read(q).flat()
    scale = a.get("scale")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)  # (pins d: a model constant)
    softcap = float(a.get("softcap", 0.0))
    yv = em.write(y)
    ys = _strides(em.shape(y), rank4, hq)
    qkv = (em.write(qk_out).reshape(em.sizes((b, hq, sq, tot))) if qk_out is not None
           else Zeros(dt.name, (0, 1, 1, 1)))
    if qk_out is not None and mode == 0:
        em.call(_attn.qk_scores, qf, kf, qkv, em.size(hq), em.size(hkv), em.size(d),
                em.sizes(qs), em.sizes(ks), Scalar("float64", scale))
    scr = em.temp(attention_scratch_elems(sq, tot, b * hq, em.threads, hq // hkv), dt)
    npv = em.read(nonpad).flat() if nonpad is not None else Zeros("int64", (0,))
    dims = em.sizes((b, hq, hkv, sq, tot, d, dv))
    # strides: a tuple of three sizes (one argument, not three)
    em.call(_attn.attention, qf, kf, vf, mv, yv.flat(), qkv, scr, *dims,
            em.sizes(qs), em.sizes(ks), em.sizes(vs), em.sizes(ys), mask is not None,
            mask_bool, Scalar("float64", scale), Scalar("float64", softcap),
            bool(a.get("is_causal", 0)), em.size(p), int(a.get("left_window_size", -1)),
            int(a.get("right_window_size", -1)), npv, nonpad is not None,
            mode if qk_out is not None else -1)


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
    c2 = (cs[0] * cs[1] if len(cs) == 3 else cs[0], rot // 2)
    cv, sv = em.shaped(cos, c2), em.shaped(sin, c2)
    interleaved = bool(n.attrs.get("interleaved", 0))
    if len(xs) == 4:
        # (B, H, S, D) read in place as (B * H, S, 1, D) rows: the kernel indexes the caches by
        # (row, position), so each (batch, head) row gets its batch's positions (without
        # position_ids, the row b * S + s of the (B * S, rot/2) caches)
        pos2 = em.temp(b * h * s, np.int64).reshape(em.sizes((b * h, s)))
        em.call(em.generated("k_rotary_positions", _POSITIONS_SRC), _positions(em, pos, b, s),
                pos2, em.size(h), pos is not None)
        t4 = em.sizes((b * h, s, 1, d))
        yv = em.write(y).reshape(t4)
        em.call(_attn.rotary, em.read(x).reshape(t4), cv, sv, pos2, yv, True, interleaved,
                em.size(rot))
        return
    xv = em.shaped(x, view)
    yv = em.write(y).reshape(em.sizes(view))
    em.call(_attn.rotary, xv, cv, sv, _positions(em, pos, b, s), yv, pos is not None, interleaved,
            em.size(rot))


def _positions(em: Emitter, pos, b, s):
    """position_ids as (B, S), or a placeholder."""
    return em.shaped(pos, (b, s)) if pos is not None else Zeros("int64", (1, 1))


#: out (B * H, S): row r holds batch r // H's positions: pos (B, S) when has_pos, else the
#: caches' row of each (batch, position)
_POSITIONS_SRC = """@njit(cache=True, error_model='numpy')
def __KNAME__(pos, out, heads, has_pos):
    n, sl = out.shape
    for r in range(n):
        b = r // heads
        for i in range(sl):
            out[r, i] = pos[b, i] if has_pos else b * sl + i
"""
