"""onnxruntime's transformer contrib ops (domain com.microsoft) compiled: each op against
onnxruntime on small shapes (masks, optional inputs and outputs, the attributes that matter),
and bert after onnxruntime's own optimizer (``optimize_model(model_type="bert")``), all with
``strict=True`` (no node left to the interpreter)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import jitort
from tests.helpers import assert_outputs_close, require_cases
from tests.models import shared_feeds, shared_path

MS = "com.microsoft"
F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
NP = {F: np.float32, I32: np.int32, I64: np.int64}
R = np.random.default_rng(0)


def _f(*shape):
    return R.standard_normal(shape).astype(np.float32)


def _model(op, inputs, outputs, attrs=None, inits=None, domain=MS):
    """One ``op`` node (domain com.microsoft by default): ``inputs`` [(name, dtype, array)]
    (None name: omitted; the arrays of ``inits`` names become initializers), ``outputs``
    names ('' omitted). Returns (model, feeds)."""
    return _graph([(op, inputs, list(outputs), attrs or {}, inits or {}, domain)], "")


def _graph(cases, sep="_"):
    """One model holding each case's node, its names prefixed by the case's index (several
    cases compile together: one driver instead of one per case). Returns (model, feeds)."""
    nodes, graph_in, graph_out, inits, feeds = [], [], [], [], {}
    for i, (op, inputs, outputs, attrs, case_inits, domain) in enumerate(cases):
        pre = f"c{i}{sep}" if sep else ""
        nodes.append(helper.make_node(op, [pre + n if n else "" for n, _, _ in inputs],
                                      [pre + o if o else "" for o in outputs], domain=domain,
                                      **attrs))
        for n, t, a in inputs:
            if not n:
                continue
            if n in case_inits:
                inits.append(numpy_helper.from_array(a, pre + n))
            else:
                graph_in.append(helper.make_tensor_value_info(pre + n, t, list(a.shape)))
                feeds[pre + n] = a
        graph_out += [helper.make_tensor_value_info(pre + o, I32 if o == "mask_index" else F, None)
                      for o in outputs if o]
    m = helper.make_model(helper.make_graph(nodes, "g", graph_in, graph_out, inits),
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    m.ir_version = 8
    return m, feeds


def _ort(m, feeds):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(m.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def _case(op, inputs, outputs=("y",), attrs=None, init_names=(), domain=MS):
    arrays = {n: a for n, _, a in inputs if n}
    return op, inputs, list(outputs), attrs or {}, {n: arrays[n] for n in init_names}, domain


def _norm_cases():
    x, s, g, be, bi = _f(2, 5, 16), _f(2, 5, 16), _f(16), _f(16), _f(16)
    return [
        _case("SkipLayerNormalization", [("x", F, x), ("skip", F, s), ("gamma", F, g),
                                         ("beta", F, be), ("bias", F, bi)],
              ("y", "", "", "sum"), {"epsilon": 1e-5}),
        _case("SkipLayerNormalization", [("x", F, x), ("skip", F, s), ("gamma", F, g)]),
        _case("SkipSimplifiedLayerNormalization", [("x", F, x), ("skip", F, s), ("gamma", F, g),
                                                   ("bias", F, bi)], ("y", "", "", "sum"),
              {"epsilon": 1e-6}),
        _case("SimplifiedLayerNormalization", [("x", F, x), ("gamma", F, g)], ("y",),
              {"epsilon": 1e-6, "axis": -1}, domain=""),  # onnxruntime's default-domain op
    ]


def _embed_cases():
    b, s, h = 2, 6, 16
    ids = R.integers(0, 30, (b, s)).astype(np.int32)
    seg = R.integers(0, 2, (b, s)).astype(np.int32)
    mask = np.ones((b, s), np.int32)
    mask[1, 4:] = 0
    w, p, sg, g, be = _f(30, h), _f(10, h), _f(2, h), _f(h), _f(h)
    full = [("ids", I32, ids), ("seg", I32, seg), ("word", F, w), ("pos", F, p),
            ("segemb", F, sg), ("gamma", F, g), ("beta", F, be), ("mask", I32, mask)]
    weights = ("word", "pos", "segemb", "gamma", "beta")
    bare = [("ids", I32, ids), (None, I32, None), ("word", F, w), ("pos", F, p),
            (None, F, None), ("gamma", F, g), ("beta", F, be)]
    return [
        _case("EmbedLayerNormalization", full, ("y", "mask_index"), {"epsilon": 1e-12}, weights),
        _case("EmbedLayerNormalization", bare, ("y", "mask_index"), {"epsilon": 1e-5},
              ("word", "pos", "gamma", "beta")),
    ]


def _attention_cases():
    b, s, hid, n = 2, 5, 16, 2
    x, w, bias = _f(b, s, hid), _f(hid, 3 * hid) * 0.3, _f(3 * hid)
    base = [("x", F, x), ("w", F, w), ("bias", F, bias)]
    lens = np.array([5, 3], np.int32)
    raw = np.ones((b, s), np.int32)
    raw[0, 1] = 0
    raw[1, 3:] = 0
    m3 = (R.random((b, s, s)) > 0.3).astype(np.int32)
    m3[:, :, 0] = 1
    ends_starts = np.array([5, 4, 1, 0], np.int32)
    past = _f(2, b, n, 3, hid // n)
    ab = _f(b, n, s, s)
    ws = ("w", "bias")
    a = {"num_heads": n}
    return [
        _case("Attention", base, ("y",), a, ws),
        _case("Attention", base + [("m", I32, lens)], ("y",), a, ws),
        _case("Attention", base + [("m", I32, ends_starts)], ("y",), a, ws),
        _case("Attention", base + [("m", I32, raw)], ("y",), {**a, "mask_filter_value": -1e4}, ws),
        _case("Attention", base + [("m", I32, m3)], ("y",), a, ws),
        _case("Attention", base + [("m", I32, raw)], ("y",), {**a, "unidirectional": 1}, ws),
        _case("Attention", base + [("m", I32, np.concatenate([np.ones((b, 3), np.int32), raw], 1)),
                                   ("past", F, past)], ("y", "present"),
              {**a, "unidirectional": 1}, ws),
        _case("Attention", base + [(None, I32, None), (None, F, None), ("ab", F, ab)], ("y",),
              {**a, "scale": 0.2}, ws),
    ]


def _mha_cases():
    b, s, l, hid, n = 2, 4, 6, 16, 4
    q, k, v, bias = _f(b, s, hid), _f(b, l, hid), _f(b, l, hid), _f(3 * hid)
    kpm = np.ones((b, l), np.int32)
    kpm[1, 4:] = 0
    pk, pv = _f(b, n, 2, hid // n), _f(b, n, 2, hid // n)
    kpm_t = np.ones((b, s + 2), np.int32)
    kpm_t[0, 0] = 0
    qs = [("q", F, q), ("k", F, k), ("v", F, v)]
    return [
        _case("MultiHeadAttention", qs + [("bias", F, bias), ("kpm", I32, kpm)], ("y",),
              {"num_heads": n}),
        _case("MultiHeadAttention", [("q", F, q), ("k", F, _f(b, s, hid)), ("v", F, _f(b, s, hid)),
                                     (None, F, None), ("kpm", I32, kpm_t), (None, F, None),
                                     ("pk", F, pk), ("pv", F, pv)], ("y", "pk_out", "pv_out"),
              {"num_heads": n, "unidirectional": 1}),
    ]


def _gqa_case(rotary: bool, interleaved: int = 0):
    """onnxruntime's CPU kernel takes a past with several new tokens at batch 1 only, and a
    rotary head size that is a multiple of 16: a decode step (S = 1) at batch 2 without
    rotary, a chunk of 3 tokens at batch 1 with it."""
    b, s, n, kvn, hd, p = (1, 3, 4, 2, 16, 4) if rotary else (2, 1, 4, 2, 8, 4)
    q, k, v = _f(b, s, n * hd), _f(b, s, kvn * hd), _f(b, s, kvn * hd)
    pk, pv = _f(b, kvn, p, hd), _f(b, kvn, p, hd)
    seqlens = np.full((b,), p + s - 1, np.int32)
    total = np.array(p + s, np.int32)
    ins = [("q", F, q), ("k", F, k), ("v", F, v), ("pk", F, pk), ("pv", F, pv),
           ("seqlens", I32, seqlens), ("total", I32, total)]
    attrs = {"num_heads": n, "kv_num_heads": kvn}
    if rotary:
        ang = np.arange(16)[:, None] * (1.0 / 10000 ** (np.arange(hd // 2) / (hd // 2)))[None]
        ins += [("cos", F, np.cos(ang).astype(np.float32)), ("sin", F, np.sin(ang).astype(np.float32))]
        attrs.update(do_rotary=1, rotary_interleaved=interleaved)
    return _case("GroupQueryAttention", ins, ("y", "pk_out", "pv_out"), attrs)


def _gqa_decode(seqlens, past: int, rotary: bool = False):
    """A decode step (S = 1) at batch len(seqlens): row b's past length is seqlens[b] (its
    new key goes at that position of present; rows shorter than ``past`` leave the rest of
    their past buffer unused)."""
    b, s, n, kvn, hd = len(seqlens), 1, 4, 2, 16
    ins = [("q", F, _f(b, s, n * hd)), ("k", F, _f(b, s, kvn * hd)), ("v", F, _f(b, s, kvn * hd)),
           ("pk", F, _f(b, kvn, past, hd)), ("pv", F, _f(b, kvn, past, hd)),
           ("seqlens", I32, np.array(seqlens, np.int32)),
           ("total", I32, np.array(max(seqlens) + s, np.int32))]
    attrs = {"num_heads": n, "kv_num_heads": kvn}
    if rotary:
        ang = np.arange(16)[:, None] * (1.0 / 10000 ** (np.arange(hd // 2) / (hd // 2)))[None]
        ins += [("cos", F, np.cos(ang).astype(np.float32)),
                ("sin", F, np.sin(ang).astype(np.float32))]
        attrs.update(do_rotary=1)
    return _case("GroupQueryAttention", ins, ("y", "pk_out", "pv_out"), attrs)


def _gqa_prompt_padded():
    """A first prompt of a batch right-padded to S (seqlens_k + 1 = each row's length <= S =
    total_sequence_length): every row's queries take positions 0..S-1 (causal from 0), as
    onnxruntime's prompt mode, whatever the row's length."""
    b, s, n, kvn, hd = 2, 5, 4, 2, 8
    ins = [("q", F, _f(b, s, n * hd)), ("k", F, _f(b, s, kvn * hd)), ("v", F, _f(b, s, kvn * hd)),
           (None, F, None), (None, F, None), ("seqlens", I32, np.array([4, 2], np.int32)),
           ("total", I32, np.array(s, np.int32))]
    return _case("GroupQueryAttention", ins, ("y",), {"num_heads": n, "kv_num_heads": kvn})


def _rotary_cases():
    b, s, n, hd = 2, 5, 2, 8
    ang = np.arange(12)[:, None] * (1.0 / 10000 ** (np.arange(hd // 2) / (hd // 2)))[None]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    pos = R.integers(0, 7, (b, s)).astype(np.int64)
    caches = [("cos", F, cos), ("sin", F, sin)]
    return [
        _case("RotaryEmbedding", [("x", F, _f(b, s, n * hd)), ("pos", I64, pos)] + caches,
              ("y",), {"num_heads": n, "interleaved": il}) for il in (0, 1)
    ] + [
        _case("RotaryEmbedding", [("x", F, _f(b, n, s, hd)), ("pos", I64, pos)] + caches,
              ("y",), {"interleaved": 1}),
        _case("RotaryEmbedding", [("x", F, _f(b, s, n * hd)),
                                  ("pos", I64, np.array([3], np.int64))] + caches, ("y",),
              {"num_heads": n}),
    ]


def _activation_cases():
    x, bias = _f(2, 3, 8), _f(8)
    a, bm = _f(2, 3, 4), _f(5, 4)
    return [
        _case("BiasGelu", [("x", F, x), ("bias", F, bias)], init_names=("bias",)),
        _case("FastGelu", [("x", F, x), ("bias", F, bias)]),
        _case("FastGelu", [("x", F, x)]),
        _case("Gelu", [("x", F, x)]),
        _case("QuickGelu", [("x", F, x)], attrs={"alpha": 1.5}),
        _case("FusedMatMul", [("a", F, a), ("b", F, bm)], attrs={"transB": 1, "alpha": 0.5},
              init_names=("b",)),
        _case("FusedMatMul", [("a", F, _f(2, 4, 3)), ("b", F, _f(4, 5))],
              attrs={"transA": 1}),
    ]


GROUPS = {"norms": _norm_cases(), "embed": _embed_cases(), "attention": _attention_cases(),
          "mha": _mha_cases(), "gqa": [_gqa_case(False)], "gqa_rotary": [_gqa_case(True)],
          "gqa_rotary_interleaved": [_gqa_case(True, 1)],
          "gqa_ragged_decode": [_gqa_decode([4, 2, 0], 4), _gqa_decode([5, 1], 5, rotary=True)],
          "rotary": _rotary_cases(),
          "activations": _activation_cases()}
require_cases([c for g in GROUPS.values() for c in g], 30, "this module's case lists")


@pytest.mark.parametrize("group", list(GROUPS))
def test_contrib_ops_match_onnxruntime(group):
    """Each case of the group a node of one model (one compile), every output compared."""
    m, feeds = _graph(GROUPS[group])
    want = _ort(m, feeds)
    cm = jitort.compile(m, strict=True)
    got = cm.run(None, feeds)
    names = [o.name for o in m.graph.output]
    assert_outputs_close(got, want, rtol=1e-4, atol=1e-4, names=names)


def test_activations_run_on_tier_zero():
    """The GELU family expands into opset 20's Gelu whatever the model's opset (17 here): the
    interpreter tier runs it at its own version (a tiered model's first calls; before, such
    a model could not be tiered at all)."""
    from tests.helpers import run_tier
    m, feeds = _graph(GROUPS["activations"])
    got, want = run_tier(m, feeds, "interpreter"), _ort(m, feeds)
    assert_outputs_close(got, want, rtol=1e-4, atol=1e-4,
                         names=[o.name for o in m.graph.output])


def test_gqa_padded_prompt_rows_match_onnxruntime():
    """The padded queries of a right-padded prompt are left out: onnxruntime's CPU kernel
    computes scores only for keys below the row's length, then normalizes over the causal
    window, which reaches into score slots it never wrote (its output there is not
    defined)."""
    m, feeds = _graph([_gqa_prompt_padded()])
    want = _ort(m, feeds)[0]
    got = jitort.compile(m, strict=True).run(None, feeds)[0]
    assert got.shape == want.shape
    for row, length in enumerate(feeds["c0_seqlens"] + 1):
        np.testing.assert_allclose(got[row, :length], want[row, :length], rtol=1e-4, atol=1e-4)


def test_gqa_shared_buffer_decode_loop():
    """past and present sharing one buffer (total_sequence_length <= P, onnxruntime-genai's
    form): onnxruntime's present stays P long, jitort's is P + S long (docstring of the
    expansion) with the same entries up to each row's length, and Y equal; fed back as the
    next step's past, every step's Y still equals onnxruntime's."""
    b, n, kvn, hd, buf = 2, 4, 2, 8, 8
    m, feeds = _graph([_case("GroupQueryAttention", [
        ("q", F, _f(b, 1, n * hd)), ("k", F, _f(b, 1, kvn * hd)), ("v", F, _f(b, 1, kvn * hd)),
        ("pk", F, np.zeros((b, kvn, buf, hd), np.float32)),
        ("pv", F, np.zeros((b, kvn, buf, hd), np.float32)),
        ("seqlens", I32, np.zeros(b, np.int32)), ("total", I32, np.array(1, np.int32))],
        ("y", "pk_out", "pv_out"), {"num_heads": n, "kv_num_heads": kvn})], "")
    # onnxruntime's inputs are declared at the shapes of the first feeds: make past dynamic
    for i in (3, 4):
        m.graph.input[i].type.tensor_type.shape.dim[2].dim_param = "past"
    cm = jitort.compile(m, strict=True)
    lengths = np.array([3, 1], np.int32)              # rows' lengths before the first step
    ort_k, ort_v = _f(b, kvn, buf, hd), _f(b, kvn, buf, hd)
    jit_k, jit_v = ort_k.copy(), ort_v.copy()
    for step in range(4):
        new = {"q": _f(b, 1, n * hd), "k": _f(b, 1, kvn * hd), "v": _f(b, 1, kvn * hd),
               "seqlens": lengths, "total": np.array(lengths.max() + 1, np.int32)}
        y_ort, ort_k, ort_v = _ort(m, dict(new, pk=ort_k, pv=ort_v))
        y_jit, jit_k, jit_v = cm.run(None, dict(new, pk=jit_k, pv=jit_v))
        assert ort_k.shape[2] == buf and jit_k.shape[2] == buf + step + 1
        np.testing.assert_allclose(y_jit, y_ort, rtol=1e-4, atol=1e-5)
        for row, length in enumerate(lengths + 1):
            np.testing.assert_array_equal(jit_k[row, :, :length], ort_k[row, :, :length])
            np.testing.assert_array_equal(jit_v[row, :, :length], ort_v[row, :, :length])
        lengths = lengths + 1


