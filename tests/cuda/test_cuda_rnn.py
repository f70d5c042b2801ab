"""LSTM on the CUDA backend (simulator in CI) against onnxruntime: forward, reverse and
bidirectional, with and without B / initial_h / initial_c, any subset of the outputs, float32
and float64, opsets 7 and 14; the node lands on "cuda" (a CRNN's LSTMs no longer cross to
the host and back), and what the kernel does not do (clip, other activations, peepholes,
input_forget, short sequence_lens) stays on the CPU backend and still matches.

Sizes stay tiny (seq 3, batch 2, input 3, hidden 4): the simulator runs one Python thread per
CUDA thread.
"""
import numpy as np
import pytest
from onnx import TensorProto, helper

import jitort
from tests.helpers import F32, assert_outputs_close, called_names, make_model, run_reference

F64 = TensorProto.DOUBLE
NP = {F32: np.float32, F64: np.float64}
SEQ, BATCH, NIN, HID = 3, 2, 3, 4


def _ort(model, feeds):
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _lstm_model(direction="forward", *, t=F32, b=True, h0=True, c0=True,
                outs=("y", "yh", "yc"), opset=17, seq_lens=None, peephole=False, hid=HID,
                **attrs):
    """An LSTM with constant W, R (and B, P, sequence_lens) and graph inputs x (and h0, c0);
    ``outs``: the output names, "" for an omitted one."""
    rng = np.random.default_rng(7)
    nd = 2 if direction == "bidirectional" else 1
    dt = NP[t]
    inits = {"w": (rng.standard_normal((nd, 4 * hid, NIN)) * 0.5).astype(dt),
             "r": (rng.standard_normal((nd, 4 * hid, hid)) * 0.5).astype(dt)}
    names = ["x", "w", "r", "", "", "", "", ""]
    inputs = [("x", t, [SEQ, BATCH, NIN])]
    if b:
        inits["b"] = (rng.standard_normal((nd, 8 * hid)) * 0.5).astype(dt)
        names[3] = "b"
    if seq_lens is not None:
        inits["sl"] = np.asarray(seq_lens, np.int32)
        names[4] = "sl"
    for k, (name, on) in enumerate((("h0", h0), ("c0", c0)), 5):
        if on:
            inputs.append((name, t, [nd, BATCH, hid]))
            names[k] = name
    if peephole:
        inits["p"] = (rng.standard_normal((nd, 3 * hid)) * 0.5).astype(dt)
        names[7] = "p"
    while names[-1] == "":
        names.pop()
    node = helper.make_node("LSTM", names, list(outs), hidden_size=hid, direction=direction,
                            **attrs)
    outputs = [(o, t, None) for o in outs if o]
    return make_model([node], inputs, outputs, inits, opset=opset)


def _feeds(m, t=F32):
    rng = np.random.default_rng(3)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(NP[t]) for i in m.graph.input}


def _check(m, placement="cuda"):
    cm = jitort.compile(m, device="cuda")
    feeds = _feeds(m)
    got = cm(*feeds.values())
    assert_outputs_close(got, _ort(m, feeds), rtol=1e-4, atol=1e-5)
    counts = cm.placement_counts()
    assert counts == {placement: 1}, cm.summary()
    return cm


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_all_inputs_and_outputs(cuda, direction):
    cm = _check(_lstm_model(direction))
    # the input projection first, one GEMM per direction into scratch, then the recurrence
    dirs = 2 if direction == "bidirectional" else 1
    assert called_names(cm) == ["cuda.gemm.gemm"] * dirs + ["cuda.rnn.lstm"]


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_lstm_without_optional_inputs_only_y(cuda, direction):
    _check(_lstm_model(direction, b=False, h0=False, c0=False, outs=("y",)))


def test_lstm_bidirectional_only_states_with_initial_h(cuda):
    _check(_lstm_model("bidirectional", c0=False, outs=("", "yh", "yc")))


def test_lstm_reverse_only_y_c_with_initial_c(cuda):
    _check(_lstm_model("reverse", h0=False, outs=("", "", "yc")))


def test_lstm_float64_bidirectional(cuda):
    """onnxruntime has no float64 LSTM: onnx's reference evaluator and the CPU backend judge."""
    m = _lstm_model("bidirectional", t=F64)
    cm = jitort.compile(m, device="cuda")
    feeds = _feeds(m, F64)
    got = cm(*feeds.values())
    assert cm.placement_counts() == {"cuda": 1}, cm.summary()
    assert_outputs_close(got, run_reference(m, feeds), rtol=1e-10, atol=1e-12)
    assert_outputs_close(got, jitort.compile(m)(*feeds.values()), rtol=1e-10, atol=1e-12)


