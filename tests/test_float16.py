"""float16 / bfloat16 graphs, compiled: the conversions (exhaustively), ops against onnxruntime
and onnx.reference in strict mode, and real models converted by onnxruntime's float16 tool."""
import ml_dtypes
import numpy as np
import onnx
import pytest
from numba import njit
from onnx import TensorProto

import jitort
from jitort.kernels.cpu import halfprec as hp
from tests.helpers import make_model, require_cases, run_onnxruntime, run_reference
from tests.models import shared_feeds, shared_path

F16, BF16, F32, I64 = TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.FLOAT, TensorProto.INT64
NP = {F16: np.float16, BF16: ml_dtypes.bfloat16, F32: np.float32, I64: np.int64,
      TensorProto.BOOL: np.bool_, TensorProto.INT32: np.int32}
ALL_WORDS = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


# --- the conversions, over every 16-bit pattern --------------------------------------------

def _mapped(fn):
    @njit
    def run(a, out):
        for i in range(a.size):
            out[i] = fn(a[i])
    return run


def _f32_probes() -> np.ndarray:
    """Every float16 value, each nudged towards both neighbours and to the halfway points
    (ties), plus random float32 bit patterns (huge, tiny, subnormal, NaN)."""
    v = ALL_WORDS.view(np.float16).astype(np.float32)
    v = v[np.isfinite(v)]
    with np.errstate(all="ignore"):
        ties = np.nextafter(v.astype(np.float16), np.float16(np.inf)).astype(np.float32)
        mids = (v + (ties - v) / 2).astype(np.float32)
    rnd = np.random.default_rng(0).integers(0, 1 << 32, 200_000, dtype=np.uint64)
    return np.concatenate([v, mids, np.nextafter(mids, np.float32(np.inf)),
                           np.nextafter(mids, np.float32(-np.inf)),
                           rnd.astype(np.uint32).view(np.float32),
                           np.float32([np.inf, -np.inf, np.nan, 65520, 65519.99, -0.0])])


