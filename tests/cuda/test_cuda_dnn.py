"""The cuDNN path of the CUDA convolution (kernels/cuda/dnn.py, conv2d_bias_add_act's ``cudnn``).

cuDNN cannot run on the simulator, so a stand-in binding (standin_cudnn.py) keeps the
descriptors and computes what ``cudnnConvolutionForward`` is documented to compute over the
memory the addresses name. What is checked is jitort's side -- the descriptors a convolution
becomes (dims, pads, strides, dilations, groups), the algorithm taken from the heuristics'
answer (exact float32: no tensor-core math; within the workspace limit; a workspace passed),
the work recorded (cuDNN, then the epilogue kernel), when cuDNN is not asked (asymmetric pads,
depthwise under the default rule) and what happens when it has no algorithm -- and the
results against onnxruntime. On a GPU (JITORT_TEST_CUDA=gpu) the same tests run the library.
"""
import ctypes

import numpy as np
import pytest
from onnx import helper

import jitort
from jitort.kernels.cuda import conv, dnn, gemm
from tests.cuda.conftest import SIMULATOR
from tests.cuda.test_cuda_blas import _conv_model, _kinds
from tests.cuda.test_cuda_models import _ort, _w
from tests.helpers import F32, make_model

EPI = gemm.epilogue_kernel(np.float32)


def _check(m, feeds, rtol=1e-5, atol=1e-5):
    cm = jitort.compile(m, device="cuda")
    np.testing.assert_allclose(cm(*feeds.values())[0], _ort(m, feeds)[0], rtol=rtol, atol=atol)
    return cm


@pytest.mark.parametrize("n,c,kh,attrs,residual", [
    (2, 4, 3, {"pads": [1, 1, 1, 1]}, True),         # 'same' padding, residual and bias
    (3, 4, 3, {"strides": [2, 2]}, False),           # strided, no padding
    (2, 8, 3, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, False),
    (2, 16, 1, {}, True),                            # pointwise
    (2, 8, 3, {"pads": [1, 1, 1, 1], "group": 2}, False),
])
def test_convolution_is_one_cudnn_call_then_the_epilogue(cudnn, n, c, kh, attrs, residual):
    m = _conv_model(n, 16, c, kh, residual, **attrs)
    feeds = {"x": _w(n, c, 5, 5), **({"z": _w(n, 16, 5, 5)} if residual else {})}
    cm = _check(m, feeds)
    assert _kinds(cm) == [dnn.forward, EPI]
    p = attrs.get("pads", [0] * 4)[0]
    s = attrs.get("strides", [1, 1])[0]
    d = attrs.get("dilations", [1, 1])[0]
    g = attrs.get("group", 1)
    ((dtype, xdims, wdims, geometry, algo, ws),) = cudnn.calls
    assert (dtype, xdims, wdims, geometry) == (
        "float32", (n, c, 5, 5), (16, c // g, kh, kh), (p, p, s, s, d, d, g))
    if SIMULATOR:
        assert (algo, ws) == (1, 4096)


@pytest.mark.skipif(not SIMULATOR, reason="the heuristics' answer is the stand-in's")
def test_float32_takes_the_first_exact_algorithm_within_the_workspace_limit(cudnn, monkeypatch):
    """Ranked: one asking too much scratch, one on tensor cores (TF32), one that failed, then
    the FMA one: float32 takes the last; with TF32 allowed, the tensor-core one."""
    cudnn.lib.ranked = [(7, 0, dnn.WORKSPACE_LIMIT + 1, dnn.FMA_MATH),
                        (6, 0, 0, dnn.TENSOR_OP_MATH), (5, 3, 0, dnn.FMA_MATH),
                        (2, 0, 256, dnn.FMA_MATH)]
    m = _conv_model(2, 16, 4, 3, False, pads=[1, 1, 1, 1])
    feeds = {"x": _w(2, 4, 5, 5)}
    _check(m, feeds)
    assert [c[4:] for c in cudnn.calls] == [(2, 256)]
    assert cudnn.lib.maths == [dnn.FMA_MATH]
    monkeypatch.setenv("JITORT_CUDA_TF32", "1")
    cudnn.calls.clear()
    _check(m, feeds, rtol=1e-4, atol=1e-4)  # the stand-in computes exactly either way
    assert [c[4:] for c in cudnn.calls] == [(6, 0)]
    assert cudnn.lib.maths[-2:] == [dnn.DEFAULT_MATH, dnn.TENSOR_OP_MATH]


@pytest.mark.skipif(not SIMULATOR, reason="the heuristics' answer is the stand-in's")
def test_no_cudnn_algorithm_hands_the_convolution_to_the_rule(cudnn):
    """Nothing runs within the limits: the rule's next pick (cuBLAS here), results unchanged,
    and the descriptors made for the question destroyed."""
    cudnn.lib.ranked = [(7, 0, dnn.WORKSPACE_LIMIT + 1, dnn.FMA_MATH)]
    m = _conv_model(2, 16, 4, 3, False, pads=[1, 1, 1, 1])
    cm = _check(m, {"x": _w(2, 4, 5, 5)})
    assert dnn.forward not in _kinds(cm) and cudnn.calls == []
    assert conv._im2col_k in _kinds(cm)
    assert cudnn.lib.descs == {}


def test_asymmetric_pads_are_not_cudnns(cudnn):
    """cuDNN pads both sides alike: pads (1, 1, 0, 0) run another way, still right; pads
    whose end side no window reaches ((0, 0, 1, 1) at stride 2 on 5) are cuDNN's."""
    m = _conv_model(2, 16, 4, 3, False, pads=[1, 1, 0, 0])
    _check(m, {"x": _w(2, 4, 5, 5)})
    assert cudnn.calls == []
    assert not dnn.takes(np.float32, 2, 4, 5, 5, 16, 3, 3, 4, 4, 1, 1, 1, 1, 1, 1, 1)
    m = _conv_model(2, 16, 4, 3, False, pads=[0, 0, 1, 1], strides=[2, 2])
    _check(m, {"x": _w(2, 4, 5, 5)})
    assert [c[3] for c in cudnn.calls] == [(0, 0, 2, 2, 1, 1, 1)]


def test_default_rule_keeps_depthwise_direct(cudnn):
    """cuDNN serves both; the rule sends a depthwise convolution to the direct kernel and a
    dense one to cuDNN."""
    f32 = np.empty(0, np.float32)
    dense = conv.algorithms(f32, f32, f32, 16, 8, 8, 32, 3, 3, 8, 8, 1, 1, 1, 1, 1, f32)
    depthwise = conv.algorithms(f32, f32, f32, 16, 8, 8, 16, 3, 3, 8, 8, 1, 1, 1, 1, 16, None)
    assert dense[0] == "cudnn" and depthwise[0] == "cudnn"
    assert conv.default_algorithm(dense, 16, 32, 3, 3, 1) == "cudnn"
    assert conv.default_algorithm(depthwise, 16, 16, 3, 3, 16) == "direct"


def test_float16_convolution_through_cudnn(cudnn):
    """A float16 Conv stays float16 on the CUDA pipeline; cuDNN takes it (tensor-core math
    asked, float32 accumulation)."""
    f16 = 10  # TensorProto.FLOAT16
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])]
    m = make_model(nodes, [("x", f16, [2, 8, 5, 5])], [("y", f16, None)],
                   {"w": _w(16, 8, 3, 3).astype(np.float16), "b": _w(16).astype(np.float16)})
    x = _w(2, 8, 5, 5).astype(np.float16)
    cm = jitort.compile(m, device="cuda")
    np.testing.assert_allclose(cm(x)[0].astype(np.float32), _ort(m, {"x": x})[0].astype(
        np.float32), rtol=1e-2, atol=1e-2)
    assert [c[0] for c in cudnn.calls] == ["float16"]
    if SIMULATOR:
        assert cudnn.lib.maths[0] == dnn.TENSOR_OP_MATH


