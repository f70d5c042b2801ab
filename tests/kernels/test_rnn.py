"""LSTM, GRU and RNN compiled by jitort against onnxruntime: directions, layouts, sequence
lengths, initial states, peepholes, clip, input_forget, linear_before_reset, activations with
their alpha / beta, output subsets, float64, empty tensors. Nothing may run interpreted."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import jitort

_TT = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
       np.dtype(np.int32): TensorProto.INT32}
_G = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _model(op, feeds, outs, opset, consts=(), **attrs):
    """One node; ``feeds``/``consts`` (name, array or None) in input order; ``outs`` output
    names ('' = omitted)."""
    names = [n if a is not None else "" for n, a in feeds]
    while names and names[-1] == "":
        names.pop()
    ins = [helper.make_tensor_value_info(n, _TT[a.dtype], a.shape)
           for n, a in feeds if a is not None and n not in dict(consts)]
    inits = [onnx.numpy_helper.from_array(a, n) for n, a in consts]
    dt = _TT[feeds[0][1].dtype]
    node = helper.make_node(op, names, outs, **attrs)
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info(o, dt, None)
                                             for o in outs if o], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _rn(*shape, seed=0, scale=1.0, dtype=np.float32):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def _inputs(op, seq, batch, inp, hidden, nd, layout=0, bias=True, h0=False, c0=False,
            peep=False, lens=None, dtype=np.float32):
    g = _G[op]
    x = _rn(*((batch, seq, inp) if layout else (seq, batch, inp)), dtype=dtype)
    feeds = [("x", x), ("w", _rn(nd, g * hidden, inp, seed=1, scale=0.4, dtype=dtype)),
             ("r", _rn(nd, g * hidden, hidden, seed=2, scale=0.4, dtype=dtype)),
             ("b", _rn(nd, 2 * g * hidden, seed=3, scale=0.3, dtype=dtype) if bias else None),
             ("s", None if lens is None else np.array(lens, np.int32))]
    hs = (batch, nd, hidden) if layout else (nd, batch, hidden)
    feeds.append(("h0", _rn(*hs, seed=4, dtype=dtype) if h0 else None))
    if op == "LSTM":
        feeds.append(("c0", _rn(*hs, seed=5, dtype=dtype) if c0 else None))
        feeds.append(("p", _rn(nd, 3 * hidden, seed=6, scale=0.5, dtype=dtype) if peep else None))
    return feeds


def _check(op, feeds, outs=None, opset=14, const_w=True, rtol=1e-4, atol=1e-5, **attrs):
    outs = outs or (["y", "yh", "yc"] if op == "LSTM" else ["y", "yh"])
    consts = [(n, a) for n, a in feeds if n in ("w", "r", "b", "p") and a is not None] \
        if const_w else []
    m = _model(op, feeds, outs, opset, consts, **attrs)
    fd = {n: a for n, a in feeds if a is not None and n not in dict(consts)}
    cm = jitort.compile(m, strict=True)
    got = cm.run(None, fd)
    assert cm.fallback_nodes() == []
    want = _ort(op, feeds, outs, opset, consts, fd, attrs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == fd["x"].dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


def _ort(op, feeds, outs, opset, consts, fd, attrs):
    """onnxruntime's outputs. It runs layout 0 only: a layout-1 node is checked against the
    layout-0 node on transposed inputs, its outputs transposed back."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    if fd["x"].dtype == np.float64:  # onnxruntime's recurrent kernels are float32 only
        def f32(a):
            return a.astype(np.float32) if a is not None and a.dtype == np.float64 else a
        feeds = [(n, f32(a)) for n, a in feeds]
        consts = [(n, f32(a)) for n, a in consts]
        fd = {n: f32(a) for n, a in fd.items()}
    layout = attrs.get("layout", 0)
    if layout:
        attrs = {k: v for k, v in attrs.items() if k != "layout"}
        fd = {n: (a.transpose(1, 0, 2) if n in ("x", "h0", "c0") else a) for n, a in fd.items()}
        feeds = [(n, fd.get(n, a) if a is not None else None) for n, a in feeds]
    m = _model(op, feeds, outs, opset, consts, **attrs)
    want = ort.InferenceSession(m.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, fd)
    if layout:
        present = [o for o in outs if o]
        want = [w.transpose(2, 0, 1, 3) if o == "y" else w.transpose(1, 0, 2)
                for o, w in zip(present, want)]
    return want