def _same_float(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bit for bit, except that any NaN matches any NaN of the same sign."""
    gn, wn = np.isnan(got), np.isnan(want)
    np.testing.assert_array_equal(gn, wn)
    np.testing.assert_array_equal(np.signbit(got[gn]), np.signbit(want[wn]))
    ok = ~wn
    np.testing.assert_array_equal(got[ok].view(f"u{got.itemsize}"),
                                  want[ok].view(f"u{want.itemsize}"))


@pytest.mark.parametrize("impl", ["hw", "sw"])
def test_float16_widen_every_pattern(impl):
    if impl == "hw" and not hp.HW_HALF:
        pytest.skip("this CPU has no half conversions: the integer version is the one in use")
    fn = hp._hw_f16_to_f32 if impl == "hw" else hp._sw_f16_to_f32
    out = np.empty(ALL_WORDS.size, np.float32)
    _mapped(fn)(ALL_WORDS, out)
    _same_float(out, ALL_WORDS.view(np.float16).astype(np.float32))


@pytest.mark.parametrize("impl", ["hw", "sw"])
def test_float16_narrow_rounds_to_nearest_even(impl):
    if impl == "hw" and not hp.HW_HALF:
        pytest.skip("this CPU has no half conversions: the integer version is the one in use")
    fn = hp._hw_f32_to_f16 if impl == "hw" else hp._sw_f32_to_f16
    x = _f32_probes()
    out = np.empty(x.size, np.uint16)
    _mapped(fn)(x, out)
    with np.errstate(all="ignore"):
        want = x.astype(np.float16)
    _same_float(out.view(np.float16), want)
    # and every float16 survives the round trip exactly
    back = np.empty(ALL_WORDS.size, np.uint16)
    _mapped(fn)(ALL_WORDS.view(np.float16).astype(np.float32), back)
    _same_float(back.view(np.float16), ALL_WORDS.view(np.float16))


def test_bfloat16_every_pattern():
    out = np.empty(ALL_WORDS.size, np.float32)
    _mapped(hp.bf16_to_f32)(ALL_WORDS, out)
    _same_float(out, ALL_WORDS.view(ml_dtypes.bfloat16).astype(np.float32))
    x = _f32_probes()
    x = np.concatenate([x, ALL_WORDS.view(ml_dtypes.bfloat16).astype(np.float32) * np.float32(1 + 2 ** -8)])
    got = np.empty(x.size, np.uint16)
    _mapped(hp.f32_to_bf16)(x, got)
    with np.errstate(all="ignore"):
        want = x.astype(ml_dtypes.bfloat16)
    _same_float(got.view(ml_dtypes.bfloat16).astype(np.float32), want.astype(np.float32))
    assert np.isnan(got.view(ml_dtypes.bfloat16)[np.isnan(x)].astype(np.float32)).all()


# --- ops -------------------------------------------------------------------------------------

def _close(got, want, rel=1e-2, what=""):
    """Within ``rel`` of the reference, relative to the reference's largest magnitude."""
    g, w = np.asarray(got).astype(np.float32), np.asarray(want).astype(np.float32)
    assert g.shape == w.shape, f"{what}: shape {g.shape}, the reference's {w.shape}"
    scale = max(float(np.abs(w).max(initial=0.0)), 1e-3)
    err = float(np.abs(g - w).max(initial=0.0))
    assert err <= rel * scale, f"{what}: max error {err} against scale {scale}"


def _feeds(inputs, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for name, t, shape in inputs:
        if t == I64:
            out[name] = rng.integers(0, 3, shape).astype(np.int64)
        elif t == TensorProto.BOOL:
            out[name] = rng.random(shape) < 0.5
        else:
            out[name] = rng.standard_normal(shape).astype(np.float32).astype(NP[t])
    return out


def _node(op, ins, outs=("y",), **attrs):
    return onnx.helper.make_node(op, list(ins), list(outs), **attrs)


def _unary(op, t=F16, shape=(3, 40), **attrs):
    return [_node(op, ["x"], **attrs)], [("x", t, shape)], [("y", t, shape)], {}


def _w(shape, t, seed=1, scale=0.3):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32).astype(NP[t])


def _cases(t):
    """(id, nodes, inputs, outputs, initializers) of single-op models in element type ``t``."""
    c = {}
    for op in ("Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Erf", "Abs"):
        c[op] = _unary(op, t)
    c["Add_bcast"] = ([_node("Add", ["x", "b"])], [("x", t, (2, 3, 8)), ("b", t, (8,))],
                      [("y", t, (2, 3, 8))], {})
    c["Mul_Sub_Div"] = ([_node("Mul", ["x", "b"], ["m"]), _node("Sub", ["m", "x"], ["s"]),
                         _node("Div", ["s", "c"])],
                        [("x", t, (4, 16)), ("b", t, (4, 16))], [("y", t, (4, 16))],
                        {"c": np.full((16,), 1.5, NP[t])})
    c["Where"] = ([_node("Where", ["m", "x", "b"])],
                  [("m", TensorProto.BOOL, (4, 8)), ("x", t, (4, 8)), ("b", t, (4, 8))],
                  [("y", t, (4, 8))], {})
    c["MatMul"] = ([_node("MatMul", ["x", "w"])], [("x", t, (2, 5, 32))],
                   [("y", t, (2, 5, 16))], {"w": _w((32, 16), t)})
    c["MatMul_bias"] = ([_node("MatMul", ["x", "w"], ["m"]), _node("Add", ["m", "b"])],
                        [("x", t, (6, 32))], [("y", t, (6, 16))],
                        {"w": _w((32, 16), t), "b": _w((16,), t, 2)})
    c["Gemm"] = ([_node("Gemm", ["x", "w", "b"], transB=1, alpha=0.5)], [("x", t, (6, 32))],
                 [("y", t, (6, 16))], {"w": _w((16, 32), t), "b": _w((16,), t, 2)})
    c["Conv"] = ([_node("Conv", ["x", "w", "b"], pads=[1, 1, 1, 1], strides=[1, 1])],
                 [("x", t, (1, 3, 10, 10))], [("y", t, (1, 4, 10, 10))],
                 {"w": _w((4, 3, 3, 3), t), "b": _w((4,), t, 2)})
    c["Conv_relu"] = ([_node("Conv", ["x", "w"], ["c"], pads=[0, 0, 0, 0]), _node("Relu", ["c"])],
                      [("x", t, (1, 8, 6, 6))], [("y", t, (1, 8, 6, 6))],
                      {"w": _w((8, 8, 1, 1), t)})
    c["LayerNormalization"] = ([_node("LayerNormalization", ["x", "g", "b"], axis=-1)],
                               [("x", t, (2, 4, 32))], [("y", t, (2, 4, 32))],
                               {"g": _w((32,), t, 3, 1.0), "b": _w((32,), t, 4)})
    c["Softmax"] = _unary("Softmax", t, (3, 4, 33), axis=-1)
    c["MaxPool"] = _unary("MaxPool", t, (1, 2, 8, 8), kernel_shape=[2, 2], strides=[2, 2])
    c["MaxPool"] = (c["MaxPool"][0], c["MaxPool"][1], [("y", t, (1, 2, 4, 4))], {})
    c["AveragePool"] = ([_node("AveragePool", ["x"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
                        [("x", t, (1, 2, 6, 6))], [("y", t, (1, 2, 6, 6))], {})
    c["GlobalAveragePool"] = ([_node("GlobalAveragePool", ["x"])], [("x", t, (1, 4, 5, 5))],
                              [("y", t, (1, 4, 1, 1))], {})
    c["ReduceMean"] = ([_node("ReduceMean", ["x"], axes=[-1], keepdims=1)],
                       [("x", t, (3, 4, 50))], [("y", t, (3, 4, 1))], {})
    c["ReduceSum"] = ([_node("ReduceSum", ["x", "a"], keepdims=0)], [("x", t, (3, 4, 50))],
                      [("y", t, (3, 50))], {"a": np.array([1], np.int64)})
    c["ReduceMax"] = ([_node("ReduceMax", ["x"], axes=[0], keepdims=0)], [("x", t, (3, 20))],
                      [("y", t, (20,))], {})
    return c


def _movement(t):
    """Data movement: the 16-bit words move as they are (compared exactly)."""
    c = {}
    c["Transpose"] = ([_node("Transpose", ["x"], perm=[0, 2, 1, 3])], [("x", t, (2, 3, 4, 5))],
                      [("y", t, (2, 4, 3, 5))], {})
    c["Reshape_Transpose"] = ([_node("Reshape", ["x", "s"], ["r"]),
                               _node("Transpose", ["r"], perm=[1, 0])],
                              [("x", t, (2, 3, 4))], [("y", t, (4, 6))],
                              {"s": np.array([6, 4], np.int64)})
    c["Concat"] = ([_node("Concat", ["x", "b", "k"], axis=1)], [("x", t, (2, 3)), ("b", t, (2, 5))],
                   [("y", t, (2, 10))], {"k": _w((2, 2), t)})
    c["Slice"] = ([_node("Slice", ["x", "s", "e", "a", "st"])], [("x", t, (4, 10))],
                  [("y", t, (4, 4))], {"s": np.array([2], np.int64), "e": np.array([9], np.int64),
                                       "a": np.array([1], np.int64), "st": np.array([2], np.int64)})
    c["Gather"] = ([_node("Gather", ["x", "i"], axis=0)], [("x", t, (5, 6)), ("i", I64, (3, 2))],
                   [("y", t, (3, 2, 6))], {})
    c["Split"] = ([_node("Split", ["x", "p"], ["y", "z"], axis=1)], [("x", t, (3, 8))],
                  [("y", t, (3, 3)), ("z", t, (3, 5))], {"p": np.array([3, 5], np.int64)})
    c["Squeeze_Unsqueeze"] = ([_node("Squeeze", ["x", "a"], ["q"]), _node("Unsqueeze", ["q", "b"])],
                              [("x", t, (3, 1, 4))], [("y", t, (3, 4, 1))],
                              {"a": np.array([1], np.int64), "b": np.array([2], np.int64)})
    c["Expand"] = ([_node("Expand", ["x", "s"])], [("x", t, (3, 1))], [("y", t, (2, 3, 4))],
                   {"s": np.array([2, 3, 4], np.int64)})
    c["Tile"] = ([_node("Tile", ["x", "r"])], [("x", t, (2, 3))], [("y", t, (4, 3))],
                 {"r": np.array([2, 1], np.int64)})
    c["Flatten_Identity"] = ([_node("Flatten", ["x"], ["f"], axis=1), _node("Identity", ["f"])],
                             [("x", t, (2, 3, 4))], [("y", t, (2, 12))], {})
    c["Pad"] = ([_node("Pad", ["x", "p"])], [("x", t, (2, 3))], [("y", t, (4, 5))],
                {"p": np.array([1, 1, 1, 1], np.int64)})
    return c


def _merge(cases: dict):
    """One model running every case side by side (names prefixed by the case's): one compile
    instead of one per op. Returns (nodes, inputs, outputs, initializers, case of each output)."""
    nodes, ins, outs, inits, owner = [], [], [], {}, []
    for name, (cn, ci, co, cinit) in sorted(cases.items()):
        def ren(x, name=name):
            return f"{name}__{x}" if x else x
        for n in cn:
            m = onnx.helper.make_node(n.op_type, [ren(i) for i in n.input],
                                      [ren(o) for o in n.output])
            m.attribute.extend(n.attribute)
            nodes.append(m)
        ins += [(ren(a), t, sh) for a, t, sh in ci]
        outs += [(ren(a), t, sh) for a, t, sh in co]
        owner += [name] * len(co)
        inits.update({ren(k): v for k, v in cinit.items()})
    return nodes, ins, outs, inits, owner


def _run_merged(cases: dict, reference):
    """jitort (strict: every node compiled) and ``reference`` on the merged model of ``cases``;
    yields (case, jitort's output, the reference's)."""
    nodes, ins, outs, inits, owner = _merge(cases)
    model = make_model(nodes, ins, outs, inits)
    feeds = _feeds(ins)
    got = jitort.compile(model, strict=True, tiered=False).run(None, feeds)
    want = reference(model, feeds)
    assert len(got) == len(want) == len(owner)
    yield from zip(owner, got, want)


def _failures(checks) -> list[str]:
    bad = []
    for name, check in checks:
        try:
            check()
        except AssertionError as e:
            bad.append(f"{name}: {e}")
    return bad


F16_OPS = require_cases(_cases(F16).items(), 20, "tests/test_float16.py _cases")
F16_MOVES = require_cases(_movement(F16).items(), 10, "tests/test_float16.py _movement")


def test_float16_ops_match_onnxruntime():
    """Elementwise, MatMul / Gemm, Conv, LayerNorm, Softmax, pooling, reductions on float16
    (keeping float16 outputs), within 1e-2 of onnxruntime."""
    checks = []
    for name, g, w in _run_merged(dict(F16_OPS), run_onnxruntime):
        assert g.dtype == np.float16, name
        checks.append((name, lambda g=g, w=w, name=name: _close(g, w, 1e-2, name)))
    assert not _failures(checks), _failures(checks)


def test_float16_data_movement_is_exact():
    checks = []
    for name, g, w in _run_merged(dict(F16_MOVES), run_onnxruntime):
        assert g.dtype == np.float16 and g.shape == w.shape, name
        checks.append((name, lambda g=g, w=w: np.testing.assert_array_equal(
            g.view(np.uint16), w.view(np.uint16))))
    assert not _failures(checks), _failures(checks)


def test_float16_movement_moves_words_without_casts():
    """Transpose on float16 runs on the 2-byte words (no Cast added); MatMul computes in
    float32 between two Casts."""
    nodes, ins, outs, inits = dict(F16_MOVES)["Transpose"]
    cm = jitort.compile(make_model(nodes, ins, outs, inits), strict=True, tiered=False)
    assert [n.op_type for n in cm.graph.nodes] == ["Transpose"]
    nodes, ins, outs, inits = dict(F16_OPS)["MatMul"]
    cm = jitort.compile(make_model(nodes, ins, outs, inits), strict=True, tiered=False)
    assert [n.op_type for n in cm.graph.nodes] == ["Cast", "MatMul", "Cast"]


BF16_OPS = {k: v for k, v in _cases(BF16).items()
            if k in ("Relu", "Sigmoid", "Add_bcast", "Mul_Sub_Div", "Where", "MatMul", "Gemm",
                     "Conv", "LayerNormalization", "Softmax", "AveragePool", "ReduceMean")}
BF16_OPS.update({f"move_{k}": v for k, v in _movement(BF16).items()
                 if k in ("Transpose", "Gather", "Concat", "Split")})


def test_bfloat16_ops_match_reference():
    """bfloat16 against onnx.reference (which computes in bfloat16 through ml_dtypes; jitort
    computes in float32 and rounds once): 2e-2 relative, data movement exact."""
    require_cases(BF16_OPS, 16, "tests/test_float16.py BF16_OPS")
    checks = []
    for name, g, w in _run_merged(BF16_OPS, run_reference):
        assert g.dtype == ml_dtypes.bfloat16, name
        rel = 0.0 if name.startswith("move_") else 2e-2
        checks.append((name, lambda g=g, w=w, name=name, rel=rel: _close(g, w, rel, name)))
    assert not _failures(checks), _failures(checks)


CASTS = [(F32, F16), (F16, F32), (F16, TensorProto.INT32), (F32, BF16), (BF16, F32),
         (F16, BF16), (I64, F16)]


def test_cast_compiled_both_ways():
    """Cast to and from float16 / bfloat16 (round to nearest even, inf and overflow to inf),
    bit for bit against onnx.reference."""
    cases, feeds = {}, {}
    rng = np.random.default_rng(1)
    for src, dst in CASTS:
        name = f"{NP[src].__name__}_{NP[dst].__name__}"
        cases[name] = ([_node("Cast", ["x"], to=dst)], [("x", src, (5, 7))],
                       [("y", dst, (5, 7))], {})
        x = (rng.standard_normal((5, 7)) * 300).astype(np.float32)
        x.flat[:4] = [np.inf, -np.inf, 65519.9, 1e-6]
        if dst == TensorProto.INT32:
            x.flat[:4] = [3.5, -2.5, 1000.7, -0.4]  # (finite only: the spec leaves inf open)
        feeds[f"{name}__x"] = (rng.integers(-70000, 70000, (5, 7)) if src == I64
                               else x.astype(NP[src]))
    nodes, ins, outs, inits, owner = _merge(cases)
    model = make_model(nodes, ins, outs, inits)
    got = jitort.compile(model, strict=True, tiered=False).run(None, feeds)
    want = run_reference(model, feeds)
    dst_of = {f"{NP[a].__name__}_{NP[b].__name__}": b for a, b in CASTS}
    checks = []
    for name, g, w in zip(owner, got, want):
        assert g.dtype == np.dtype(NP[dst_of[name]]), name
        checks.append((name, lambda g=g, w=w: _same_float(g.astype(np.float64),
                                                           np.asarray(w).astype(np.float64))))
    assert len(checks) == len(CASTS) and not _failures(checks), _failures(checks)


# --- models ----------------------------------------------------------------------------------

MODELS = ["bert", "resnet18", "vit", "gpt2"]


def _float16_model(name):
    from onnxruntime.transformers.float16 import convert_float_to_float16
    path = shared_path(name)
    if not path.exists():
        pytest.skip(f"{path} is absent (set JITORT_MODEL_DIR)")
    return convert_float_to_float16(onnx.load(str(path)), keep_io_types=True)


@pytest.mark.parametrize("name", MODELS)
def test_float16_model_matches_onnxruntime(name):
    model = _float16_model(name)
    assert any(t.data_type == F16 for t in model.graph.initializer)
    feeds = shared_feeds(name, batch=1, seq=32)
    cm = jitort.compile(model, strict=True, tiered=False)  # raises jitort.UnsupportedOp on any interpreted node
    assert cm.placement_counts().get("interp", 0) == 0
    got = cm.run(None, feeds)
    want = run_onnxruntime(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        _close(g, w, 1e-2, name)