def test_expansion_builder_types_outputs_by_schema():
    """The expansion Builder types an output as its op's schema does, not as its first input:
    Where's is its values' dtype, Less's bool, Shape's int64 (a Where typed bool by its
    condition was planned and stored as bools: every value came out as 1.0)."""
    from jitort.ir import Graph, Node, Value
    from jitort.passes.expand import Builder
    cond, x = Value("c", np.dtype(np.bool_), (3,)), Value("x", np.dtype(np.float32), (3,))
    host = Node("Identity", [x], [Value("y", np.dtype(np.float32), (3,))], {}, "", "n", 1)
    b = Builder(Graph([host], [cond, x], host.outputs), host)
    assert b.op("Where", [cond, x, b.const(np.float32(0))]).dtype == np.float32
    assert b.op("Less", [x, x]).dtype == np.bool_
    assert b.op("Shape", [x]).dtype == np.int64
    assert b.op("Add", [x, x]).dtype == np.float32
    assert b.op("Less", [x, x], dtype=np.int8).dtype == np.int8  # an explicit dtype wins


def test_gqa_present_by_where_then_scatter(monkeypatch):
    """GroupQueryAttention's present built as Where(j < past_b, Concat(past, new), 0), then
    ScatterElements of the new entries at past_b + s (the form that failed): a Where whose
    condition comes first and whose result is not the expansion's output, so its dtype came
    from the Builder (bool before the schema typed it: present's past entries were 1.0)."""
    from jitort.passes.expansions import transformer_attention as ta

    def place_rows(b, past, new, past_b, q_len):
        j = b.op("Unsqueeze", [ta._arange(b, b.op("Add", [ta._dim(b, past, 2), q_len])),
                               b.ints(0, 1, 3)])
        pb = b.op("Unsqueeze", [past_b, b.ints(1, 2, 3)])
        kept = b.op("Where", [b.op("Less", [j, pb]), b.op("Concat", [past, new], {"axis": 2}),
                              b.const(np.array(0, past.dtype))])
        at = b.op("Add", [pb, b.op("Unsqueeze", [ta._arange(b, q_len), b.ints(0, 1, 3)])])
        at = b.op("Expand", [at, b.op("Shape", [new])])
        return b.op("ScatterElements", [kept, at, new], {"axis": 2})

    monkeypatch.setattr(ta, "_place_rows", place_rows)
    m, feeds = _graph([_gqa_case(False), _gqa_decode([4, 2, 0], 4)])
    got = jitort.compile(m, strict=True).run(None, feeds)
    assert_outputs_close(got, _ort(m, feeds), rtol=1e-4, atol=1e-4,
                         names=[o.name for o in m.graph.output])