# --- LSTM ----------------------------------------------------------------------------------
def test_lstm_forward_states(nthreads):
    feeds = _inputs("LSTM", 6, 2, 5, 8, 1, h0=True, c0=True)
    _check("LSTM", feeds, hidden_size=8)


def test_lstm_bidirectional_lens_peepholes_clip(nthreads):
    # lengths 0 (Y_h/Y_c 0), short and full; peepholes; clip bounds every pre-activation
    feeds = _inputs("LSTM", 7, 4, 3, 8, 2, h0=True, c0=True, peep=True, lens=[7, 3, 0, 5])
    _check("LSTM", feeds, hidden_size=8, direction="bidirectional", clip=1.5)


def test_lstm_bidirectional_blas_steps(nthreads):
    # enough batch rows for BLAS step products, long enough for the two-thread path
    feeds = _inputs("LSTM", 12, 6, 16, 32, 2, h0=True, c0=True)
    _check("LSTM", feeds, hidden_size=32, direction="bidirectional")


def test_lstm_packed_products_by_row_blocks(nthreads):
    """The packed projection and step products by blocks of rnn._MR rows, then 4, then single
    rows (rnn._panel_rows): batch _MR + 5 (every block size in each step), 3 steps (projection
    rows 3 * (_MR + 5): every block size again), reverse."""
    from jitort.kernels.cpu import rnn as R
    b = R._MR + 5
    feeds = _inputs("LSTM", 3, b, 9, 24, 1, h0=True, c0=True)
    _check("LSTM", feeds, hidden_size=24, direction="reverse")


def test_lstm_step_product_split_over_threads(nthreads):
    """One direction with steps big enough (batch x H x 4H >= rnn._STEP_PAR_MACS) for each
    step's gate product to split over the threads in whole panels: the per-row path (batch 3,
    H 120), the packed-panel path (batch 5, H 100: 400 gate columns, the last panel partial)
    and sequence lengths that drop rows from the packed path mid-sequence."""
    from jitort.kernels.cpu import rnn as R
    assert 3 * 120 * 480 >= R._STEP_PAR_MACS and 5 * 100 * 400 >= R._STEP_PAR_MACS
    feeds = _inputs("LSTM", 5, 3, 7, 120, 1, h0=True, c0=True)
    _check("LSTM", feeds, hidden_size=120)
    feeds = _inputs("LSTM", 6, 5, 7, 100, 1, h0=True, c0=True, lens=[6, 2, 6, 4, 6])
    _check("LSTM", feeds, hidden_size=100)


def test_lstm_small_batch_panels_in_one_parallel_region(nthreads):
    """Steps that split, H a multiple of rnn.PANEL, default activations:
    chunks of one panel of hidden units per task (rnn._dir_panels, the _mk1x4
    micro-kernel); at 2 threads the workers stay in one parallel region and claim chunks step
    by step. Batch 1 H 224 (7 panels of 32 or 14 of 16: an odd count); batch 3 reverse, layout 1,
    peepholes, clip, coupled input and forget gates, rows of length 0 and shorter than the
    sequence; the same case with other activations (the per-step path) as a check of the
    routing. (At 1 thread both run the per-step path.)"""
    from jitort.kernels.cpu import rnn as R
    for b, h in ((1, 224), (3, 128), (5, 96)):
        assert h % R.PANEL == 0 and b <= R._PANEL_MAX_ROWS and b * h * 4 * h >= R._STEP_PAR_MACS
    _check("LSTM", _inputs("LSTM", 9, 1, 12, 224, 1, h0=True, c0=True), hidden_size=224)
    feeds = _inputs("LSTM", 7, 3, 5, 128, 1, layout=1, h0=True, c0=True, peep=True,
                    lens=[4, 0, 7])
    _check("LSTM", feeds, hidden_size=128, direction="reverse", layout=1, clip=2.0,
           input_forget=1)
    _check("LSTM", feeds, hidden_size=128, direction="reverse", layout=1, clip=2.0,
           activations=["HardSigmoid", "Tanh", "Tanh"])
    # batch 5: four rows by _mk4x2 and one by _mk1x4 while all run, rows one by one after
    # a length cuts one short
    feeds = _inputs("LSTM", 5, 5, 6, 96, 1, h0=True, c0=True, lens=[5, 5, 3, 5, 5])
    _check("LSTM", feeds, hidden_size=96)