def test_lstm_opset7_and_named_default_activations(cuda):
    _check(_lstm_model("bidirectional", opset=7,
                       activations=["Sigmoid", "Tanh", "Tanh"] * 2))


def test_lstm_full_sequence_lens_runs_on_cuda(cuda):
    _check(_lstm_model("bidirectional", seq_lens=[SEQ] * BATCH))


@pytest.mark.parametrize("attrs", [
    {"clip": 2.0}, {"input_forget": 1}, {"peephole": True},
    {"activations": ["Sigmoid", "Relu", "Tanh"]}], ids=["clip", "input_forget", "peephole",
                                                        "activations"])
def test_lstm_refusals_stay_on_cpu(cuda, attrs):
    _check(_lstm_model("forward", **attrs), placement="cpu")


def test_lstm_short_sequence_lens_falls_back_at_plan_time(cuda):
    m = _lstm_model("forward", seq_lens=[SEQ, SEQ - 1])
    cm = jitort.compile(m, device="cuda")
    assert cm.placement_counts() == {"cuda": 1}  # known only once the segment is planned
    feeds = _feeds(m)
    assert_outputs_close(cm(*feeds.values()), _ort(m, feeds), rtol=1e-4, atol=1e-5)
    assert cm.placement_counts() == {"cpu": 1}, cm.summary()


def test_lstm_hidden_size_bound_matches_the_kernel(cuda):
    from jitort.codegen.cuda_ops import rnn as lowering
    from jitort.kernels.cuda import rnn as kernels
    assert lowering.HMAX == kernels.HMAX
    assert kernels.block_for(1) == 32 and kernels.block_for(HID) == 32
    assert kernels.block_for(64) == 256 and kernels.block_for(kernels.HMAX) == kernels.MAX_BLOCK
    assert kernels.MAX_BLOCK >= kernels.HMAX  # one thread per hidden unit


def test_stacked_bidirectional_lstms_are_one_gpu_segment(cuda):
    """A CRNN's head: LSTM -> Transpose -> Reshape -> LSTM, all on the device: one segment,
    x in and y out the only copies."""
    rng = np.random.default_rng(5)

    def weights(k, nin):
        return {f"w{k}": (rng.standard_normal((2, 4 * HID, nin)) * 0.5).astype(np.float32),
                f"r{k}": (rng.standard_normal((2, 4 * HID, HID)) * 0.5).astype(np.float32),
                f"b{k}": (rng.standard_normal((2, 8 * HID)) * 0.5).astype(np.float32)}
    inits = {**weights(1, NIN), **weights(2, 2 * HID),
             "shape": np.array([0, 0, 2 * HID], np.int64)}
    nodes = [helper.make_node("LSTM", ["x", "w1", "r1", "b1"], ["y1"], hidden_size=HID,
                              direction="bidirectional"),
             helper.make_node("Transpose", ["y1"], ["t1"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["t1", "shape"], ["s1"]),
             helper.make_node("LSTM", ["s1", "w2", "r2", "b2"], ["y2"], hidden_size=HID,
                              direction="bidirectional")]
    m = make_model(nodes, [("x", F32, [SEQ, BATCH, NIN])], [("y2", F32, None)], inits)
    cm = jitort.compile(m, device="cuda")
    x = np.random.default_rng(9).standard_normal((SEQ, BATCH, NIN)).astype(np.float32)
    assert_outputs_close(cm(x), _ort(m, {"x": x}), rtol=1e-4, atol=1e-5)
    assert set(cm.placement_counts()) == {"cuda"}, cm.summary()
    assert [getattr(s, "backend", "interp") for s in cm.steps] == ["cuda"]
    assert cm.transfer_plan() == [("x", "h2d"), ("y2", "d2h")]


def test_lstm_threads_stride_over_gate_rows(cuda, monkeypatch):
    """More gate rows (4H = 80) than threads (a block of 32): each thread computes several."""
    from jitort.kernels.cuda import rnn as kernels
    monkeypatch.setattr(kernels, "MAX_BLOCK", 32)
    assert kernels.block_for(20) == 32
    _check(_lstm_model("bidirectional", hid=20))
