"""InstanceNormalization, LRN and 2-D ConvTranspose on the CUDA backend (simulator in CI)
against onnxruntime (float32) or jitort's CPU backend (float64): each case checks that the node
was placed on CUDA, so the kernel under test ran, not the CPU fallback; and the cases the CUDA
lowering refuses (1-D ConvTranspose, auto_pad SAME_*) still run, on the CPU.

Tensors are tiny: the simulator runs one Python thread per CUDA thread.
"""
import numpy as np
import pytest
from onnx import TensorProto, helper

import jitort
from tests.helpers import F32, assert_outputs_close, make_model

RNG = np.random.default_rng(11)
F64 = TensorProto.DOUBLE


def _rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _ort(model, feeds):
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _one(op, x, inits, **attrs):
    """A one-node model of ``op`` over input ``x`` and the initializers ``inits``."""
    et = F64 if x.dtype == np.float64 else F32
    node = helper.make_node(op, ["x", *inits], ["y"], **attrs)
    return make_model([node], [("x", et, list(x.shape))], [("y", et, None)], inits)


def check(model, x, *, on="cuda", reference="ort", rtol=1e-4, atol=1e-5):
    """Compile ``model`` for CUDA, compare with onnxruntime or (``reference="cpu"``) jitort's
    CPU backend, and check that every node is placed on ``on`` after the call (a lowering
    refuses at the first call, when the shapes are known); returns the compiled model."""
    cm = jitort.compile(model, device="cuda")
    got = cm(x)
    assert cm.placement_counts() == {on: len(cm.graph.nodes)}, (cm.summary(),
                                                                cm.fallback_reasons)
    want = _ort(model, {"x": x}) if reference == "ort" else jitort.compile(model)(x)
    assert_outputs_close(got, want, rtol=rtol, atol=atol)
    return cm


# --- InstanceNormalization ---------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3, 7), (1, 2, 70)],
                         ids=["4d", "3d", "row-longer-than-block"])
def test_instance_norm(cuda, shape):
    c = shape[1]
    x = _rand(*shape) * 3 + 1
    m = _one("InstanceNormalization", x, {"s": _rand(c), "b": _rand(c)}, epsilon=1e-3)
    check(m, x)


def test_instance_norm_float64(cuda):
    x = _rand(2, 3, 2, 3, dtype=np.float64)
    m = _one("InstanceNormalization", x, {"s": _rand(3, dtype=np.float64),
                                          "b": _rand(3, dtype=np.float64)})
    check(m, x, reference="cpu", rtol=1e-10, atol=1e-12)


# --- LRN ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [3, 5])
def test_lrn(cuda, size):
    x = _rand(2, 4, 3, 3)
    m = _one("LRN", x, {}, size=size, alpha=0.3, beta=0.6, bias=1.5)
    check(m, x)


def test_lrn_even_size_3d_float64(cuda):
    """An even window (one more channel after than before) over an (N, C, L) input."""
    x = _rand(2, 4, 5, dtype=np.float64)
    m = _one("LRN", x, {}, size=2, alpha=0.5, beta=0.75, bias=2.0)
    check(m, x, reference="cpu", rtol=1e-10, atol=1e-12)


# --- ConvTranspose -----------------------------------------------------------------------------

CONVT = {  # name: (x shape, W shape, with a bias, attributes); outputs of at most 150 elements
    "stride2-pads-outpad": ((1, 2, 3, 3), (2, 3, 3, 3), True,
                            dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),
    "dilation2": ((1, 2, 3, 3), (2, 2, 2, 2), False, dict(dilations=[2, 2])),
    "group2-asym": ((1, 4, 3, 3), (4, 2, 2, 3), True,
                    dict(group=2, strides=[2, 1], pads=[0, 1, 1, 0])),
    "group2-nobias": ((2, 4, 2, 2), (4, 1, 3, 3), False, dict(group=2, strides=[1, 2])),
    "1x1-stride2": ((2, 3, 2, 2), (3, 4, 1, 1), True, dict(strides=[2, 2])),
    "1x1-valid": ((1, 3, 2, 3), (3, 2, 1, 1), False, dict(auto_pad="VALID")),
    "output_shape": ((1, 2, 3, 3), (2, 2, 3, 3), True, dict(strides=[2, 2], output_shape=[6, 6])),
}


def _convt(xs, ws, bias, attrs, dtype=np.float32):
    inits = {"w": _rand(*ws, dtype=dtype)}
    if bias:
        inits["b"] = _rand(ws[1] * attrs.get("group", 1), dtype=dtype)
    x = _rand(*xs, dtype=dtype)
    return _one("ConvTranspose", x, inits, **attrs), x


@pytest.mark.parametrize("name", list(CONVT))
def test_conv_transpose(cuda, name):
    m, x = _convt(*CONVT[name])
    check(m, x)


def test_conv_transpose_float64(cuda):
    m, x = _convt(*CONVT["group2-asym"], dtype=np.float64)
    check(m, x, reference="cpu", rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", ["1d", "same_upper"])
def test_conv_transpose_refused_runs_on_cpu(cuda, case):
    if case == "1d":
        m, x = _convt((1, 2, 4), (2, 3, 3), True, dict(strides=[2]))
    else:
        m, x = _convt((1, 2, 3, 3), (2, 2, 3, 3), False, dict(strides=[2, 2],
                                                              auto_pad="SAME_UPPER"))
    cm = check(m, x, on="cpu")
    (why,) = cm.fallback_reasons.values()
    assert why.startswith("cuda -> cpu: ") and ("1-D" in why or "SAME_UPPER" in why), why


# --- a decoder block: one CUDA segment ----------------------------------------------------------

def test_decoder_block_stays_on_the_device(cuda):
    """ConvTranspose -> InstanceNormalization -> Relu -> LRN: one CUDA segment, so one copy in
    and one out per call."""
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "cb"], ["u"], strides=[2, 2],
                              pads=[1, 1, 1, 1], output_padding=[1, 1]),
             helper.make_node("InstanceNormalization", ["u", "s", "b"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("LRN", ["r"], ["y"], size=3, alpha=0.2, beta=0.5)]
    inits = {"w": _rand(3, 2, 3, 3), "cb": _rand(2), "s": _rand(2), "b": _rand(2)}
    m = make_model(nodes, [("x", F32, [1, 3, 3, 3])], [("y", F32, None)], inits)
    x = _rand(1, 3, 3, 3)
    cm = check(m, x)
    assert cm.transfer_plan() == [("x", "h2d"), ("y", "d2h")]