def test_lstm_reverse_layout1_input_forget():
    feeds = _inputs("LSTM", 5, 3, 4, 8, 1, layout=1, h0=True, c0=True, peep=True,
                    lens=[2, 5, 4])
    _check("LSTM", feeds, hidden_size=8, direction="reverse", layout=1, input_forget=1)


def test_lstm_activations_bidirectional_layout1():
    # alpha/beta are consumed in order by the activations that take them
    feeds = _inputs("LSTM", 5, 2, 3, 4, 2, layout=1, lens=[5, 2])
    _check("LSTM", feeds, hidden_size=4, direction="bidirectional", layout=1,
           activations=["HardSigmoid", "Elu", "Softsign", "Sigmoid", "ScaledTanh", "LeakyRelu"],
           activation_alpha=[0.3, 0.8, 1.2, 0.05], activation_beta=[0.4, 0.7])


def test_lstm_output_subsets_no_bias():
    feeds = _inputs("LSTM", 4, 2, 3, 4, 1, bias=False)
    _check("LSTM", feeds, outs=["", "yh"], hidden_size=4)
    _check("LSTM", feeds, outs=["", "", "yc"], hidden_size=4)


@pytest.mark.slow  # its own float64 specialization of every kernel (~20 s of compile)
def test_lstm_float64_runtime_weights():
    # W, R, B as graph inputs: R is transposed in the driver, not at compile time; float64
    # against onnxruntime's float32 (it has no float64 LSTM)
    feeds = _inputs("LSTM", 4, 3, 5, 6, 2, dtype=np.float64, h0=True, lens=[4, 1, 3])
    _check("LSTM", feeds, const_w=False, hidden_size=6,
           direction="bidirectional")


def test_lstm_opset7():
    feeds = _inputs("LSTM", 4, 2, 3, 4, 1, h0=True)
    _check("LSTM", feeds, opset=7, hidden_size=4)


@pytest.mark.parametrize("seq,batch", [(3, 0), (0, 2)])
def test_lstm_empty(seq, batch):
    # onnxruntime aborts the process on these: checked against the shapes, and for zero steps
    # Y_h / Y_c are 0 (no step ran, as for a row of sequence length 0)
    feeds = _inputs("LSTM", seq, batch, 4, 5, 2, h0=True)
    m = _model("LSTM", feeds, ["y", "yh", "yc"], 14, feeds[1:4], hidden_size=5,
               direction="bidirectional")
    cm = jitort.compile(m, strict=True)
    y, yh, yc = cm.run(None, {"x": feeds[0][1], "h0": feeds[5][1]})
    assert cm.fallback_nodes() == []
    assert y.shape == (seq, 2, batch, 5) and yh.shape == yc.shape == (2, batch, 5)
    assert not yh.any() and not yc.any()


# --- GRU -----------------------------------------------------------------------------------
@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_bidirectional_lens(lbr, nthreads):
    feeds = _inputs("GRU", 6, 3, 4, 8, 2, h0=True, lens=[6, 0, 4])
    _check("GRU", feeds, hidden_size=8, direction="bidirectional", linear_before_reset=lbr)


