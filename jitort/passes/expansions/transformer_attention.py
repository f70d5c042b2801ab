"""Expansions of onnxruntime's attention contrib ops (domain ``com.microsoft``): Attention,
MultiHeadAttention, GroupQueryAttention and RotaryEmbedding, onto the default domain's
Attention (opset 23) and RotaryEmbedding (23), whose CPU lowerings are jitort's fused attention
and rotary kernels. Masks become one additive float mask (onnxruntime adds
``mask_filter_value``, -10000 by default, where its mask forms say a key is masked, and the same
for the causal triangle of ``unidirectional``), so fully masked rows agree too."""
from __future__ import annotations

import numpy as np

from ...ir import Node, Value
from ..expand import Builder, Decline, expansion, used

MS = "com.microsoft"


def _i64(b: Builder, v: int) -> Value:
    return b.const(np.array(v, dtype=np.int64))


def _dim(b: Builder, x: Value, axis: int) -> Value:
    """Dimension ``axis`` of ``x`` as an int64 scalar."""
    s = b.op("Shape", [x], {"start": axis, "end": axis + 1}, dtype=np.int64)
    return b.op("Squeeze", [s, b.ints(0)], dtype=np.int64)


def _arange(b: Builder, length: Value) -> Value:
    return b.op("Range", [_i64(b, 0), length, _i64(b, 1)], dtype=np.int64)


def _select(b: Builder, keep: Value, filt: float, dt) -> Value:
    """0 where ``keep`` else ``filt``, in the float type ``dt``."""
    return b.op("Where", [keep, b.const(np.array(0, dt)), b.const(np.array(filt, dt))], dtype=dt)


def _causal(b: Builder, q_len: Value, past_len: Value, total: Value, filt: float, dt) -> Value:
    """(S, T): 0 where key j <= past + query i, else ``filt``."""
    rows = b.op("Add", [b.op("Unsqueeze", [_arange(b, q_len), b.ints(1)]), past_len])
    cols = _arange(b, total)
    return _select(b, b.op("LessOrEqual", [cols, rows], dtype=np.bool_), filt, dt)


def _key_mask(b: Builder, mask: Value, batch, total: Value, filt: float, dt) -> Value:
    """onnxruntime's mask_index / key_padding_mask forms as an additive mask broadcasting to
    (B, 1, S, T): (B,) valid lengths, (2B,) end then start positions, (B, T) and (B, S, T)
    with 1 = attend."""
    rank = None if mask.shape is None else len(mask.shape)
    if rank == 2:
        keep = b.op("Greater", [mask, b.const(np.array(0, mask.dtype))], dtype=np.bool_)
        return b.op("Unsqueeze", [_select(b, keep, filt, dt), b.ints(1, 2)])
    if rank == 3:
        keep = b.op("Greater", [mask, b.const(np.array(0, mask.dtype))], dtype=np.bool_)
        return b.op("Unsqueeze", [_select(b, keep, filt, dt), b.ints(1)])
    if rank != 1:
        raise Decline(f"mask of rank {rank} (4-D masks are not covered)")
    n = mask.shape[0]
    cols = _arange(b, total)
    idx = b.op("Cast", [mask], {"to": 7}, dtype=np.int64)
    if isinstance(n, int) and isinstance(batch, int) and n == 2 * batch:
        end, start = b.op("Split", [idx, b.ints(batch, batch)], {"axis": 0}, outputs=2)
        end, start = (b.op("Unsqueeze", [t, b.ints(1)]) for t in (end, start))
        keep = b.op("And", [b.op("Less", [cols, end], dtype=np.bool_),
                            b.op("GreaterOrEqual", [cols, start], dtype=np.bool_)], dtype=np.bool_)
    elif n == batch and n is not None or isinstance(n, str):  # a symbolic length: B (the
        # form onnxruntime's fusions and EmbedLayerNormalization make)
        keep = b.op("Less", [cols, b.op("Unsqueeze", [idx, b.ints(1)])], dtype=np.bool_)
    else:
        raise Decline(f"1-D mask of length {n} for batch {batch} (B or 2B expected)")
    return b.op("Unsqueeze", [_select(b, keep, filt, dt), b.ints(1, 2)])


def _sum(b: Builder, terms) -> Value | None:
    out = None
    for t in terms:
        if t is not None:
            out = t if out is None else b.op("Add", [out, t])
    return out


def _mask(b: Builder, n: Node, x: Value, mask, attn_bias, q_len, past_len, total):
    """The additive mask of Attention / MultiHeadAttention: key mask + causal triangle
    (``unidirectional``) + attention_bias, each where present (None when none is)."""
    dt = np.dtype(x.dtype)
    filt = float(n.attrs.get("mask_filter_value", -10000.0))
    batch = None if x.shape is None else x.shape[0]
    return _sum(b, [_key_mask(b, mask, batch, total, filt, dt) if mask is not None else None,
                    _causal(b, q_len, past_len, total, filt, dt)
                    if n.attrs.get("unidirectional", 0) else None, attn_bias])


