"""Attention (opset 23) and RotaryEmbedding compiled by jitort against onnxruntime (and
onnx.reference where onnxruntime declines a combination): nothing may run interpreted."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import jitort

F32, BOOL, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
_TT = {np.dtype(np.float32): F32, np.dtype(np.bool_): BOOL, np.dtype(np.int64): I64}


def _model(op, feeds, n_out, opset=23, **attrs):
    ins = [helper.make_tensor_value_info(n, _TT[a.dtype], a.shape) for n, a in feeds if a is not None]
    outs = [f"o{i}" for i in range(n_out)]
    node = helper.make_node(op, [n if a is not None else "" for n, a in feeds], outs, **attrs)
    g = helper.make_graph([node], "g", ins, [onnx.ValueInfoProto(name=o) for o in outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
    for o in m.graph.output:
        if o.name in inferred:
            o.CopyFrom(inferred[o.name])
        else:
            o.CopyFrom(helper.make_tensor_value_info(o.name, F32, None))
    return m


def _reference(m, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    try:
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return sess.run(None, feeds), "onnxruntime"
    except Exception:  # a combination onnxruntime does not implement
        from onnx.reference import ReferenceEvaluator
        return ReferenceEvaluator(m).run(None, feeds), "onnx.reference"


def _check(op, feeds, n_out=1, opset=23, **attrs):
    m = _model(op, feeds, n_out, opset=opset, **attrs)
    fd = {n: a for n, a in feeds if a is not None}
    cm = jitort.compile(m, strict=True)
    got = cm.run(None, fd)
    assert cm.fallback_nodes() == []
    want, _ = _reference(m, fd)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    return got


def _rn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_attention_4d_plain(nthreads):
    q, k, v = _rn(2, 3, 5, 8), _rn(2, 3, 7, 8, seed=1), _rn(2, 3, 7, 6, seed=2)
    _check("Attention", [("q", q), ("k", k), ("v", v)])


def test_attention_gqa_causal_and_scale(nthreads):
    q, k, v = _rn(1, 4, 6, 8), _rn(1, 2, 6, 8, seed=1), _rn(1, 2, 6, 8, seed=2)
    _check("Attention", [("q", q), ("k", k), ("v", v)], is_causal=1, scale=0.3)


@pytest.mark.parametrize("mask_kind", ["bool2d", "float4d", "short"])
def test_attention_3d_with_masks(mask_kind, nthreads):
    b, sq, skv, hq, hkv, d = 2, 4, 6, 4, 2, 8
    q, k, v = _rn(b, sq, hq * d), _rn(b, skv, hkv * d, seed=1), _rn(b, skv, hkv * d, seed=2)
    rng = np.random.default_rng(3)
    if mask_kind == "bool2d":
        mask = rng.random((sq, skv)) > 0.3
        mask[:, 0] = True
    elif mask_kind == "float4d":
        mask = rng.standard_normal((b, 1, sq, skv)).astype(np.float32)
    else:  # fewer keys than attended: the rest is masked
        mask = np.zeros((sq, skv - 2), np.float32)
    _check("Attention", [("q", q), ("k", k), ("v", v), ("m", mask)], q_num_heads=hq,
           kv_num_heads=hkv)


def test_attention_past_cache_and_present_outputs(nthreads):
    b, h, p, s, d = 1, 2, 3, 2, 4
    q, k, v = _rn(b, h, s, d), _rn(b, h, s, d, seed=1), _rn(b, h, s, d, seed=2)
    pk, pv = _rn(b, h, p, d, seed=3), _rn(b, h, p, d, seed=4)
    _check("Attention", [("q", q), ("k", k), ("v", v), ("m", None), ("pk", pk), ("pv", pv)],
           n_out=3, is_causal=1)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_softcap_and_qk_output(mode):
    q, k, v = _rn(1, 2, 3, 4), _rn(1, 2, 5, 4, seed=1), _rn(1, 2, 5, 4, seed=2)
    mask = np.random.default_rng(5).standard_normal((3, 5)).astype(np.float32)
    _check("Attention", [("q", q), ("k", k), ("v", v), ("m", mask), ("pk", None), ("pv", None)],
           n_out=4, softcap=2.0, qk_matmul_output_mode=mode)


def test_attention_fully_masked_row_gives_zeros():
    q, k, v = _rn(1, 1, 2, 4), _rn(1, 1, 3, 4, seed=1), _rn(1, 1, 3, 4, seed=2)
    mask = np.array([[True, True, False], [False, False, False]])
    (y,) = _check("Attention", [("q", q), ("k", k), ("v", v), ("m", mask)])
    np.testing.assert_array_equal(y[0, 0, 1], 0.0)


def test_attention_empty_batch():
    q, k, v = _rn(0, 2, 3, 4), _rn(0, 2, 3, 4, seed=1), _rn(0, 2, 3, 4, seed=2)
    m = _model("Attention", [("q", q), ("k", k), ("v", v)], 1)
    (y,) = jitort.compile(m, strict=True).run(None, {"q": q, "k": k, "v": v})
    assert y.shape == (0, 2, 3, 4)


@pytest.mark.parametrize("layout", ["3d", "4d"])
@pytest.mark.parametrize("mask_kind", [None, "bool", "float", "per_head", "causal"])
def test_attention_grouped_decode_step(layout, mask_kind, nthreads):
    """One query row of grouped-query attention (a decoding step): the group's query heads go
    as the rows of one block (one task per key/value head) unless the heads see different keys
    (a mask with a head axis, the causal frontier), where each head is its own task."""
    b, hq, hkv, skv, d = 2, 8, 2, 37, 16
    rng = np.random.default_rng(7)
    if layout == "4d":
        q, k, v = _rn(b, hq, 1, d), _rn(b, hkv, skv, d, seed=1), _rn(b, hkv, skv, d, seed=2)
        attrs = {}
    else:
        q, k, v = _rn(b, 1, hq * d), _rn(b, skv, hkv * d, seed=1), _rn(b, skv, hkv * d, seed=2)
        attrs = {"q_num_heads": hq, "kv_num_heads": hkv}
    mask = None
    if mask_kind == "bool":
        mask = rng.random((1, skv)) > 0.3
        mask[:, 0] = True
    elif mask_kind == "float":
        mask = rng.standard_normal((b, 1, 1, skv)).astype(np.float32)
    elif mask_kind == "per_head":
        mask = rng.standard_normal((b, hq, 1, skv)).astype(np.float32)
    elif mask_kind == "causal":
        attrs["is_causal"] = 1
    _check("Attention", [("q", q), ("k", k), ("v", v), ("m", mask)], softcap=3.0, **attrs)


def test_attention_grouped_decode_split_over_threads(nthreads):
    q, k, v = _rn(2, 16, 1, 64), _rn(2, 4, 300, 64, seed=1), _rn(2, 4, 300, 64, seed=2)
    _check("Attention", [("q", q), ("k", k), ("v", v)])


def test_attention_big_enough_to_split_over_threads(nthreads):
    q, k, v = _rn(2, 4, 64, 32), _rn(2, 4, 64, 32, seed=1), _rn(2, 4, 64, 32, seed=2)
    _check("Attention", [("q", q), ("k", k), ("v", v)], is_causal=1)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("layout", ["3d", "4d"])
@pytest.mark.parametrize("partial", [False, True])
def test_rotary_embedding(interleaved, layout, partial):
    b, s, h, d, npos = 2, 5, 3, 8, 16
    rot = 4 if partial else d
    x = _rn(b, s, h * d) if layout == "3d" else _rn(b, h, s, d)
    ang = np.random.default_rng(1).random((npos, rot // 2)).astype(np.float32) * 6
    pos = np.random.default_rng(2).integers(0, npos, (b, s)).astype(np.int64)
    attrs = {"interleaved": interleaved}
    if layout == "3d":
        attrs["num_heads"] = h
    if partial:
        attrs["rotary_embedding_dim"] = rot
    _check("RotaryEmbedding", [("x", x), ("c", np.cos(ang)), ("s", np.sin(ang)), ("p", pos)],
           **attrs)


def test_rotary_embedding_without_position_ids():
    b, s, h, d = 1, 4, 2, 6
    x = _rn(b, h, s, d)
    ang = np.random.default_rng(1).random((b, s, d // 2)).astype(np.float32)
    _check("RotaryEmbedding", [("x", x), ("c", np.cos(ang)), ("s", np.sin(ang))])


def test_rotary_position_out_of_range_raises():
    x = _rn(1, 2, 4)
    c = np.ones((3, 2), np.float32)
    m = _model("RotaryEmbedding", [("x", x), ("c", c), ("s", c), ("p", np.zeros((1, 2), np.int64))],
               1, num_heads=1)
    cm = jitort.compile(m, strict=True)
    with pytest.raises(jitort.JitortError, match="position id"):
        cm.run(None, {"x": x, "c": c, "s": c, "p": np.array([[0, 7]], np.int64)})



def test_attention_nonpad_kv_seqlen_and_sliding_window():
    """opset 25: per-batch valid key counts (an external cache) and a causal sliding window."""
    b, h, sq, skv, d = 2, 2, 3, 6, 4
    q, k, v = _rn(b, h, sq, d), _rn(b, h, skv, d, seed=1), _rn(b, h, skv, d, seed=2)
    nonpad = np.array([6, 4], np.int64)
    _check("Attention", [("q", q), ("k", k), ("v", v), ("m", None), ("pk", None), ("pv", None),
                         ("n", nonpad)], opset=25, is_causal=1, left_window_size=2)


@pytest.mark.parametrize("sq,skv,attrs", [
    (150, 150, dict(is_causal=1)),                              # 3 row blocks, the last partial
    (90, 125, dict(is_causal=1)),                               # keys before the queries
    (140, 140, dict(is_causal=1, left_window_size=9)),          # a window: blocks start later
    (100, 70, dict(left_window_size=5, right_window_size=3)),   # a window without causality
])
def test_attention_row_blocks_see_only_their_keys(sq, skv, attrs, nthreads):
    """Rows whose visible keys vary (causal, sliding window, key padding) go in blocks of
    ``attention._ROW_BLOCK`` rows, each block's scores and P @ V over the keys some row of it
    sees: blocks of several rows, a partial last one, empty key ranges, against onnxruntime /
    onnx.reference."""
    from jitort.kernels.cpu import attention as A
    assert sq > A._ROW_BLOCK
    q, k, v = _rn(2, 2, sq, 16), _rn(2, 2, skv, 16, seed=1), _rn(2, 2, skv, 8, seed=2)
    nonpad = np.array([skv, skv - 11], np.int64)
    _check("Attention", [("q", q), ("k", k), ("v", v), ("m", None), ("pk", None), ("pv", None),
                         ("n", nonpad)], opset=25, **attrs)