def test_bias_add():
    """BiasAdd has no CPU kernel in onnxruntime (CUDA only): against its documented sum."""
    x, bias, skip = _f(2, 3, 8), _f(8), _f(2, 3, 8)
    m, feeds = _model("BiasAdd", [("x", F, x), ("bias", F, bias), ("skip", F, skip)], ["y"])
    got = jitort.compile(m, strict=True).run(None, feeds)
    assert_outputs_close(got, [x + bias + skip], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op,attrs", [("FusedMatMul", {"transBatchA": 1}),
                                      ("NotAContribOp", {})])
def test_uncovered_contrib_op_is_named(op, attrs):
    m, _ = _model(op, [("a", F, _f(2, 3, 4)), ("b", F, _f(2, 3, 4))], ["y"], attrs)
    with pytest.raises(jitort.UnsupportedOp, match=op):
        jitort.compile(m, strict=True)


def _optimized(name: str, model_type: str, heads: int, hidden: int, tmp_path):
    path = shared_path(name)
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared model corpus)")
    from onnxruntime.transformers.optimizer import optimize_model
    # opt_level=0: the Python fusions only (the onnxruntime pre-pass of levels >= 1 needs torch)
    opt = optimize_model(str(path), model_type=model_type, num_heads=heads, hidden_size=hidden,
                         opt_level=0)
    out = tmp_path / f"{name}_opt.onnx"
    opt.save_model_to_file(str(out))
    return out


def test_bert_optimized_by_onnxruntime(tmp_path):
    out = _optimized("bert", "bert", 4, 256, tmp_path)
    ops = {n.op_type for n in onnx.load(str(out)).graph.node if n.domain == MS}
    assert {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "BiasGelu"} <= ops
    feeds = shared_feeds("bert", batch=2, seq=16)
    cm = jitort.compile(str(out), strict=True)
    assert_outputs_close(cm.run(None, feeds), _ort(onnx.load(str(out)), feeds), rtol=1e-3,
                         atol=1e-4)
