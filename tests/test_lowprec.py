"""Low-precision types (float8, float4 E2M1, int4 / uint4, int2 / uint2), compiled: the
conversions against ml_dtypes (every bit pattern) and onnx.reference's Cast (float32 values at
every rounding boundary, saturate 0 and 1), and Cast / QuantizeLinear / DequantizeLinear models
in strict mode (no interpreted node) against onnx.reference."""
import ml_dtypes
import numpy as np
import onnx
import pytest
from numba import njit
from onnx import TensorProto

import jitort
from jitort.kernels.cpu import lowprec as lp
from tests.helpers import called_names, make_model, run_reference

#: kernels/cpu/lowprec.py's type code -> (ml_dtypes type, TensorProto code, values per byte)
TYPES = {
    lp.E4M3FN: (ml_dtypes.float8_e4m3fn, TensorProto.FLOAT8E4M3FN, 256),
    lp.E4M3FNUZ: (ml_dtypes.float8_e4m3fnuz, TensorProto.FLOAT8E4M3FNUZ, 256),
    lp.E5M2: (ml_dtypes.float8_e5m2, TensorProto.FLOAT8E5M2, 256),
    lp.E5M2FNUZ: (ml_dtypes.float8_e5m2fnuz, TensorProto.FLOAT8E5M2FNUZ, 256),
    lp.E2M1: (ml_dtypes.float4_e2m1fn, TensorProto.FLOAT4E2M1, 16),
    lp.E8M0: (ml_dtypes.float8_e8m0fnu, TensorProto.FLOAT8E8M0, 256),
    lp.I4: (ml_dtypes.int4, TensorProto.INT4, 16),
    lp.U4: (ml_dtypes.uint4, TensorProto.UINT4, 16),
    lp.I2: (ml_dtypes.int2, TensorProto.INT2, 4),
    lp.U2: (ml_dtypes.uint2, TensorProto.UINT2, 4),
}
IDS = {k: lp.NAMES[k] for k in TYPES}
#: the types QuantizeLinear / DequantizeLinear take (E8M0 is a scale type)
QTYPES = [k for k in TYPES if k != lp.E8M0]


@njit
def _decode_all(kind, codes, out):
    for i in range(codes.size):
        out[i] = lp.decode(kind, codes[i])


@njit
def _encode_all(kind, x, sat, mode, out):
    for i in range(x.size):
        out[i] = lp.encode(kind, x[i], sat, mode)


@njit
def _store_rounded(kind, x, sat, mode, out):
    """What a fused loop does: round (``round_*``), then store the byte (``f32_to_*``)."""
    for i in range(x.size):
        out[i] = lp._store(kind, lp.decode(kind, lp.encode(kind, x[i], sat, mode)))


def _values(bytes_: np.ndarray, kind) -> np.ndarray:
    """Bytes of type ``kind`` as float32, through ml_dtypes."""
    return bytes_.view(TYPES[kind][0]).astype(np.float32)