def _heads_attention(b: Builder, q, k, v, mask, past_k, past_v, heads: int, kv_heads: int,
                     scale, softcap: float = 0.0):
    """Default-domain Attention on 3-D Q/K/V; returns (Y, present_key, present_value)."""
    attrs = {"q_num_heads": heads, "kv_num_heads": kv_heads}
    if scale is not None:
        attrs["scale"] = float(scale)
    if softcap:
        attrs["softcap"] = float(softcap)
    ins = [q, k, v, mask, past_k, past_v]
    while ins[-1] is None:
        ins.pop()
    if past_k is None:
        return b.op("Attention", ins, attrs), None, None
    return tuple(b.op("Attention", ins, attrs, outputs=3))


def _check_plain(n: Node, *names: str) -> None:
    for a in names:
        if n.attrs.get(a, 0):
            raise Decline(f"attribute {a}={n.attrs[a]!r} is not covered")


@expansion(MS, "Attention")
def _attention(b: Builder, n: Node):
    """input (B, S, In) @ weights (+ bias) split into Q, K, V (qkv_hidden_sizes or thirds);
    mask_index, past (2, B, N, P, H) -> present (2, B, N, P + S, H), attention_bias,
    unidirectional."""
    _check_plain(n, "do_rotary", "past_present_share_buffer")
    if n.input(6) is not None:
        raise Decline("past_sequence_length input")
    x, w, bias, mask, past, attn_bias = (n.input(i) for i in range(6))
    heads = int(n.attrs["num_heads"])
    if w.shape is None or not isinstance(w.shape[1], int):
        raise Decline("weights of unknown width")
    sizes = list(n.attrs.get("qkv_hidden_sizes") or [w.shape[1] // 3] * 3)
    qkv = b.op("MatMul", [x, w])
    if bias is not None:
        qkv = b.op("Add", [qkv, bias])
    q, k, v = b.op("Split", [qkv, b.ints(*sizes)], {"axis": -1}, outputs=3)
    past_k = past_v = None
    if past is not None:
        past_k, past_v = (b.op("Squeeze", [t, b.ints(0)]) for t in
                          b.op("Split", [past, b.ints(1, 1)], {"axis": 0}, outputs=2))
    q_len = _dim(b, x, 1)
    past_len = _dim(b, past, 3) if past is not None else _i64(b, 0)
    total = b.op("Add", [q_len, past_len])
    y, pk, pv = _heads_attention(b, q, k, v, _mask(b, n, x, mask, attn_bias, q_len, past_len,
                                                   total), past_k, past_v, heads, heads,
                                 n.attrs.get("scale"))
    present = None
    if pk is not None and len(n.outputs) > 1:
        present = b.op("Concat", [b.op("Unsqueeze", [pk, b.ints(0)]),
                                  b.op("Unsqueeze", [pv, b.ints(0)])], {"axis": 0})
    return [y, present]


@expansion(MS, "MultiHeadAttention")
def _multihead_attention(b: Builder, n: Node):
    """3-D query, key and value (+ bias of Dq + Dk + Dv), key_padding_mask, attention_bias,
    past_key / past_value (B, N, P, H) -> present_key / present_value; packed QKV, 4-D
    (already projected) keys and cache indirection are not covered."""
    q, k, v, bias, kpm, attn_bias, past_k, past_v = (n.input(i) for i in range(8))
    if any(n.input(i) is not None for i in range(8, 12)):
        raise Decline("inputs past_sequence_length / cache_indirection are not covered")
    if k is None or v is None or any(t.shape is None or len(t.shape) != 3 for t in (q, k, v)):
        raise Decline("packed or 4-D query/key/value are not covered")
    heads = int(n.attrs["num_heads"])
    if bias is not None:
        dims = [t.shape[2] for t in (q, k, v)]
        if not all(isinstance(d, int) for d in dims):
            raise Decline("bias with hidden sizes unknown at compile time")
        bq, bk, bv = b.op("Split", [bias, b.ints(*dims)], {"axis": 0}, outputs=3)
        q, k, v = b.op("Add", [q, bq]), b.op("Add", [k, bk]), b.op("Add", [v, bv])
    q_len = _dim(b, q, 1)
    past_len = _dim(b, past_k, 2) if past_k is not None else _i64(b, 0)
    total = b.op("Add", [_dim(b, k, 1), past_len])
    y, pk, pv = _heads_attention(b, q, k, v, _mask(b, n, q, kpm, attn_bias, q_len, past_len,
                                                   total), past_k, past_v, heads, heads,
                                 n.attrs.get("scale"))
    return [y, pk, pv]


def _rotate(b: Builder, x, cos, sin, pos, heads: int, interleaved: bool, rot_dim: int = 0):
    attrs = {"num_heads": heads, "interleaved": int(interleaved)}
    if rot_dim:
        attrs["rotary_embedding_dim"] = rot_dim
    return b.op("RotaryEmbedding", [x, cos, sin, pos], attrs)


@expansion(MS, "GroupQueryAttention")
def _group_query_attention(b: Builder, n: Node):
    """Causal attention with kv_num_heads <= num_heads, past_key / past_value (B, Nkv, P, H)
    and the new keys / values into present_key / present_value (B, Nkv, P + S, H), optional
    rotary (do_rotary, positions past + i). Each batch row has its own past length
    seqlens_k[b] + 1 - S (0 for a first prompt, S == total_sequence_length: right-padded rows
    start at 0 as in onnxruntime's prompt mode; a padded query's output is not defined by
    onnxruntime): its queries sit at past + i, see keys j <= past + i, and its present row holds
    its first `past` past entries, then its S new ones, then zeros, as onnxruntime writes them
    (`_place_rows`), so batched decoding with rows of different lengths matches. Differs from
    onnxruntime: past / present sharing one buffer (total_sequence_length <= P), where
    onnxruntime's present stays P long (the new keys written into the past buffer): jitort's is
    P + S long, holding the same entries up to each row's length and zeros after, with the
    same Y; fed back as the next step's past it decodes the same, one buffer growing by S per
    step. Declined: local_window_size, smooth_softmax, attention_bias, head_sink, packed QKV."""
    _check_plain(n, "smooth_softmax")
    if int(n.attrs.get("local_window_size", -1)) != -1:
        raise Decline("local_window_size")
    if any(n.input(i) is not None for i in (10, 11)):
        raise Decline("attention_bias / head_sink inputs")
    q, k, v, past_k, past_v, seqlens = (n.input(i) for i in range(6))
    if k is None or v is None:
        raise Decline("packed QKV (key and value omitted)")
    heads, kv_heads = int(n.attrs["num_heads"]), int(n.attrs["kv_num_heads"])
    dt = np.dtype(q.dtype)
    q_len = _dim(b, q, 1)
    # per batch row: past length seqlens_k + 1 - S, queries at past + i, keys j <= past + i;
    # a first prompt (S == total_sequence_length) starts every row at 0, as onnxruntime's
    # prompt mode: a right-padded row's seqlens_k is its own length - 1, not S - 1
    past_b = b.op("Sub", [b.op("Add", [b.op("Cast", [seqlens], {"to": 7}, dtype=np.int64),
                                        _i64(b, 1)]), q_len])
    if n.input(6) is not None:
        total_in = b.op("Reshape", [b.op("Cast", [n.input(6)], {"to": 7}, dtype=np.int64),
                                    b.ints()], dtype=np.int64)
        first = b.op("Equal", [q_len, total_in], dtype=np.bool_)
        past_b = b.op("Where", [first, _i64(b, 0), past_b], dtype=np.int64)
    pos = b.op("Add", [b.op("Unsqueeze", [past_b, b.ints(1)]),
                       b.op("Unsqueeze", [_arange(b, q_len), b.ints(0)])])  # (B, S)
    if n.attrs.get("do_rotary", 0):
        cos, sin = n.input(7), n.input(8)
        if n.input(9) is not None:
            pos = b.op("Cast", [n.input(9)], {"to": 7}, dtype=np.int64)
        il = bool(n.attrs.get("rotary_interleaved", 0))
        q = _rotate(b, q, cos, sin, pos, heads, il)
        k = _rotate(b, k, cos, sin, pos, kv_heads, il)
    past_len = _dim(b, past_k, 2) if past_k is not None else _i64(b, 0)
    total = b.op("Add", [_dim(b, k, 1), past_len])
    cols = b.op("Unsqueeze", [_arange(b, total), b.ints(0, 1)])  # (1, 1, T)
    keep = b.op("LessOrEqual", [cols, b.op("Unsqueeze", [pos, b.ints(2)])], dtype=np.bool_)
    mask = b.op("Unsqueeze", [_select(b, keep, float(np.finfo(dt).min), dt), b.ints(1)])
    scale, softcap = n.attrs.get("scale") or None, float(n.attrs.get("softcap", 0.0))
    if past_k is None:
        if any(used(b.g, o, b.g.consumers()) for o in n.outputs[1:]):
            raise Decline("present_key / present_value without past_key / past_value")
        y, _, _ = _heads_attention(b, q, k, v, mask, None, None, heads, kv_heads, scale, softcap)
        return [y, None, None]
    pk = _place_rows(b, past_k, _to_heads(b, k, kv_heads), past_b, q_len)
    pv = _place_rows(b, past_v, _to_heads(b, v, kv_heads), past_b, q_len)
    y, _, _ = _heads_attention(b, _to_heads(b, q, heads), pk, pv, mask, None, None, heads,
                               kv_heads, scale, softcap)
    return [_from_heads(b, y), pk, pv]


def _to_heads(b: Builder, x: Value, heads: int) -> Value:
    """(B, S, heads * H) -> (B, heads, S, H)."""
    r = b.op("Reshape", [x, b.ints(0, 0, heads, -1)])
    return b.op("Transpose", [r], {"perm": [0, 2, 1, 3]})


def _from_heads(b: Builder, y: Value) -> Value:
    """(B, heads, S, H) -> (B, S, heads * H)."""
    t = b.op("Transpose", [y], {"perm": [0, 2, 1, 3]})
    return b.op("Reshape", [t, b.ints(0, 0, -1)])


def _place_rows(b: Builder, past: Value, new: Value, past_b: Value, q_len: Value) -> Value:
    """GroupQueryAttention's present (B, N, P + S, H) from past (B, N, P, H), the new entries
    (B, N, S, H) and each row's past length ``past_b`` (B,): row b holds past[b, :, :past_b],
    then its S new entries, then zeros (onnxruntime's CPU kernel). Rows all at P: the
    concatenation."""
    base = b.op("Concat", [past, new], {"axis": 2})
    total = b.op("Add", [_dim(b, past, 2), q_len])
    j = b.op("Unsqueeze", [_arange(b, total), b.ints(0, 1, 3)])      # (1, 1, T, 1)
    pb = b.op("Unsqueeze", [past_b, b.ints(1, 2, 3)])                # (B, 1, 1, 1)
    rel = b.op("Sub", [j, pb])                                       # new entry index
    from_past = b.op("Less", [j, pb], dtype=np.bool_)
    from_new = b.op("And", [b.op("GreaterOrEqual", [rel, _i64(b, 0)], dtype=np.bool_),
                            b.op("Less", [rel, q_len], dtype=np.bool_)], dtype=np.bool_)
    idx = b.op("Min", [b.op("Max", [rel, _i64(b, 0)]), b.op("Sub", [q_len, _i64(b, 1)])])
    rows = b.op("Concat", [b.op("Shape", [base], {"end": 3}, dtype=np.int64), b.ints(1)],
                {"axis": 0}, dtype=np.int64)
    # (B, N, T, 1) row indices: whole rows of H elements gathered, not single elements
    moved = b.op("GatherND", [new, b.op("Expand", [idx, rows])], {"batch_dims": 2})
    zero = b.const(np.array(0, np.dtype(past.dtype)))
    return b.op("Where", [from_past, base, b.op("Where", [from_new, moved, zero])])


@expansion(MS, "RotaryEmbedding")
def _rotary_embedding(b: Builder, n: Node):
    """input (B, S, D) or (B, N, S, H), position_ids (B, S) or one offset (positions
    offset + i), cos_cache / sin_cache (max positions, rot / 2)."""
    _check_plain(n, "is_packed_batching")
    if float(n.attrs.get("scale", 1.0)) != 1.0:
        raise Decline("scale != 1")
    x, pos, cos, sin = (n.input(i) for i in range(4))
    heads = int(n.attrs.get("num_heads", 0))
    rot = int(n.attrs.get("rotary_embedding_dim", 0))
    if x.shape is None or pos.shape is None:
        raise Decline("input or position_ids of unknown rank")
    if len(x.shape) == 3 and not heads:
        head = rot or (cos.shape[1] * 2 if cos.shape and isinstance(cos.shape[1], int) else None)
        if head is None or not isinstance(x.shape[2], int):
            raise Decline("3-D input without num_heads and sizes unknown at compile time")
        heads = x.shape[2] // head
    p = b.op("Cast", [pos], {"to": 7}, dtype=np.int64)
    if len(pos.shape) != 2:  # one offset: positions offset .. offset + S - 1 in every row
        seq = _dim(b, x, 1 if len(x.shape) == 3 else 2)
        row = b.op("Add", [b.op("Unsqueeze", [_arange(b, seq), b.ints(0)]),
                           b.op("Reshape", [p, b.ints(1, 1)])])
        p = b.op("Expand", [row, b.op("Concat", [b.op("Shape", [x], {"start": 0, "end": 1},
                                                      dtype=np.int64),
                                                 b.op("Unsqueeze", [seq, b.ints(0)])],
                                      {"axis": 0})])
    attrs_heads = heads if len(x.shape) == 3 else 0
    return [_rotate(b, x, cos, sin, p, attrs_heads, bool(n.attrs.get("interleaved", 0)), rot)]