def test_gru_panels_in_one_parallel_region(nthreads):
    """GRU with steps that split (batch x H x 3H >= rnn._STEP_PAR_MACS, H a multiple of
    rnn.PANEL): chunks of hidden units in one parallel region at 2 threads (rnn._dir_panels:
    _gru_chunk with linear_before_reset, else two phases a step, _gru_phase_chunk 0 then
    1). Batch 1 H 224; batch 5 reverse, layout 1, clip, a row cut short (four
    rows by _mk4x2 + _mk4x1 while all run, then one by one by _mk1x3, or _mk1x2 + _mk1x1)."""
    from jitort.kernels.cpu import rnn as R
    for b, h in ((1, 224), (5, 96)):
        assert h % R.PANEL == 0 and b <= R._PANEL_MAX_ROWS and b * h * 3 * h >= R._STEP_PAR_MACS
    # (sums of 224 products of scale-0.4 weights: float32 rounding differs from onnxruntime's
    # by up to 3e-5 after 9 steps, on either path)
    for lbr in (1, 0):
        _check("GRU", _inputs("GRU", 9, 1, 12, 224, 1, h0=True), hidden_size=224,
               linear_before_reset=lbr, atol=1e-4)
    feeds = _inputs("GRU", 6, 5, 7, 96, 1, layout=1, h0=True, lens=[6, 6, 2, 6, 6])
    for lbr in (1, 0):
        _check("GRU", feeds, hidden_size=96, direction="reverse", layout=1, clip=1.5,
               linear_before_reset=lbr)


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_blas_steps_clip(lbr):
    feeds = _inputs("GRU", 5, 6, 8, 16, 1, h0=True)
    _check("GRU", feeds, hidden_size=16, linear_before_reset=lbr, clip=0.8)


def test_gru_reverse_layout1_activations():
    feeds = _inputs("GRU", 5, 2, 3, 4, 1, layout=1, h0=True, lens=[3, 5])
    _check("GRU", feeds, hidden_size=4, direction="reverse", layout=1,
           activations=["HardSigmoid", "Softplus"], activation_alpha=[0.25],
           activation_beta=[0.45])


def test_gru_opset7_no_bias_yh_only():
    feeds = _inputs("GRU", 4, 2, 3, 4, 1, bias=False)
    _check("GRU", feeds, outs=["", "yh"], opset=7, hidden_size=4)


# --- RNN -----------------------------------------------------------------------------------
def test_rnn_forward_default(nthreads):
    feeds = _inputs("RNN", 6, 2, 5, 8, 1, h0=True)
    _check("RNN", feeds, hidden_size=8)


def test_rnn_bidirectional_lens_layout1_clip(nthreads):
    feeds = _inputs("RNN", 6, 5, 4, 8, 2, layout=1, h0=True, lens=[6, 2, 0, 6, 3])
    _check("RNN", feeds, hidden_size=8, direction="bidirectional", layout=1, clip=0.7)


@pytest.mark.parametrize("acts,alpha,beta", [
    (["Relu", "LeakyRelu"], [0.2], []),
    (["ThresholdedRelu", "Affine"], [0.1, 0.5], [0.3]),
    (["Sigmoid", "ScaledTanh"], [1.5], [0.6]),
])
def test_rnn_activations(acts, alpha, beta):
    feeds = _inputs("RNN", 5, 2, 3, 4, 2)
    ab = {k: v for k, v in (("activation_alpha", alpha), ("activation_beta", beta)) if v}
    _check("RNN", feeds, hidden_size=4, direction="bidirectional", activations=acts, **ab)


def test_rnn_reverse_blas_steps():
    feeds = _inputs("RNN", 4, 8, 6, 12, 1, bias=False)
    _check("RNN", feeds, hidden_size=12, direction="reverse")


def test_rnn_bad_sequence_lens():
    feeds = _inputs("RNN", 4, 2, 3, 4, 1, lens=[5, 1])
    m = _model("RNN", feeds, ["y"], 14, hidden_size=4)
    cm = jitort.compile(m, strict=True)
    with pytest.raises(Exception, match="sequence_lens"):
        cm.run(None, {n: a for n, a in feeds if a is not None})