def _same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal bit for bit, except that a NaN matches any NaN of the same sign."""
    gn, wn = np.isnan(got), np.isnan(want)
    bad = np.flatnonzero(gn != wn)
    assert bad.size == 0, f"{what}: NaN at {bad[:5]}: got {got[bad[:5]]}, want {want[bad[:5]]}"
    np.testing.assert_array_equal(np.signbit(got[gn]), np.signbit(want[wn]), err_msg=what)
    ok = ~wn
    bad = np.flatnonzero(got[ok].view(np.uint32) != want[ok].view(np.uint32))
    assert bad.size == 0, f"{what}: got {got[ok][bad[:5]]}, want {want[ok][bad[:5]]}"


def _probes(kind) -> np.ndarray:
    """float32 values at every rounding boundary of type ``kind``: each finite value, the
    midpoints between neighbours (ties) and the float32 values either side of them, past the
    largest value (overflow), tiny and float32-subnormal values, +-0, +-Inf, NaN, and random
    bit patterns."""
    v = _values(np.arange(256, dtype=np.uint8), kind)
    v = np.unique(v[np.isfinite(v)])
    mids = ((v[:-1].astype(np.float64) + v[1:]) / 2).astype(np.float32)
    top = np.float32(v[-1])
    step = top - v[-2]
    with np.errstate(over="ignore"):  # (E8M0's largest value doubled is Inf)
        over = np.float32([top + step / 2, top + step / 4, top + step, top * 2, 3e38])
    edges = np.concatenate([mids, over, -mids, -over])
    rng = np.random.default_rng(kind)
    rnd = rng.integers(0, 1 << 32, 20_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    scaled = (rng.standard_normal(20_000) * float(top) / 4).astype(np.float32)
    return np.concatenate([v, -v, edges, np.nextafter(edges, np.float32(np.inf)),
                           np.nextafter(edges, np.float32(-np.inf)), rnd, scaled,
                           np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45,
                                       -1e-45, 1e-38, 2.0 ** -127, 2.0 ** -126, 3.4e38])])


# --- the conversions ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", list(TYPES), ids=IDS.get)
def test_widen_every_pattern(kind):
    """Every code: the 256 bytes of the 8-bit types, the 16 / 4 codes of the 4- / 2-bit ones
    (stored in the low bits of a byte whose high bits are clear, as ml_dtypes does)."""
    codes = np.arange(TYPES[kind][2], dtype=np.uint8)
    out = np.empty(codes.size, np.float32)
    _decode_all(kind, codes, out)
    _same(out, _values(codes, kind), lp.NAMES[kind])


def _reference_cast(x: np.ndarray, to: int, **attrs) -> np.ndarray:
    node = onnx.helper.make_node("Cast", ["x"], ["y"], to=to, **attrs)
    model = make_model([node], [("x", TensorProto.FLOAT, list(x.shape))],
                       [("y", to, list(x.shape))], opset=24)
    with np.errstate(all="ignore"):
        return run_reference(model, {"x": x})[0]


_MODES = {"up": lp.ROUND_UP, "nearest": lp.ROUND_NEAREST, "down": lp.ROUND_DOWN}
_NARROW = [(k, s, m) for k in TYPES for s in (0, 1)
           for m in (_MODES if k == lp.E8M0 else ["up"])]


@pytest.mark.parametrize("kind,sat,mode", _NARROW,
                         ids=[f"{IDS[k]}-sat{s}-{m}" for k, s, m in _NARROW])
def test_narrow_equals_reference_cast(kind, sat, mode):
    x = _probes(kind)
    if kind == lp.E8M0:
        x = np.abs(x)  # (negative values are unspecified)
    got = np.empty(x.size, np.uint8)
    _encode_all(kind, x, bool(sat), _MODES[mode], got)
    attrs = {"saturate": sat} | ({"round_mode": mode} if kind == lp.E8M0 else {})
    want = _reference_cast(x, TYPES[kind][1], **attrs)
    _same(_values(got, kind), want.astype(np.float32), f"{lp.NAMES[kind]} sat={sat} {mode}")
    # high bits of 4- and 2-bit codes clear
    assert (got < TYPES[kind][2]).all()
    # rounding then storing (the fused loops' path) writes the same byte
    again = np.empty(x.size, np.uint8)
    _store_rounded(kind, x, bool(sat), _MODES[mode], again)
    nan = np.isnan(_values(got, kind))
    np.testing.assert_array_equal(again[~nan], got[~nan])
    assert np.isnan(_values(again[nan], kind)).all()


# --- compiled models, strict --------------------------------------------------------------------

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


def _run_strict(model, feeds):
    cm = jitort.compile(model, strict=True, tiered=False)  # UnsupportedOp on any interpreted node
    return cm, cm.run(None, feeds)


def test_cast_model_strict_small():
    """The quick check: float32 -> float8 E4M3FN (no saturation) -> float32, compiled."""
    x = _probes(lp.E4M3FN)[:3000]
    nodes = [onnx.helper.make_node("Cast", ["x"], ["q"], to=TensorProto.FLOAT8E4M3FN, saturate=0),
             onnx.helper.make_node("Cast", ["q"], ["y"], to=F32)]
    outs = [("q", TensorProto.FLOAT8E4M3FN, [x.size]), ("y", F32, [x.size])]
    model = make_model(nodes, [("x", F32, [x.size])], outs, opset=19)
    _, got = _run_strict(model, {"x": x})
    want = run_reference(model, {"x": x})
    for (name, _, _), g, w in zip(outs, got, want):
        assert g.dtype == w.dtype, name
        _same(g.astype(np.float32), w.astype(np.float32), name)


@pytest.mark.slow
def test_cast_models_strict():
    """float32 to each type and back (saturate 0 for the float8 types, 1 for the rest),
    float16 to two of them, int4 -> int8, a cast between two float8 types and a CastLike,
    fused into the compiled loops."""
    x = np.concatenate([_probes(lp.E4M3FN)[:2000], _probes(lp.E2M1)[:500],
                        np.float32([1e6, -1e6, np.inf, -np.inf, np.nan, 7.6, -8.4, 15.2])])
    n = x.size
    nodes, outs = [], []
    for kind, (_, code, _) in TYPES.items():
        sat = 0 if kind in (lp.E4M3FN, lp.E4M3FNUZ, lp.E5M2, lp.E5M2FNUZ) else 1
        y = lp.NAMES[kind]
        nodes += [onnx.helper.make_node("Cast", ["x"], [y], to=code, saturate=sat),
                  onnx.helper.make_node("Cast", [y], [y + "_f"], to=F32)]
        outs += [(y, code, [n]), (y + "_f", F32, [n])]
    nodes += [onnx.helper.make_node("Cast", ["h"], ["h_e4m3fn"], to=TensorProto.FLOAT8E4M3FN),
              onnx.helper.make_node("Cast", ["h"], ["h_i4"], to=TensorProto.INT4),
              onnx.helper.make_node("Cast", ["i4"], ["i8"], to=TensorProto.INT8),
              onnx.helper.make_node("Cast", ["e4m3fn"], ["e5"], to=TensorProto.FLOAT8E5M2,
                                    saturate=0),
              onnx.helper.make_node("CastLike", ["x", "u2"], ["cl"])]
    outs += [("h_e4m3fn", TensorProto.FLOAT8E4M3FN, [n]), ("h_i4", TensorProto.INT4, [n]),
             ("i8", TensorProto.INT8, [n]), ("e5", TensorProto.FLOAT8E5M2, [n]),
             ("cl", TensorProto.UINT2, [n])]
    model = make_model(nodes, [("x", F32, [n]), ("h", F16, [n])], outs, opset=24)
    with np.errstate(over="ignore"):
        feeds = {"x": x, "h": x.astype(np.float16)}
    _, got = _run_strict(model, feeds)
    with np.errstate(all="ignore"):
        want = run_reference(model, feeds)
    assert len(got) == len(want) == len(outs)
    for (name, _, _), g, w in zip(outs, got, want):
        assert g.dtype == w.dtype, name
        _same(g.astype(np.float32), w.astype(np.float32), name)


def _qdq_model(kind, layout):
    """x (float32, 4 x 6) -> QuantizeLinear -> q (type ``kind``) -> DequantizeLinear -> y."""
    np_t, code, _ = TYPES[kind]
    xs = (4, 6)
    rng = np.random.default_rng(kind)
    if layout == "tensor":
        s, attrs = np.float32(rng.uniform(0.05, 0.5)), {}
    elif layout == "axis":
        s, attrs = rng.uniform(0.05, 0.5, 6).astype(np.float32), {"axis": 1}
    else:
        s, attrs = rng.uniform(0.05, 0.5, (4, 3)).astype(np.float32), {"axis": 1, "block_size": 2}
    s = np.asarray(s)
    if kind in (lp.I4, lp.I2, lp.U4, lp.U2):
        z = rng.integers(0, 2, s.shape).astype(np_t)  # a nonzero zero point
    else:
        z = np.zeros(s.shape, np_t)  # (float8's must be 0; float4's is added by Q only)
    nodes = [onnx.helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **attrs),
             onnx.helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], **attrs)]
    model = make_model(nodes, [("x", F32, list(xs))], [("q", code, list(xs)), ("y", F32, list(xs))],
                       {"s": s, "z": z}, opset=21)
    x = (rng.standard_normal(xs) * 3).astype(np.float32)
    x[0, :3] = [1e6, -1e6, 0.0]  # saturated (onnx.reference's int path turns +Inf into the low end)
    return model, {"x": x}


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["tensor", "axis", "block"])
def test_quantize_dequantize_strict(layout):
    for kind in QTYPES:
        model, feeds = _qdq_model(kind, layout)
        cm, got = _run_strict(model, feeds)
        want = run_reference(model, feeds)
        for name, g, w in zip(("q", "y"), got, want):
            assert g.dtype == w.dtype, name
            _same(g.astype(np.float32), w.astype(np.float32), f"{lp.NAMES[kind]} {layout} {name}")
        names = called_names(cm)
        assert "lowprec.quantize_lowp" in names and "lowprec.dequantize_lowp" in names, names


def test_cuda_backend_leaves_low_precision_casts_to_the_cpu():
    """The conversions have no device version: the CUDA backend must not claim such a Cast."""
    from jitort.codegen.cuda import supports_device_elementwise
    from jitort.codegen.elementwise import supports_elementwise
    from jitort.ir import Node, Value

    def cast(src, dst):
        return Node("Cast", [Value("x", np.dtype(src), (4,))], [Value("y", np.dtype(dst), (4,))],
                    {"to": 0}, name="c", since_version=19)

    low = cast(np.float32, ml_dtypes.float8_e4m3fn)
    assert supports_elementwise(low) and not supports_device_elementwise(low)
    assert not supports_device_elementwise(cast(ml_dtypes.int4, np.float32))
    assert supports_device_elementwise(cast(np.float32, np.float64))


@pytest.mark.slow  # (~30 s cold: the uint8 copies of seven data-movement kernels)
@pytest.mark.parametrize("code", [TensorProto.FLOAT8E4M3FN, TensorProto.INT4],
                         ids=["e4m3fn", "int4"])
def test_data_movement_moves_the_bytes_strict(code):
    """Reshape, Transpose, Slice, Concat, Gather, Split and Tile of a low-precision tensor
    compile (they move its bytes) and equal onnx.reference."""
    mk = onnx.helper.make_node
    nodes = [mk("Cast", ["x"], ["q"], to=code),
             mk("Reshape", ["q", "shape"], ["r"]),
             mk("Transpose", ["r"], ["t"], perm=[1, 0]),
             mk("Slice", ["t", "starts", "ends"], ["s"]),
             mk("Concat", ["s", "t"], ["c"], axis=0),
             mk("Gather", ["c", "idx"], ["g"], axis=1),
             mk("Split", ["g"], ["p0", "p1"], axis=0, num_outputs=2),
             mk("Tile", ["p1", "reps"], ["y"])]
    inits = {"shape": np.int64([6, 4]), "starts": np.int64([1]), "ends": np.int64([3]),
             "idx": np.int64([5, 0, 2, 2]), "reps": np.int64([2, 1])}
    model = make_model(nodes, [("x", F32, [24])], [("y", code, [6, 4]), ("p0", code, [3, 4])],
                       inits, opset=18)
    x = (np.random.default_rng(3).standard_normal(24) * 4).astype(np.float32)
    _, got = _run_strict(model, {"x": x})
    want = run_reference(model, {"x": x})
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        _same(g.astype(np.float32), w.astype(np.float32), "moved")
