"""Small models end to end on the CUDA backend (simulator in CI) against onnxruntime, plus the
runtime's contract: device-array I/O, partition with CPU fallback and counted copies, shape reuse."""
import os

import numpy as np
import pytest
from onnx import helper

import jitort
from jitort.cuda_runtime import CudaUnavailable
from tests.helpers import F32, make_model

RNG = np.random.default_rng(3)


def _w(*shape):
    return (RNG.standard_normal(shape) * 0.5).astype(np.float32)


def _ort(model, feeds):
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def mlp():
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h2"]), helper.make_node("MatMul", ["h2", "w2"], ["o"]),
             helper.make_node("Add", ["o", "b2"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["y"], axis=-1)]
    return make_model(nodes, [("x", F32, ["B", 8])], [("y", F32, ["B", 4])],
                      {"w1": _w(8, 16), "b1": _w(16), "w2": _w(16, 4), "b2": _w(4)})


def convnet(extra_cpu_node=False):
    """Conv-BN-Relu-MaxPool-Conv-GlobalAveragePool-Flatten-Gemm; optionally a Floor in the middle
    (no CUDA lowering: it runs on the CPU backend between two CUDA segments)."""
    nodes = [helper.make_node("Conv", ["x", "cw1", "cb1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2])]
    mid = "p1"
    if extra_cpu_node:
        nodes.append(helper.make_node("Floor", ["p1"], ["fl"]))
        mid = "fl"
    nodes += [helper.make_node("Conv", [mid, "cw2"], ["c2"], strides=[2, 2], group=2),
              helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
              helper.make_node("Flatten", ["g"], ["f"]),
              helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    inits = {"cw1": _w(4, 3, 3, 3), "cb1": _w(4), "s": _w(4), "bb": _w(4), "m": _w(4),
             "v": np.abs(_w(4)) + 0.5, "cw2": _w(6, 2, 3, 3), "fw": _w(5, 6), "fb": _w(5)}
    return make_model(nodes, [("x", F32, ["N", 3, 6, 6])], [("y", F32, ["N", 5])], inits)


def test_mlp_matches_onnxruntime(cuda):
    m = mlp()
    cm = jitort.compile(m, device="cuda")
    assert cm.placement_counts() == {"cuda": len(cm.graph.nodes)}
    for batch in (3, 5):
        x = RNG.standard_normal((batch, 8)).astype(np.float32)
        np.testing.assert_allclose(cm(x)[0], _ort(m, {"x": x})[0], rtol=1e-4, atol=1e-6)
    # one input copy in, one output copy out per call; weights were uploaded once
    assert cm.copies == {"h2d": 2, "d2h": 2}
    assert cm.transfer_plan() == [("x", "h2d"), ("y", "d2h")]
    # a new batch size reuses the generated driver (its text does not depend on the sizes)
    assert len(cm.generated_sources()) == 1


def test_convnet_matches_onnxruntime(cuda):
    m = convnet()
    cm = jitort.compile(m, device="cuda")
    assert set(cm.placement_counts()) == {"cuda"}, cm.summary()
    x = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(cm(x)[0], _ort(m, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_cpu_fallback_between_cuda_segments_counts_copies(cuda):
    m = convnet(extra_cpu_node=True)
    cm = jitort.compile(m, device="cuda")
    counts = cm.placement_counts()
    assert counts["cpu"] == 1 and counts["cuda"] == len(cm.graph.nodes) - 1, cm.summary()
    kinds = [getattr(s, "backend", "interp") for s in cm.steps]
    assert kinds == ["cuda", "cpu", "cuda"]
    plan = cm.transfer_plan()
    assert [d for _, d in plan] == ["h2d", "d2h", "h2d", "d2h"]  # x in, p1 out, fl in, y out
    x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(cm(x)[0], _ort(m, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert cm.copies == {"h2d": 2, "d2h": 2}


def test_interpreter_fallback_and_host_shape_nodes(cuda):
    # Shape -> Gather -> Unsqueeze -> Concat is a host computation feeding a Reshape; Compress
    # (a data-dependent output shape) has no compiled lowering on either backend and runs in
    # the interpreter
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
             helper.make_node("Unsqueeze", ["b", "zero1"], ["b1"]),
             helper.make_node("Concat", ["b1", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Compress", ["r", "keep"], ["md"], axis=1),
             helper.make_node("Exp", ["md"], ["y"])]
    inits = {"zero": np.array(0, np.int64), "zero1": np.array([0], np.int64),
             "minus1": np.array([-1], np.int64),
             "keep": np.array([True, False, True, True, False, True])}
    m = make_model(nodes, [("x", F32, ["N", 2, 3])], [("y", F32, None)], inits)
    cm = jitort.compile(m, device="cuda")
    counts = cm.placement_counts()
    assert counts["host"] >= 1 and counts["interp"] == 1 and counts["cuda"] >= 1, cm.summary()
    x = RNG.standard_normal((2, 2, 3)).astype(np.float32)
    np.testing.assert_allclose(cm(x)[0], _ort(m, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_device_arrays_in_and_out_are_zero_copy(cuda):
    m = mlp()
    cm = jitort.compile(m, device="cuda")
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    dx = cuda.to_device(x)
    (dy,) = cm.run_on_device(None, {"x": dx})
    assert cm.copies == {}  # nothing crossed the boundary
    np.testing.assert_allclose(dy.copy_to_host(), _ort(m, {"x": x})[0], rtol=1e-4, atol=1e-6)
    # a device input with the wrong shape is refused like a numpy one
    with pytest.raises(jitort.InvalidInput, match="dim 1"):
        cm.run(None, {"x": cuda.to_device(np.zeros((2, 7), np.float32))})
    with pytest.raises(jitort.InvalidInput, match="dtype"):
        cm.run(None, {"x": cuda.to_device(np.zeros((2, 8), np.float64))})


def test_workspace_is_planned_and_weights_uploaded_once(cuda):
    m = convnet()
    cm = jitort.compile(m, device="cuda")
    x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
    cm(x)
    uploaded = dict(cm._dev_consts)
    cm(x)
    assert cm._dev_consts.keys() == uploaded.keys() and len(uploaded) >= 5
    (plan,) = list(cm.plans())
    from jitort.planner import check_plan
    check_plan(plan.memory)
    assert plan.ws_bytes == plan.memory.lower_bound  # intermediates reuse each other's space


def test_unknown_device_and_unavailable_cuda(cuda, monkeypatch):
    with pytest.raises(ValueError, match="device"):
        jitort.compile(mlp(), device="tpu")
    monkeypatch.setattr(cuda, "is_available", lambda: False)
    with pytest.raises(CudaUnavailable, match="NUMBA_ENABLE_CUDASIM"):
        jitort.compile(mlp(), device="cuda")
    assert issubclass(CudaUnavailable, jitort.JitortError)


@pytest.mark.skipif(os.environ.get("JITORT_TEST_CUDA") != "gpu", reason="timing needs a real GPU")
def test_real_gpu_smoke(cuda):  # pragma: no cover - run with JITORT_TEST_CUDA=gpu on a GPU host
    x = RNG.standard_normal((64, 8)).astype(np.float32)
    m = mlp()
    np.testing.assert_allclose(jitort.compile(m, device="cuda")(x)[0], _ort(m, {"x": x})[0],
                               rtol=1e-4, atol=1e-6)


def test_kernel_module_names_hash_their_header(monkeypatch):
    """A CUDA kernel module's name covers the header it is written with: a new header (jitort,
    Numba or kernel-library version) is a new file, not a "damaged" one rewritten in place."""
    from jitort.codegen import cuda as cg
    from jitort.codegen import module as modmgr
    em = cg.CudaEmitter.__new__(cg.CudaEmitter)  # kernel() only needs its table
    em.kernels = {}
    src = "def __KNAME__(x):\n    pass\n"
    first = em.kernel("kc_relu", src)
    monkeypatch.setattr(modmgr, "header", lambda kernel_modules=(): "# another version\n")
    second = em.kernel("kc_relu", src)
    assert first != second and first.startswith("kc_relu_") and second.startswith("kc_relu_")
    assert em.kernels[second] == src.replace("__KNAME__", second)


def test_numpy_row_stack_alias_restored(monkeypatch):
    """numba-cuda 0.30 registers an overload of np.row_stack, which numpy 2.5 removed: the
    backend puts the alias back before numba.cuda is used (seen on the GPU machine)."""
    from jitort import cuda_runtime
    monkeypatch.delattr(np, "row_stack", raising=False)
    cuda_runtime._numpy_compat()
    assert np.row_stack is np.vstack