def test_the_plan_keeps_its_descriptors_until_dropped(cudnn):
    """A thread's Conv is made once per geometry (two convolutions of one shape share it) and
    its descriptors live as long as something holds it."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["h", "w", "b"], ["y"], pads=[1, 1, 1, 1])]
    m = make_model(nodes, [("x", F32, [1, 16, 5, 5])], [("y", F32, None)],
                   {"w": _w(16, 16, 3, 3), "b": _w(16)})
    cm = _check(m, {"x": _w(1, 16, 5, 5)}, rtol=1e-4, atol=1e-4)
    assert len(cudnn.calls) == 2 and len(dnn._local.convs) == 1
    assert cm.plans()
    if SIMULATOR:
        assert len(cudnn.lib.descs) == 4  # x, w, conv, y of the one geometry
        del cm
        dnn._local.convs.clear()
        import gc
        gc.collect()
        assert cudnn.lib.descs == {}


def _real_library():
    for path in dnn._candidates():
        try:
            return dnn.Cudnn(ctypes.CDLL(path))
        except (OSError, AttributeError):
            continue
    pytest.skip("no libcudnn on this machine (PyTorch's nvidia-cudnn wheels bring one)")


def test_the_ctypes_binding_against_the_library():
    """The real library's descriptors through the ctypes signatures (no GPU needed): cuDNN
    derives each convolution's output size as the launcher does."""
    lib = _real_library()
    assert lib.version() >= 8000
    for n, c, h, k, kh, p, s, d, g in [(2, 3, 8, 4, 3, 1, 2, 1, 1), (1, 16, 7, 16, 3, 1, 1, 1, 16),
                                       (4, 8, 9, 6, 3, 2, 1, 2, 2), (1, 3, 224, 64, 7, 3, 2, 1, 1)]:
        x = lib.tensor4d(dnn.DATA[np.dtype(np.float32)], n, c, h, h)
        w = lib.filter4d(dnn.DATA[np.dtype(np.float32)], k, c // g, kh, kh)
        cv = lib.conv2d(p, p, s, s, d, d, dnn.DATA[np.dtype(np.float32)], g, dnn.FMA_MATH)
        oh = (h + 2 * p - d * (kh - 1) - 1) // s + 1
        assert lib.output_dim(cv, x, w) == (n, k, oh, oh)
        for kind, desc in (("tensor", x), ("filter", w), ("conv", cv)):
            lib.destroy(kind, desc)
    with pytest.raises(dnn.CudnnError, match="BAD_PARAM"):
        lib.tensor4d(dnn.DATA[np.dtype(np.float32)], 0, 3, 8, 8)


def test_operands_off_16_bytes_run_another_way(cuda, cudnn):
    """An input starting one float into its array (a view into a split, say): cuDNN is not
    asked; the rule's next pick runs; aligned operands go to cuDNN."""
    from jitort.kernels.cuda.launch import recording
    x = cuda.to_device(_w(1 + 2 * 4 * 5 * 5))
    w, b = cuda.to_device(_w(16, 4, 3, 3)), cuda.to_device(_w(16))
    y = cuda.device_array(2 * 16 * 5 * 5, np.float32)
    for xo, want in ((1, False), (0, True)):
        with recording() as work:
            conv.conv2d_bias_act(x, xo, w, 0, b, 0, y, 0, 2, 4, 5, 5, 16, 3, 3, 5, 5, 1, 1, 1, 1,
                                 1, 1, 1, True, 1, 0.0)
        fns = [getattr(r, "fn", None) for r in work]
        assert (dnn.forward in fns) == want, xo
